"""summary.json as typed values: the whole file, for the master that writes it and every reader. Pure.

The blocks (``blocks.py``, ``why.py``, ``classes.py``, ``cost.py``) are built by the master (``analysis/``) and
encoded at the edge (``analysis/results.py``); these Structs read all of a file back, for the versions kneecap reads
(``kneecap.summary/1``, ``/2``, ``/3``, docs/results.md); ``report/validate.py`` checks a file against them::

    summary = load_summary(data, "summary.json")   # every problem with its key path, or the Summary
    summary.knee.found, summary.steps[0].latency_ms["ttft"].p99, summary.steps[0].level

Keys a newer file adds are ignored. A key a later version added and kneecap always writes since has a plain
default, what an older file meant (``fleet_changed=False``); one written only when it applies (``server``,
``cost``, the open loop's ``arrivals_per_s``) is ``UNSET`` when absent, so a file encodes back to its own keys.
The load level is ``users`` (closed loop) or ``rate_rps`` (open loop): ``Step.level``, ``Knee.level``.
``Meta(extra=...)`` marks the level keys (``level``) and a key required from a version on (``since``).

Prose at the edge: ``cost.line`` is still written (older readers print it) but readers say
``Summary.cost_line``, rendered from the figures by the function that wrote it. ``knee.reason`` stays the
run's prose: its sentence cites figures the file does not keep (the elasticities between the judged steps, the
server's and the cache's before/after, the tail's cause), so it cannot be said again from the fields.
"""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import UNSET, Meta, UnsetType

from harness.summary.blocks import (
    Answers,
    CancelSlots,
    Delivery,
    Generator,
    Percentiles,
    PrefixCache,
    Server,
    Sessions,
    SloCheck,
    Stream,
    Throughput,
    Verify,
)
from harness.summary.classes import TrafficClassStep
from harness.summary.cost import RunCost, StepCost
from harness.summary.view import View
from harness.summary.why import Tail, Timeline, TtftSplit

__all__ = ["Clock", "FleetEvent", "Influx", "Knee", "Search", "SearchStep", "Slo", "Step", "Summary"]

_CLOSED = Meta(extra={"level": "closed"})
_OPEN = Meta(extra={"level": "open"})


class Step(View, frozen=True, kw_only=True):
    """One entry of ``steps[]`` (written from ``analysis.results.StepResult``)."""

    index: int
    users: Annotated[float | UnsetType, _CLOSED] = UNSET
    rate_rps: Annotated[float | UnsetType, _OPEN] = UNSET
    duration_s: float
    warmup_s: float
    requests: int
    ok: int
    failures: dict[str, int]
    failure_samples: dict[str, str] = {}
    warmup_requests: int
    warmup_shapes: int | UnsetType = UNSET
    """Shape warm-up requests among ``warmup_requests`` (the run's first step); absent when none were sent."""
    arrivals_per_s: float | UnsetType | None = UNSET
    dropped_arrivals: int | UnsetType | None = UNSET
    throughput: Throughput
    latency_ms: dict[str, Percentiles]
    tokens_per_s_per_user: Percentiles
    output_tokens_counted: int
    prompt_length_error: float | None
    generator: Generator
    fleet_changed: bool = False
    workers_lost: list[str] = []
    workers_joined: list[str] = []
    complete: bool
    counted: bool | UnsetType = UNSET
    why: str | UnsetType | None = UNSET
    """Whether the step counts, and why not (``analysis.counted``: the rule readers apply, older files too)."""
    stationary: bool | None
    slo_passed: bool | None
    slo: list[SloCheck]
    server: Server | UnsetType = UNSET
    prefix_cache: PrefixCache | UnsetType = UNSET
    sessions: Sessions | UnsetType = UNSET
    stream: Stream | UnsetType = UNSET
    answers: Answers | UnsetType = UNSET
    """Answers that asked for an exact length, and how many ended short; absent when none asked (and from older
    files)."""
    verify: Verify | UnsetType = UNSET
    """``verify:``: how many answers changed; absent when none was compared (and from older files)."""
    delivery: Delivery | UnsetType = UNSET
    """How the chunks came; absent without streams (and from older files)."""
    new_connections: int | UnsetType = UNSET
    new_connection_share: float | UnsetType | None = UNSET
    """Absent from files older than it; None without requests."""
    cancelled: int | UnsetType = UNSET
    """Requests the user hung up on (outside ``requests``); absent when none was."""
    cancelled_share: float | UnsetType = UNSET
    cancelled_by: dict[str, int] | UnsetType = UNSET
    cancelled_output_tokens: int | UnsetType = UNSET
    cancelled_slots: CancelSlots | UnsetType = UNSET
    """With hang-ups and the server's running gauge: did it free their slots; absent otherwise."""
    tail: Tail | UnsetType = UNSET
    ttft_split: TtftSplit | UnsetType = UNSET
    timeline: Timeline | UnsetType = UNSET
    """Its requests over time; absent for a step not judged from request rows (and from older files)."""
    adapters: dict[str, int] | UnsetType = UNSET
    """``endpoint.adapters``: measured requests per LoRA adapter; absent without adapters."""
    probes: TrafficClassStep | UnsetType | None = UNSET
    """``load.probes``: the probe requests apart (class "probe"); absent without probes (and from older files)."""
    classes: list[TrafficClassStep] | UnsetType | None = UNSET
    """``workload.mix``: each class in the step; absent without a mix (and from older files)."""
    cost: StepCost | UnsetType = UNSET
    started_at: float | UnsetType = UNSET
    """Wall clock (epoch s) when it began; absent from older files."""
    ended: str | UnsetType = UNSET
    """Why the step ended ("min", "precision", "max_duration", "stopped", ...); absent while it runs."""

    @property
    def level(self) -> float:
        """The step's load: users (closed loop) or requests/s (open loop)."""
        return self.users if self.rate_rps is UNSET else self.rate_rps  # type: ignore[return-value]  # users or rate_rps is set


