"""Load plans as pure logic: which levels, when a step has enough data, when to stop. Time is passed in."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from harness.analysis.knee import Knee

if TYPE_CHECKING:
    from harness.scenario import LoadPlan

__all__ = ["ERROR_STORM_RATE", "Step", "StepPlan", "stop_reason"]

ERROR_STORM_RATE = 0.5
"""Stop when a judged step failed more than half its requests: hammering a broken endpoint measures nothing."""


@dataclass(frozen=True)
class Step:
    users: int
    spawn_rate: float


@dataclass(frozen=True)
class StepPlan:
    levels: tuple[float, ...]
    warmup_s: float
    min_duration_s: float
    min_requests: int
    max_duration_s: float

    @classmethod
    def staircase(cls, start: float, step: float, top: float, *, warmup_s: float, min_duration_s: float,
                  min_requests: int, max_duration_s: float) -> StepPlan:
        levels, level = [], start
        while level <= top + 1e-9:
            levels.append(level)
            level += step
        return cls(tuple(levels), warmup_s, min_duration_s, min_requests, max_duration_s)

    @classmethod
    def for_load(cls, load: LoadPlan) -> StepPlan:
        """The plan of a scenario's ``load`` section: a constant level, or a staircase (closed or open loop)."""
        st = load.step
        if load.mode == "constant":
            return cls.constant(load.start, load.duration_s, st.warmup_s)
        return cls.staircase(load.start, load.step_by, load.max, warmup_s=st.warmup_s,
                             min_duration_s=st.min_duration_s, min_requests=st.min_requests,
                             max_duration_s=st.max_duration_s)

    @classmethod
    def constant(cls, level: float, duration_s: float, warmup_s: float) -> StepPlan:
        return cls((level,), warmup_s, duration_s, 1, duration_s)

    def level(self, index: int) -> float | None:
        return self.levels[index] if index < len(self.levels) else None

    def step_done(self, elapsed_s: float, measured_requests: int) -> bool:
        """Hold until BOTH min duration and min requests (after warm-up), or until max duration."""
        measured = elapsed_s - self.warmup_s
        return measured >= self.max_duration_s or (measured >= self.min_duration_s
                                                    and measured_requests >= self.min_requests)

    def samples_line(self, elapsed_s: float, measured_requests: int) -> str:
        measured = max(0.0, elapsed_s - self.warmup_s)
        return (f"{measured:.0f}/{self.min_duration_s:g}s, {measured_requests}/{self.min_requests} requests"
                if elapsed_s >= self.warmup_s else f"warming up {max(0.0, elapsed_s):.0f}/{self.warmup_s:g}s")


def stop_reason(knee: Knee, error_rates: list[float], aborted: list[str]) -> str | None:
    """Why the run should stop now, or None: a confirmed knee, an error storm, an abort_on_fail threshold."""
    if knee.found and knee.confirmed:
        return f"knee confirmed at {knee.load:g}"
    if error_rates and error_rates[-1] > ERROR_STORM_RATE:
        return f"error storm: {100 * error_rates[-1]:.0f}% of the last step's requests failed"
    if aborted:
        return f"threshold failed with abort_on_fail: {aborted[0]}"
    return None
