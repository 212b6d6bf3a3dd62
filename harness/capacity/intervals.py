"""The confidence intervals the regression gate compares, all at 95%, from what summary.json keeps. Pure.

- A latency percentile: the exact order-statistic interval summary.json carries (``p50_ci``, ``p95_ci``,
  ``p99_ci``: ranks from Binomial(n, q), mapped to values through the sketch, ``metrics.aggregate.ci_ranks``).
  Below ``ci_min_samples`` (368 samples for p99) its upper end is the sample's largest value, which bounds
  nothing: ``hi`` is None (unbounded). The sketch returns each order statistic within ±1% (``SKETCH_ACCURACY``),
  so each end moves out by that much: a tight distribution's interval collapses into one 2%-wide bin otherwise,
  and two runs would "separate" on the bin edge.
- A rate of requests (throughput, goodput): Poisson on the count over the measured duration, Byar's
  approximation of the exact (Garwood) interval, within 1% of it from 10 counts up.
- The error rate: Wilson's score interval on failures / requests (exact enough from 0 failures up, unlike the
  normal one, which says [0, 0] at 0 failures).

- The client's own delay: a latency that ends at one chunk's arrival (TTFT, ITL, E2E) is stamped late by up to
  the load generator's event-loop lag, so its true value may be lower by that much: the interval's low end moves
  down by the step's ``generator.lag_p99_ms`` (``latency_interval``). At a light load's 10 ms TTFT a 5 ms lag is
  half the value, and two runs of one configuration differed by 27% on it (docs/gate.md). TPOT spreads the two
  stamps' lag over the tokens between them and is left alone.

These assume independent requests; a closed loop's are not (one slow batch slows every request in it), so the
gate can widen each interval about its value by ``widen`` (``gate.NOISE_WIDEN``, measured on A/A runs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from harness.metrics.aggregate import ci_min_samples
from harness.metrics.vocabulary import CI_PERCENTILES, QUANTILE_OF

if TYPE_CHECKING:
    from harness.summary import Percentiles

__all__ = [
    "SKETCH_ACCURACY",
    "Interval",
    "Z",
    "percentile_interval",
    "poisson_interval",
    "separated",
    "wilson_interval",
]

Z = 1.96
"""95% two-sided, the level of the intervals summary.json carries."""
LAGGED = ("ttft", "itl", "e2e")
"""The latencies that end at one chunk's arrival: a lagging reader stamps them late (module docstring)."""
QUANTILE = {p: QUANTILE_OF[p] for p in CI_PERCENTILES}
"""The percentiles summary.json gives an interval for, as quantiles."""
SKETCH_ACCURACY = 0.01
"""The sketches' relative accuracy (``metrics.sketch.Sketch``'s default, which every run uses)."""


@dataclass(frozen=True)
class Interval:
    """A value and its interval; ``hi`` None: nothing bounds it from above (too few samples)."""

    value: float
    lo: float
    hi: float | None

    def widen(self, factor: float) -> Interval:
        """Each side ``factor`` times as far from the value (at least 0; None stays unbounded)."""
        lo = max(0.0, self.value - factor * (self.value - self.lo))
        hi = None if self.hi is None else self.value + factor * (self.hi - self.value)
        return Interval(self.value, lo, hi)

    def above(self, other: Interval) -> bool:
        """Wholly above ``other``: this one's low end past the other's high end (which must be bounded)."""
        return other.hi is not None and self.lo > other.hi

    def text(self, fmt: str = "{:.4g}") -> str:
        hi = "∞" if self.hi is None else fmt.format(self.hi)
        return f"[{fmt.format(self.lo)}, {hi}]"


def separated(worse: int, b: Interval, n: Interval) -> tuple[bool, bool]:
    """(worse, better): NEW's interval ``n`` lies wholly on the bad side of BASE's ``b``, or wholly on the good
    side; ``worse`` is +1 when an increase is bad, -1 when a decrease is."""
    return (n.above(b), b.above(n)) if worse > 0 else (b.above(n), n.above(b))


def percentile_interval(value: float, ci: tuple[float, float] | list[float] | None, count: int,
                        q: float) -> Interval | None:
    """A percentile's interval from summary.json's ``pNN_ci``; None without one (too few samples, an older file)."""
    if ci is None or count < 2:
        return None
    lo, hi = float(ci[0]), float(ci[1])
    # the interval may miss the (rounded) estimate by a sketch bin: keep the value inside it
    lo, hi = min(lo, value) * (1 - SKETCH_ACCURACY), max(hi, value) * (1 + SKETCH_ACCURACY)
    return Interval(value, lo, None if count < ci_min_samples(q) else hi)


def poisson_interval(count: int, duration_s: float) -> Interval | None:
    """``count`` events in ``duration_s`` as a rate per second with Byar's 95% interval; None without time."""
    if duration_s <= 0:
        return None
    lo = 0.0 if count == 0 else count * (1 - 1 / (9 * count) - Z / (3 * math.sqrt(count))) ** 3
    up = count + 1
    hi = up * (1 - 1 / (9 * up) + Z / (3 * math.sqrt(up))) ** 3
    return Interval(count / duration_s, lo / duration_s, hi / duration_s)


def wilson_interval(failures: int, requests: int) -> Interval | None:
    """failures / requests with Wilson's 95% score interval; None without requests."""
    if requests <= 0:
        return None
    p, z2 = failures / requests, Z * Z
    centre = (p + z2 / (2 * requests)) / (1 + z2 / requests)
    half = Z * math.sqrt(p * (1 - p) / requests + z2 / (4 * requests * requests)) / (1 + z2 / requests)
    return Interval(p, max(0.0, min(p, centre - half)), min(1.0, max(p, centre + half)))


def latency_interval(metric: str, p: Percentiles, stat: str, lag_ms: float | None) -> Interval | None:
    """A step's ``metric`` percentile (``stat``: p50, p95, p99) with its interval, the low end moved down by the
    step's generator lag for the ``LAGGED`` metrics; None without an interval."""
    value, ci = getattr(p, stat), getattr(p, f"{stat}_ci", None)
    if value is None or not isinstance(ci, (tuple, list)):
        return None
    iv = percentile_interval(value, ci, p.count, QUANTILE[stat])
    if iv is not None and lag_ms and metric in LAGGED:
        iv = Interval(iv.value, max(0.0, iv.lo - lag_ms), iv.hi)
    return iv
