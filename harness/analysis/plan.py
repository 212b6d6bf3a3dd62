"""Load plans as pure logic: which levels, when a step has enough data, when to stop. Time is passed in.

A staircase's levels are computed on demand (``start + i·step``), never listed up front: a scenario
can only ask for ``spec.load.MAX_LEVELS`` of them (``scenario.py`` rejects more), but the plan itself costs the
same for 4 levels or 10^20 — a huge plan can never eat the master's memory before it starts.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import overload

from harness.analysis.knee import KneeFinding
from harness.metrics.aggregate import ci_min_samples
from harness.spec.load import LoadPlan, level_count

__all__ = ["ERROR_STORM_RATE", "PLAN_ENDS", "Levels", "StepPlan", "Tick", "p99_precision", "stop_reason"]

ERROR_STORM_RATE = 0.5
"""Stop when a judged step failed more than half its requests: hammering a broken endpoint measures nothing."""

PLAN_ENDS = ("min", "precision", "max_duration")
"""Why ``StepPlan.step_end`` says a step has its data (a step can also end "stopped", with the plan)."""


class Levels(Sequence[float]):
    """A staircase's levels as a read-only sequence computed on demand; equal to any sequence with the same items."""

    count: int  # type: ignore[assignment]  # the level count, an int that hides Sequence.count (no value counting)

    def __init__(self, start: float, step: float, count: int) -> None:
        self.start, self.step, self.count = start, step, count

    def __len__(self) -> int:
        return self.count

    @overload
    def __getitem__(self, index: int) -> float: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[float]: ...

    def __getitem__(self, index: int | slice) -> float | Sequence[float]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.count))]
        i = index + self.count if index < 0 else index
        if not 0 <= i < self.count:
            raise IndexError(f"level {index} of a {self.count}-level plan")
        value = self.start + i * self.step  # multiplied, not summed: no drift over many levels
        # integer users stay integers; rates are rounded so 0.1-steps read 0.3, not 0.30000000000000004
        return value if isinstance(value, int) else round(value, 9)

    def __iter__(self) -> Iterator[float]:
        return (self[i] for i in range(self.count))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return not isinstance(other, str) and len(other) == self.count and all(
            a == b for a, b in zip(self, other, strict=True))

    def __hash__(self) -> int:
        return hash((self.start, self.step, self.count))

    def __repr__(self) -> str:
        return f"Levels(start={self.start!r}, step={self.step!r}, count={self.count})"


@dataclass(frozen=True)
class Tick:
    """What the shape tells Locust at a tick: how many users, spawned at what rate."""

    users: int
    spawn_rate: float


