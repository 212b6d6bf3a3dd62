"""summary.json typed once: the blocks the master builds and every reader decodes (``model.Summary``). Pure."""

from harness.summary.blocks import (
    SHARED_STAMP_LIMIT,
    Answers,
    CacheClient,
    CacheServer,
    CancelSlots,
    ChangedAnswer,
    Delivery,
    FailedAnswer,
    Generator,
    Percentiles,
    PrefixCache,
    Server,
    Sessions,
    SloCheck,
    Stream,
    Throughput,
    TurnBucket,
    Verify,
)
from harness.summary.classes import ClassCost, ClassSpeed, TrafficClassStep
from harness.summary.cost import BASES, RunCost, StepCost, Tokens, render_cost_line
from harness.summary.model import Clock, FleetEvent, Influx, Knee, Search, SearchStep, Slo, Step, Summary
from harness.summary.view import READABLE_SCHEMAS, SCHEMA, View, level_key, level_unit
from harness.summary.why import (
    Attribution,
    Pauses,
    PauseSeen,
    SplitPart,
    Tail,
    Timeline,
    TtftClient,
    TtftServer,
    TtftSplit,
)

__all__ = ["BASES", "READABLE_SCHEMAS", "SCHEMA", "SHARED_STAMP_LIMIT", "Answers", "Attribution", "CacheClient",
           "CacheServer", "CancelSlots", "ChangedAnswer", "ClassCost", "ClassSpeed", "Clock", "Delivery",
           "FailedAnswer", "FleetEvent", "Generator", "Influx", "Knee", "PauseSeen", "Pauses", "Percentiles",
           "PrefixCache", "RunCost", "Search", "SearchStep", "Server", "Sessions", "Slo", "SloCheck", "SplitPart",
           "Step", "StepCost", "Stream", "Summary", "Tail", "Throughput", "Timeline", "Tokens", "TrafficClassStep",
           "TtftClient", "TtftServer", "TtftSplit", "TurnBucket", "Verify", "View", "level_key", "level_unit",
           "render_cost_line"]
