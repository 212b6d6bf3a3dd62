"""A step's share of a server's latency histogram, and what its buckets can say. Pure.

A server's histogram is cumulative since it started (``client.server_metrics.Histogram``); ``delta(before,
after)`` of two scrapes is the step's own observations. A count that went down means the server restarted
(a counter reset), and bounds that changed mean a server with another configuration: both give None, never
a difference of unrelated counts.

A quantile from buckets is known only to its bucket. ``quantile(h, q)`` gives the bucket's bounds as ``low``
and ``high`` (the true nearest-rank quantile of the observations lies within them, tested on synthetic samples)
and an ``estimate`` by linear interpolation inside the bucket, as Prometheus' ``histogram_quantile`` does. The
width can be large: vLLM's TTFT buckets around 1 s are 0.75–1.0–2.5 s, so a p99 of "1.6 s" reads 1.0–2.5 s.
A quantile in the +Inf bucket is only known to be above the last finite bound: ``estimate = low`` = that
bound and ``high`` None. Observations are durations (>= 0): the first bucket starts at 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from harness.client.server_metrics import Histogram

__all__ = ["Quantile", "delta", "mean", "quantile"]

_RANK_SLACK = 1e-12
"""Relative slack on q·n, so that a float rank like 0.7 × 10 = 7.000000000000001 still reads as rank 7."""


@dataclass(frozen=True, slots=True)
class Quantile:
    """A quantile read from buckets: ``low <= true value <= high``; ``high`` None for the +Inf bucket."""

    estimate: float
    low: float
    high: float | None

    @property
    def error(self) -> float | None:
        """The largest distance from ``estimate`` to the true value the bucket allows; None when unbounded."""
        return None if self.high is None else max(self.estimate - self.low, self.high - self.estimate)


def delta(before: Histogram | None, after: Histogram | None) -> Histogram | None:
    """The observations between two scrapes of one histogram; None when either is missing, the bucket bounds
    differ (another server configuration) or a count went down (the server restarted)."""
    if before is None or after is None or before.bounds != after.bounds:
        return None
    if after.count < before.count or any(a < b for a, b in zip(after.counts, before.counts, strict=True)):
        return None
    return Histogram(bounds=after.bounds, counts=tuple(a - b for a, b in zip(after.counts, before.counts, strict=True)),
                     sum=after.sum - before.sum, count=after.count - before.count)


def mean(h: Histogram | None) -> float | None:
    """sum / count: exact, no bucket error; None without observations."""
    if h is None or h.count <= 0:
        return None
    return h.sum / h.count


def quantile(h: Histogram | None, q: float) -> Quantile | None:
    """The ``q`` quantile (0 <= q <= 1) of ``h``'s observations with its bucket's bounds; None without any.
    Raises ``ValueError`` for a q outside [0, 1]."""
    if not 0.0 <= q <= 1.0:  # NaN fails too
        raise ValueError(f"quantile q must be within [0, 1], got {q!r}")
    if h is None or not h.counts:
        return None
    counts, bounds = _monotonic(h.counts), h.bounds
    n = counts[-1]  # the +Inf bucket counts every observation, as histogram_quantile takes it
    if n <= 0:
        return None
    rank = q * n
    need = rank * (1.0 - _RANK_SLACK)
    # The first bucket whose cumulative count reaches the rank; q = 0 takes the first bucket with an observation.
    i = next(i for i, c in enumerate(counts) if c >= need and c > 0)
    below = counts[i - 1] if i else 0.0
    high = bounds[i]
    if math.isinf(high):
        low = next((b for b in reversed(bounds[:i]) if not math.isinf(b)), 0.0)
        return Quantile(estimate=low, low=low, high=None)
    low = bounds[i - 1] if i else min(0.0, high)  # a first bound <= 0 (SGLang's le="0.0") holds only that value
    frac = min(1.0, max(0.0, (rank - below) / (counts[i] - below)))
    return Quantile(estimate=low + (high - low) * frac, low=low, high=high)


def _monotonic(counts: tuple[float, ...]) -> list[float]:
    """Cumulative counts made non-decreasing: a server's buckets, read while being written, can dip (Prometheus'
    histogram_quantile does the same)."""
    out, top = [], 0.0
    for c in counts:
        top = max(top, c)
        out.append(top)
    return out