@dataclass(frozen=True)
class StepPlan:
    start: float
    step: float
    count: int
    """How many levels: ``start + i·step`` for i < count."""
    warmup_s: float
    min_duration_s: float
    min_requests: int
    max_duration_s: float
    precision: float | None = None

    @property
    def levels(self) -> Levels:
        """Every level, lazily: ``plan.levels[0]``, ``len(plan.levels)``, iteration."""
        return Levels(self.start, self.step, self.count)

    @classmethod
    def staircase(cls, start: float, step: float, top: float, *, warmup_s: float, min_duration_s: float,
                  min_requests: int, max_duration_s: float, precision: float | None = None) -> StepPlan:
        return cls(start, step, level_count(start, step, top), warmup_s, min_duration_s, min_requests,
                   max_duration_s, precision)

    @classmethod
    def for_load(cls, load: LoadPlan) -> StepPlan:
        """The plan of a scenario's ``load`` section: a constant level, or a staircase (closed or open loop); a
        search's levels are the staircase's grid at its resolution (it picks which to visit)."""
        st = load.step
        if load.mode == "constant":
            return cls.constant(load.start, load.duration_s, st.warmup_s)
        return cls.staircase(load.start, load.step_by, load.max, warmup_s=st.warmup_s,
                             min_duration_s=st.min_duration_s, min_requests=st.min_requests,
                             max_duration_s=st.max_duration_s, precision=st.precision)

    @classmethod
    def constant(cls, level: float, duration_s: float, warmup_s: float) -> StepPlan:
        return cls(level, 0, 1, warmup_s, duration_s, 1, duration_s)

    def level(self, index: int) -> float | None:
        """The ``index``-th level, or None past the last one (the plan is complete)."""
        return self.levels[index] if 0 <= index < self.count else None

    def step_done(self, elapsed_s: float, measured_requests: int, p99_precision: float | None = None, *,
                  warmup_s: float | None = None) -> bool:
        return self.step_end(elapsed_s, measured_requests, p99_precision, warmup_s=warmup_s) is not None

    def step_end(self, elapsed_s: float, measured_requests: int, p99_precision: float | None = None, *,
                 warmup_s: float | None = None) -> str | None:
        """Why the step is done, or None to hold: "max_duration"; past BOTH floors (min duration and min requests,
        after warm-up) "min" — or, with a ``precision``, "precision" once the knee metric's ``p99_precision`` (CI
        half-width / p99) is within it. ``warmup_s``: the step's own, when it is not the plan's (a drain)."""
        measured = elapsed_s - (self.warmup_s if warmup_s is None else warmup_s)
        if measured >= self.max_duration_s:
            return "max_duration"
        if measured < self.min_duration_s or measured_requests < self.min_requests:
            return None
        if self.precision is None:
            return "min"
        return "precision" if p99_precision is not None and p99_precision <= self.precision else None

    def time_marks_s(self, *, warmup_s: float | None = None) -> list[float]:
        """Seconds from a step's start to its time marks, when ``step_end`` may change its answer: its min duration
        after warm-up, then its max duration (one mark when they are the same: a constant plan)."""
        warmup = self.warmup_s if warmup_s is None else warmup_s
        return sorted({warmup + self.min_duration_s, warmup + self.max_duration_s})

    def next_mark_s(self, elapsed_s: float, *, warmup_s: float | None = None) -> float | None:
        """Seconds until the step's next time mark (``time_marks_s``); None past them."""
        return next((m - elapsed_s for m in self.time_marks_s(warmup_s=warmup_s) if elapsed_s < m), None)

    def samples_line(self, elapsed_s: float, measured_requests: int, warmup_s: float | None = None) -> str:
        warmup = self.warmup_s if warmup_s is None else warmup_s
        measured = max(0.0, elapsed_s - warmup)
        return (f"{measured:.0f}/{self.min_duration_s:g}s, {measured_requests}/{self.min_requests} requests"
                if elapsed_s >= warmup else f"warming up {max(0.0, elapsed_s):.0f}/{warmup:g}s")


def p99_precision(p99: float, ci: tuple[float, float] | None, n: int) -> float | None:
    """The p99's order-statistic 95% CI half-width as a share of the p99, from ``n`` ranked requests. None when it
    bounds nothing: fewer than ``ci_min_samples(0.99)`` (368) requests, whose largest is no upper bound of the p99
    (distribution-free, from Binomial(n, 0.99): ``metrics.aggregate.ci_ranks``), or a p99 that is 0 or infinite."""
    if ci is None or n < ci_min_samples(0.99) or not 0 < p99 < math.inf or not all(map(math.isfinite, ci)):
        return None
    return (ci[1] - ci[0]) / 2 / p99


def stop_reason(knee: KneeFinding, error_rates: list[float], aborted: list[str]) -> str | None:
    """Why the run should stop now, or None: a confirmed knee, an error storm, an abort_on_fail threshold."""
    if knee.found and knee.confirmed:
        return f"knee confirmed at {knee.load:g}"
    if error_rates and error_rates[-1] > ERROR_STORM_RATE:
        return f"error storm: {100 * error_rates[-1]:.0f}% of the last step's requests failed"
    if aborted:
        return f"threshold failed with abort_on_fail: {aborted[0]}"
    return None
