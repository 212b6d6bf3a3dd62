"""One class of a mix in one step, typed (summary.json's ``steps[].classes[]`` and ``steps[].probes``). Pure."""

from __future__ import annotations

from harness.summary.blocks import Percentiles, SloCheck
from harness.summary.view import View
from harness.summary.why import Tail, TtftSplit

__all__ = ["ClassCost", "ClassSpeed", "TrafficClassStep"]


class ClassSpeed(View, frozen=True, kw_only=True):
    count: int
    p50: float
    p5: float
    p1: float

class ClassCost(View, frozen=True, kw_only=True):
    """A class's cost (``analysis.mix.rows``): its share of the output tokens; metered, what its requests cost."""

    currency: str
    output_share: float | None = None
    test_cost: float | None = None
    per_request: float | None = None

class TrafficClassStep(View, frozen=True, kw_only=True):
    """One class of a mix in one step (``analysis.mix.classes.ClassStep``)."""

    name: str
    weight_share: float | None
    requests: int
    share: float | None
    failed: int
    error_rate: float | None
    latency_ms: dict[str, Percentiles] = {}
    tokens_per_s_per_user: ClassSpeed | None = None
    output_tokens: int = 0
    short_answers: int = 0
    short_answer_share: float | None = None
    slo: list[SloCheck] = []
    slo_passed: bool | None = None
    sampled: str | None = None
    cancelled: int = 0
    cancelled_share: float | None = None
    tail: Tail | None = None
    ttft_split: TtftSplit | None = None
    tokens: dict[str, int] | None = None
    cost: ClassCost | None = None
    users: int | None = None
    answers: dict[str, float | None] | None = None