class Knee(View, frozen=True, kw_only=True):
    found: bool
    confirmed: bool
    step_index: int | None
    users: Annotated[float | UnsetType | None, _CLOSED] = UNSET
    rate_rps: Annotated[float | UnsetType | None, _OPEN] = UNSET
    metric: str
    tail: Annotated[str, Meta(extra={"since": 2})] = "p99"
    """Which p99 the knee judged: ``p99_slo`` from version 2 on (version 1 files judged the plain p99)."""
    p99_before_ms: float | None
    p99_after_ms: float | None
    throughput_before: float | None
    throughput_after: float | None
    confidence: str | None
    reason: str
    """The knee finder's reason and why (server, prefix cache, tail): prose, as the run said it."""
    why: str | UnsetType = UNSET
    """The why alone: the server's queue, the prefix cache, the tail past the knee; absent from older files."""

    @property
    def level(self) -> float | None:
        """The knee's load (None when not found)."""
        level = self.users if self.rate_rps is UNSET else self.rate_rps
        return None if level is UNSET else level


class Slo(View, frozen=True, kw_only=True):
    thresholds: list[str]
    passed: bool | None
    max_load_within_slo: float | None


class FleetEvent(View, frozen=True, kw_only=True):
    """A worker lost (missed its heartbeats, or quit) or joined while the run went on."""

    kind: Literal["lost", "joined"]
    worker: str
    at: float
    """Wall-clock time (s since the epoch) when the master noticed."""
    steps: list[int]
    """The steps it changed (the running one, and the one before when the loss may predate the step change)."""


class Clock(View, frozen=True, kw_only=True):
    """A worker's wall clock against the master's (``metrics.clocks``)."""

    offset_ms: float | None
    bound_ms: float | None
    rtt_ms: float | None
    samples: int
    drift_ms: float | UnsetType | None = UNSET


class Influx(View, frozen=True, kw_only=True):
    """The InfluxDB sink's account (``sinks.influx``)."""

    url: str | UnsetType = UNSET
    bucket: str | UnsetType = UNSET
    written: int = 0
    unwritten: int = 0
    spool_file: str | None = None
    last_error: str | None = None


class SearchStep(View, frozen=True, kw_only=True):
    """One level a search visited (``analysis/search.search_summary``)."""

    step: int
    level: float
    why: str
    verdict: Literal["good", "past", "pending", "not judged"]
    ended: str | None
    warmup_s: float
    warmup: str


class Search(View, frozen=True, kw_only=True):
    """A search's grid, where it stands and its path in visiting order (``load.mode: search | open_search``)."""

    mode: Literal["search", "open_search"]
    unit: str
    min: float
    max: float
    resolution: float
    state: Literal["growing", "bracketing", "confirming", "done", "no knee", "stopped"]
    bracket: tuple[float, float] | None
    next: float | None
    line: str
    path: list[SearchStep]


class Summary(View, frozen=True, kw_only=True):
    """A whole summary.json (module docstring)."""

    schema: str
    run_id: str
    scenario: str
    host: str
    model: str
    started_at: float
    ended_at: float
    mode: Literal["closed", "open"]
    stop_reason: str | None
    workers: int
    steps: list[Step]
    knee: Knee
    slo: Slo
    exit_code: int
    degraded: bool = False  # a worker was lost (version 2 on; early version 2 files lack it, and fleet_events)
    fleet_events: list[FleetEvent] = []
    influx: Influx | UnsetType = UNSET
    merge_errors: int | UnsetType = UNSET
    clocks: dict[str, Clock] | UnsetType = UNSET
    """Fleets only, with ``clock_warnings``: each worker's clock."""
    clock_warnings: list[str] | UnsetType = UNSET
    cost: RunCost | UnsetType = UNSET
    search: Search | UnsetType = UNSET
    invalid: str | UnsetType = UNSET
    """Why the figures are not the workload's: over 1% of its requests overflowed the model's context."""
    incomplete: str | UnsetType = UNSET
    """Why the results stop short: the master was lost, these are the steps of its last checkpoint (``kneecap run``,
    ``outcome.keep_checkpoint``)."""

    @property
    def cost_line(self) -> str:
        """The verdict's cost line, from the figures; "" without a ``cost:`` block."""
        return "" if self.cost is UNSET else self.cost.render(self.mode)
