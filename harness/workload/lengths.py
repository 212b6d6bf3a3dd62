"""Token-length distributions: parametric, empirical, mixtures, and joint (input, output) replay.

Every distribution draws from a caller-owned ``random.Random`` (so a seed and a worker index give the
same sequence on any machine), returns an ``int``, and is clipped to ``[lo, hi]``. Sampling costs
~1–3 µs (``python -m benchmarks.workload_sampling``), far below a request's cost.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
from abc import ABC, abstractmethod
from collections.abc import Sequence

__all__ = ["Duration", "Empirical", "Fixed", "Gamma", "JointEmpirical", "Length", "LogNormal", "Mixture", "Normal",
           "QuantileCurve", "Uniform"]


class Length(ABC):
    """Base: ``sample(rng)`` = ``raw(rng)`` rounded and clipped to ``[lo, hi]``."""

    lo: int = 1
    hi: int = 10**9

    @abstractmethod
    def raw(self, rng: random.Random) -> float:
        """One unclipped draw."""

    def sample(self, rng: random.Random) -> int:
        v = round(self.raw(rng))
        return self.lo if v < self.lo else self.hi if v > self.hi else v

    def bounded(self, lo: int | None, hi: int | None) -> Length:
        if lo is not None:
            self.lo = lo
        if hi is not None:
            self.hi = hi
        return self


class Fixed(Length):
    def __init__(self, value: int) -> None:
        self.value = value

    def raw(self, rng: random.Random) -> float:
        return self.value


class Uniform(Length):
    """Integers uniform on ``[low, high]``."""

    def __init__(self, low: int, high: int) -> None:
        self.low, self.high = low, high

    def raw(self, rng: random.Random) -> float:
        return rng.randint(self.low, self.high)


class Normal(Length):
    """Normal truncated to ``[lo, hi]`` by redrawing (clipped after 32 misses)."""

    def __init__(self, mean: float, std: float) -> None:
        self.mean, self.std = mean, std

    def raw(self, rng: random.Random) -> float:
        for _ in range(32):
            v = rng.gauss(self.mean, self.std)
            if self.lo - 0.5 <= v < self.hi + 0.5:
                return v
        return v


class LogNormal(Length):
    """exp(N(mu, sigma)). ``median`` = e^mu; from a mean and std: sigma² = ln(1 + std²/mean²)."""

    def __init__(self, median: float, sigma: float) -> None:
        self.mu, self.sigma = math.log(median), sigma

    @classmethod
    def from_mean_std(cls, mean: float, std: float) -> LogNormal:
        s2 = math.log(1 + (std / mean) ** 2)
        return cls(mean / math.exp(s2 / 2), math.sqrt(s2))

    def raw(self, rng: random.Random) -> float:
        return rng.lognormvariate(self.mu, self.sigma)


class Gamma(Length):
    """Gamma(shape k, scale θ); from a mean and std: k = mean²/std², θ = std²/mean."""

    def __init__(self, shape: float, scale: float) -> None:
        self.shape, self.scale = shape, scale

    @classmethod
    def from_mean_std(cls, mean: float, std: float) -> Gamma:
        return cls(mean**2 / std**2, std**2 / mean)

    def raw(self, rng: random.Random) -> float:
        return rng.gammavariate(self.shape, self.scale)


class Mixture(Length):
    """A weighted mixture; each component keeps its own bounds, the mixture's apply on top."""

    def __init__(self, components: Sequence[tuple[float, Length]]) -> None:
        total = sum(w for w, _ in components)
        self._cum = list(itertools.accumulate(w / total for w, _ in components))
        self._parts = [d for _, d in components]

    def raw(self, rng: random.Random) -> float:
        i = bisect.bisect_right(self._cum, rng.random())
        return self._parts[min(i, len(self._parts) - 1)].sample(rng)


class Empirical(Length):
    """Resample observed values (a column of a production log, or a list)."""

    def __init__(self, values: Sequence[int]) -> None:
        self.values = tuple(values)

    def raw(self, rng: random.Random) -> float:
        return self.values[int(rng.random() * len(self.values))]


class QuantileCurve(Length):
    """Inverse CDF through ``(q, value)`` points, linear in between; q must start at 0 and end at 1."""

    def __init__(self, points: Sequence[tuple[float, float]]) -> None:
        self._q = [q for q, _ in points]
        self._v = [v for _, v in points]

    def raw(self, rng: random.Random) -> float:
        u = rng.random()
        i = max(1, bisect.bisect_right(self._q, u))
        q0, q1, v0, v1 = self._q[i - 1], self._q[i], self._v[i - 1], self._v[i]
        return v0 + (v1 - v0) * ((u - q0) / (q1 - q0) if q1 > q0 else 0.0)


class JointEmpirical:
    """Resample whole (input, output) rows, so a sampled pair is a pair that happened.

    ``jitter`` > 0 multiplies each length by a factor uniform in [1 − jitter, 1 + jitter], to avoid
    replaying the exact same few lengths from a short log; the correlation survives.
    """

    def __init__(self, pairs: Sequence[tuple[int, int]], jitter: float = 0.0,
                 bounds: tuple[int, int, int, int] = (1, 10**9, 1, 10**9)) -> None:
        self.pairs = tuple(pairs)
        self.jitter = jitter
        self.bounds = bounds

    def sample(self, rng: random.Random) -> tuple[int, int]:
        i, o = self.pairs[int(rng.random() * len(self.pairs))]
        if self.jitter:
            i = round(i * (1 + self.jitter * (2 * rng.random() - 1)))
            o = round(o * (1 + self.jitter * (2 * rng.random() - 1)))
        ilo, ihi, olo, ohi = self.bounds
        return min(max(i, ilo), ihi), min(max(o, olo), ohi)


class Duration:
    """Seconds drawn from a distribution (``raw`` of a ``Length``, so fractions survive), clipped to ``[lo, hi]``."""

    def __init__(self, dist: Length, lo: float = 0.0, hi: float = math.inf) -> None:
        self.dist, self.lo, self.hi = dist, lo, hi

    def sample(self, rng: random.Random) -> float:
        v = self.dist.raw(rng)
        return self.lo if v < self.lo else self.hi if v > self.hi else float(v)
