"""A sketch's percentiles with their confidence intervals: exact order-statistic ranks of a quantile, mapped to values
through the sketch; a step's summary of one metric. Pure (split from ``metrics/aggregate.py``, which re-exports them).
"""

from __future__ import annotations

import functools
import math
from typing import Any

from harness.metrics.sketch import Sketch

__all__ = ["ci_min_samples", "ci_ranks", "quantile_ci", "summarize_sketch"]


@functools.lru_cache(maxsize=256)  # a judgement's callers ask again; summaries keep theirs on the sketch
def ci_ranks(n: int, q: float, z: float = 1.96) -> tuple[int, int]:
    """Distribution-free CI ranks (0-based) of the q-quantile of n samples: the exact Binomial(n, q) ranks l, u with
    P(K <= l) <= a/2 and P(K <= u) >= 1 - a/2 (K: samples below the true quantile; a = 2·(1 - Φ(z)), 5% at the
    default), so [x_(l), x_(u)] covers it with at least 1 - a. Clamped to the sample: when even the largest sample
    is not far enough out (n < ``ci_min_samples``), the upper end is the sample max and bounds nothing."""
    tail = math.erfc(z / math.sqrt(2)) / 2
    mean, sd = n * q, math.sqrt(n * q * (1 - q))
    lo_k, hi_k = max(0, math.floor(mean - 10 * sd - 2)), min(n, math.ceil(mean + 10 * sd + 2))
    # the pmf over mean ± 10 sd: the mass outside is below 1e-20, and the sum costs O(sd), not O(n)
    log_q, log_p = math.log(q), math.log1p(-q)
    log_first = (math.lgamma(n + 1) - math.lgamma(lo_k + 1) - math.lgamma(n - lo_k + 1) + lo_k * log_q
                 + (n - lo_k) * log_p)
    ranks = _ranks_by_array if hi_k - lo_k > ARRAY_TERMS else _ranks_by_term
    lo, hi = ranks(n, q, tail, lo_k, hi_k, log_first)
    return max(0, lo), min(n - 1, n if hi is None else hi)


ARRAY_TERMS = 2048
"""Terms of the pmf's window from which ``ci_ranks`` sums them as an array: a step of 180k requests' ITL sketch
(36M tokens, sd 3,000 at the median) is ~36k terms, ~2 ms a quantile term by term, and a master's checkpoint asks
for 3 quantiles of each sketch with the loop held (``benchmarks/fleet_merge.py``, ``judge_loop_ms_max``)."""


def _ranks_by_term(n: int, q: float, tail: float, lo_k: int, hi_k: int, log_first: float) -> tuple[int, int | None]:
    # Each term from the one before (pmf(k+1) = pmf(k)·(n−k)/(k+1)·q/(1−q)): three lgamma a term made one summary
    # of a 1.3M-sample ITL sketch tens of ms of the master's loop. The first term, 10 sd out (or k = 0: 2^-111 at
    # n = 111, q = 0.5), is 4e-34 at the least (n up to 10^7, q 0.5-0.999), far from underflow.
    pmf, odds = math.exp(log_first), q / (1 - q)
    cdf, lo, hi = 0.0, lo_k - 1, None
    for k in range(lo_k, hi_k + 1):
        cdf += pmf
        if cdf <= tail:
            lo = k
        if cdf >= 1 - tail:
            hi = k
            break  # nothing after it changes lo or hi: the upper 8 sd of the window are not summed
        pmf *= (n - k) / (k + 1) * odds
    return lo, hi


def _ranks_by_array(n: int, q: float, tail: float, lo_k: int, hi_k: int, log_first: float) -> tuple[int, int | None]:
    # the same sums in numpy (the master's; loaded at its run start): the log pmf by a running sum of the terms'
    # log ratios, then the cdf by a running sum of the pmf
    import numpy as np

    k = np.arange(lo_k, hi_k, dtype=np.float64)
    steps = np.log((n - k) / (k + 1) * (q / (1 - q)))
    cdf = np.cumsum(np.exp(np.concatenate(([log_first], log_first + np.cumsum(steps)))))
    lo = lo_k - 1 + int(np.searchsorted(cdf, tail, side="right"))
    at = int(np.searchsorted(cdf, 1 - tail, side="left"))
    return lo, (lo_k + at if at < len(cdf) else None)


def ci_min_samples(q: float, z: float = 1.96) -> int:
    """The fewest samples whose largest bounds the q-quantile's CI from above (``ci_ranks``): 368 for p99 at 95%."""
    tail = math.erfc(z / math.sqrt(2)) / 2
    return math.ceil(math.log(tail) / math.log(q))


def quantile_ci(s: Sketch, q: float, z: float = 1.96) -> tuple[float, float] | None:
    """The order-statistic CI of the q-quantile mapped to values through the sketch; None below 2 samples."""
    if s.count < 2:
        return None
    lo, hi = ci_ranks(s.count, q, z)
    return s.value_at_rank(lo), s.value_at_rank(hi)


def summarize_sketch(s: Sketch, scale: float = 1000.0) -> dict:
    """count, mean, p50…p99.9, max and the p50/p95/p99 CIs (``quantile_ci``), in ms by default (``scale`` 1 for
    tokens/s). Kept on the sketch while its samples stay the same (``Sketch.remembered``); a copy each call."""
    if s.count == 0:
        return {"count": 0}
    kept = s.remembered(("summary", scale), lambda s: _summary(s, scale))
    return {k: list(v) if isinstance(v, list) else v for k, v in kept.items()}


def _summary(s: Sketch, scale: float) -> dict:
    r = 3
    out: dict[str, Any] = {
        "count": s.count, "mean": round(s.mean * scale, r), "p50": round(s.quantile(0.5) * scale, r),
        "p90": round(s.quantile(0.9) * scale, r), "p95": round(s.quantile(0.95) * scale, r),
        "p99": round(s.quantile(0.99) * scale, r), "p999": round(s.quantile(0.999) * scale, r),
        "max": round(s.max * scale, r)}
    for name, q in (("p50_ci", 0.5), ("p95_ci", 0.95), ("p99_ci", 0.99)):
        ci = quantile_ci(s, q)
        out[name] = [round(ci[0] * scale, r), round(ci[1] * scale, r)] if ci else None
    return out
