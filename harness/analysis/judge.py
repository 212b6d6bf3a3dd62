"""Judging one step: tail latency with failures as misses, SLO verdicts, stationarity. Pure.

Failures are never dropped from the tail: a failed or timed-out request is a request that missed
every latency SLO, so a quantile over n requests of which f failed ranks the failures above every
success (+inf); for the speed floor they rank below (0 tokens/s).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from harness.analysis.knee import StepPoint
from harness.metrics.aggregate import Bucket, ci_ranks
from harness.metrics.sketch import Sketch
from harness.spec.slo import Threshold
from harness.summary import SloCheck

if TYPE_CHECKING:
    from harness.analysis.server import ServerStep

__all__ = ["STATIONARY_RATIO", "evaluate_slo", "is_stationary", "miss_quantile", "miss_quantile_ci", "misses",
           "step_point"]

STATIONARY_RATIO = 1.25
"""A step is stationary when the median of its second half is within 1.25x of its first half's."""


def _at(s: Sketch | None, rank: int, failures: int, high: bool) -> float:
    ok = s.count if s is not None else 0
    if high:
        return s.value_at_rank(rank) if rank < ok else math.inf  # type: ignore[union-attr]  # rank < ok: s not None
    return 0.0 if rank < failures else s.value_at_rank(rank - failures)  # type: ignore[union-attr]  # rank >= failures: s not None


def miss_quantile(s: Sketch | None, q: float, failures: int, *, high: bool = True) -> float:
    """The q-quantile over successes plus ``failures`` ranked as misses (above all when ``high``)."""
    n = (s.count if s is not None else 0) + failures
    if n == 0:
        return math.nan
    return _at(s, math.floor(q * (n - 1)), failures, high)


def miss_quantile_ci(s: Sketch | None, q: float, failures: int, z: float = 1.96) -> tuple[float, float] | None:
    """Order-statistic CI (``ci_ranks``) of ``miss_quantile``; None below 2 requests."""
    n = (s.count if s is not None else 0) + failures
    if n < 2:
        return None
    lo, hi = ci_ranks(n, q, z)
    return _at(s, lo, failures, True), _at(s, hi, failures, True)


def misses(bucket: Bucket, metric: str) -> int:
    """What ranks above every value of ``metric``: failed requests, or failed sessions for a session metric."""
    if metric.startswith("session_"):
        return bucket.sessions.failed if bucket.sessions is not None else 0
    return sum(bucket.failures.values())


def evaluate_slo(thresholds: tuple[Threshold, ...], bucket: Bucket) -> list[SloCheck]:
    """Each threshold on one step: the observed value (ms, tokens/s or a fraction) and pass/fail."""
    out = []
    fails = sum(bucket.failures.values())
    for t in thresholds:
        if t.metric == "error_rate":
            observed = fails / bucket.requests if bucket.requests else math.nan
        elif t.metric == "short_answer_rate":
            asked = bucket.extra.get("length_asked", 0)
            observed = bucket.extra.get("short_answers", 0) / asked if asked else math.nan
        elif t.metric.startswith("answers_"):  # changed of those compared, failed of those checked (verify:)
            # a step that compared (checked) no answer has nothing to fail: None, passed
            whole = "answers_verified" if t.metric == "answers_changed_rate" else "answers_checked"
            verified = bucket.extra.get(whole, 0)
            observed = bucket.extra.get(t.metric.removesuffix("_rate"), 0) / verified if verified else math.nan
            if not verified:
                out.append(SloCheck(threshold=t.text, observed=None, passed=True, abort_on_fail=t.abort_on_fail))
                continue
        elif t.metric == "tokens_per_s_per_user":
            assert t.percentile is not None  # a p(...) threshold: parse_threshold sets it for non-rate metrics
            observed = miss_quantile(bucket.sketches.get("tokens_per_s"), t.percentile / 100, fails, high=False)
        else:  # a latency, or a session metric (its misses are failed sessions)
            v = miss_quantile(bucket.sketches.get(t.metric), t.percentile / 100,  # type: ignore[operator]  # p(...): percentile set
                              misses(bucket, t.metric))
            observed = v * 1000
        passed = observed == observed and t.passes(observed)
        out.append(SloCheck(threshold=t.text, observed=None if math.isnan(observed) else
                            ("inf" if math.isinf(observed) else round(observed, 4)), passed=passed,
                            abort_on_fail=t.abort_on_fail))
    return out


def is_stationary(first: Sketch | None, second: Sketch | None) -> bool | None:
    """Latency not trending inside the step: second-half median within ``STATIONARY_RATIO`` of the first half's
    (or within 2 ms, for tiny latencies). None when either half has fewer than 10 samples."""
    if first is None or second is None or first.count < 10 or second.count < 10:
        return None
    a, b = first.quantile(0.5), second.quantile(0.5)
    return b <= a * STATIONARY_RATIO or b - a < 0.002


def step_point(index: int, load: float, bucket: Bucket, metric: str, reliable: bool, duration_s: float, *,
               lag_ms: float = 0.0, server: ServerStep | None = None) -> StepPoint:
    """The step as the knee finder sees it: p99 of ``metric`` with misses, its CI, output (else input) tokens/s, the
    client's loop lag p99 (``lag_ms``) and the server's mean waiting requests (from ``server``'s scrapes)."""
    fails = misses(bucket, metric)
    s = bucket.sketches.get(metric)
    p99 = miss_quantile(s, 0.99, fails) * 1000
    ci = miss_quantile_ci(s, 0.99, fails)
    # Throughput in output tokens/s; an endpoint that generates nothing (embeddings) in input tokens/s.
    work = bucket.output_tokens or bucket.input_tokens or bucket.requests
    return StepPoint(index, load, p99, (ci[0] * 1000, ci[1] * 1000) if ci else None,
                     work / max(duration_s, 1e-9), reliable, (s.count if s is not None else 0) + fails, lag_ms,
                     server.waiting_mean if server is not None else None)
