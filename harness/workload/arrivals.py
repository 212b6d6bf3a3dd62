"""Open-loop arrival schedules. Pure: times are seconds from the step's start, drawn from a seeded RNG.

The fleet shares one schedule: every worker generates the same global sequence (same seed, same step)
and keeps every W-th arrival (``stride`` W, ``offset`` = its index), so the union over workers is
exactly the intended process, whatever it is — Poisson, constant, gamma with a burstiness CV, or
gaps replayed from a production trace. Locust's ``constant_throughput`` per user would instead
produce W synchronised bursts.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterator, Sequence

__all__ = ["PROCESSES", "arrival_times", "trace_gaps"]

PROCESSES = ("poisson", "constant", "gamma", "trace")


def arrival_times(process: str, rate: float, rng: random.Random, *, cv: float = 1.0,
                  gaps: Sequence[float] | None = None, stride: int = 1, offset: int = 0) -> Iterator[float]:
    """Arrival times of the global process at ``rate`` per second; this worker's share (every
    ``stride``-th from ``offset``). ``gaps`` (trace mode) are the trace's inter-arrival gaps in order,
    rescaled to ``rate``; replay starts at a seeded position and wraps around."""
    if rate <= 0:
        raise ValueError(f"arrival rate must be > 0, got {rate}")
    if not 0 <= offset < stride:
        raise ValueError(f"offset {offset} must be within [0, {stride})")
    t = 0.0
    i = 0
    if process == "constant":
        # Start at a random phase so that steps do not all begin with a simultaneous arrival.
        t = rng.random() / rate
        gap = lambda: 1.0 / rate  # noqa: E731
    elif process == "poisson":
        gap = lambda: rng.expovariate(rate)  # noqa: E731
    elif process == "gamma":
        shape = 1.0 / (cv * cv)
        scale = 1.0 / (rate * shape)
        gap = lambda: rng.gammavariate(shape, scale)  # noqa: E731
    elif process == "trace":
        if not gaps:
            raise ValueError("trace arrivals need the trace's gaps")
        factor = len(gaps) / (sum(gaps) * rate)  # mean gap → 1/rate
        pos = [int(rng.random() * len(gaps))]

        def gap() -> float:
            g = gaps[pos[0] % len(gaps)] * factor
            pos[0] += 1
            return g
    else:
        raise ValueError(f"unknown arrival process {process!r}; choose one of {', '.join(PROCESSES)}")
    if process != "constant":
        t = gap()
    while True:
        if i % stride == offset:
            yield t
        i += 1
        t += gap()


def trace_gaps(timestamps: Sequence[float]) -> list[float]:
    """Inter-arrival gaps of sorted timestamps (seconds); zero gaps (same-instant arrivals) are kept."""
    ts = sorted(timestamps)
    gaps = [b - a for a, b in itertools.pairwise(ts)]
    if not gaps or sum(gaps) <= 0 or any(math.isnan(g) for g in gaps):
        raise ValueError("a trace needs at least two distinct timestamps")
    return gaps
