"""SLO thresholds, written like k6's. Pure.

Grammar (one string per threshold; a metric takes one string, a list, or ``{threshold, abort_on_fail}``
items)::

    threshold := "p(" PERCENTILE ")" OP NUMBER        latency metrics, in ms; tokens/s metric
               | "rate" OP NUMBER                     error_rate, short_answer_rate: a fraction in [0, 1]
    OP        := "<" | "<=" | ">" | ">="

Metrics (the registry, ``metrics.vocabulary``, marks which): ``ttft``, ``tpot``, ``itl``, ``e2e``, ``ttfo`` (first
answer token), ``reasoning_time`` (milliseconds), ``tokens_per_s_per_user`` (the speed floor, e.g. ``p(5)>20``: 95%
of requests stream at least 20 tokens/s), ``error_rate``, ``short_answer_rate`` (answers that asked for an exact
length and ended before it, over those that asked); with sessions also ``session_ttft`` (each session's own
TTFT p99, ms) and ``session_duration`` (ms, think time included).
Example: ``{ttft: ["p(95)<500", {threshold: "p(99)<2000", abort_on_fail: true}], error_rate: "rate<0.01"}``.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.checker import Checker
from harness.metrics.record import RequestRecord
from harness.metrics.vocabulary import METRIC, SLO_METRICS

__all__ = ["LATENCY_METRICS", "SESSION_METRICS", "SLO_METRICS", "Threshold", "parse_threshold", "request_meets",
           "slo_from_spec"]

LATENCY_METRICS = tuple(m for m in SLO_METRICS if METRIC[m].kind == "latency" and METRIC[m].of != "session")
"""The request latencies a threshold may use (ms); the registry (``metrics.vocabulary``) marks them."""
SESSION_METRICS = tuple(m for m in SLO_METRICS if METRIC[m].of == "session")
"""Per session (sessions workloads): its own TTFT p99, and its duration with think time (ms); a failed session
is a miss."""
_OPS: dict[str, Callable[[float, float], bool]] = {"<": operator.lt, "<=": operator.le, ">": operator.gt,
                                                   ">=": operator.ge}
_PATTERN = re.compile(r"^\s*(?:p\(\s*(\d+(?:\.\d+)?)\s*\)|(rate))\s*(<=|>=|<|>)\s*(-?\d+(?:\.\d+)?)\s*$")


@dataclass(frozen=True)
class Threshold:
    metric: str
    percentile: float | None
    """Percentile in (0, 100) for ``p(...)``; None for ``rate``."""
    op: str
    value: float
    abort_on_fail: bool = False

    @property
    def text(self) -> str:
        left = "rate" if self.percentile is None else f"p({self.percentile:g})"
        return f"{self.metric}: {left}{self.op}{self.value:g}"

    def passes(self, observed: float) -> bool:
        return _OPS[self.op](observed, self.value)


def parse_threshold(metric: str, text: str, abort_on_fail: bool = False) -> Threshold:
    """Parse one threshold; ValueError says what the grammar expects."""
    if metric not in SLO_METRICS:
        raise ValueError(f"unknown SLO metric {metric!r}; choose one of {', '.join(SLO_METRICS)}")
    m = _PATTERN.match(text) if isinstance(text, str) else None
    if not m:
        raise ValueError(f"{text!r} is not a threshold; write e.g. \"p(95)<500\" or \"rate<0.01\"")
    pct, rate, op, value = m.groups()
    if METRIC[metric].kind == "rate":
        if not rate:
            raise ValueError(f"{metric} takes \"rate<X\" (a fraction), got {text!r}")
        if not 0 <= float(value) <= 1:
            raise ValueError(f"{metric} threshold must be within [0, 1], got {value}")
        return Threshold(metric, None, op, float(value), abort_on_fail)
    if rate:
        raise ValueError(f"{metric} takes a percentile such as \"p(95)<500\", not {text!r}")
    p = float(pct)
    if not 0 < p < 100:
        raise ValueError(f"percentile must be within (0, 100), got {pct}")
    if float(value) < 0:
        raise ValueError(f"{metric} threshold must be >= 0, got {value}")
    return Threshold(metric, p, op, float(value), abort_on_fail)


def request_meets(thresholds: tuple[Threshold, ...] | list[Threshold]) -> Callable[[RequestRecord], bool] | None:
    """The per-request test behind goodput: each latency threshold's value is a per-request limit (ITL uses
    the request's mean gap, i.e. TPOT), the speed floor a per-request minimum. None when no threshold applies."""
    limits: list[tuple[str, float, Callable[[float, float], bool], float]] = []
    for t in thresholds:
        m = METRIC[t.metric]
        if m.of == "ok" and m.kind != "rate":  # rates and the session metrics judge the step and sessions
            # an ok-request metric names its source
            limits.append((m.limit or m.source, m.scale, _OPS[t.op], t.value))  # type: ignore[arg-type]
    if not limits:
        return None

    def meets(rec: RequestRecord) -> bool:
        for attribute, scale, op, value in limits:
            observed = getattr(rec, attribute)
            if observed is not None and not op(observed * scale, value):
                return False
        return True

    return meets


def slo_from_spec(node: Any, path: str, check: Checker) -> tuple[Threshold, ...]:
    """An ``slo`` block (the scenario's, or a traffic class's at ``path``); every problem goes to ``check``."""
    if check.mapping(node, path, SLO_METRICS) is None:
        return ()
    out = []
    for metric, items in node.items():
        if metric not in SLO_METRICS:
            continue
        for i, item in enumerate(items if isinstance(items, list) else [items]):
            where = f"{path}.{metric}" + (f"[{i}]" if isinstance(items, list) else "")
            abort = False
            if isinstance(item, dict):
                if check.mapping(item, where, ("threshold", "abort_on_fail"), required=("threshold",)) is None:
                    continue
                abort = check.boolean(item, "abort_on_fail", where, False)
                item = item.get("threshold")
            try:
                out.append(parse_threshold(metric, item, abort))
            except ValueError as exc:
                check.fail(where, str(exc))
    return tuple(out)
