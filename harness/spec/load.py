"""The scenario's ``load:`` block as typed values: the plan's mode and levels, each step's floors, probes. Pure.

``scenario.py`` parses the block into a ``LoadPlan``; ``analysis/plan.py`` runs it (which levels, when a step has
its data, when to stop).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["MAX_LEVEL", "MAX_LEVELS", "OPEN_MODES", "SEARCH_MODES", "STREAMS_PER_WORKER", "LoadPlan",
           "ProbeSpec", "StepSpec", "level_count"]

MAX_LEVEL = 1_000_000
"""The most users (closed loop) or requests/s (open loop) a scenario may ask for: far above any real fleet
(a Locust worker drives a few thousand users), so a larger number is a typo, not a plan."""

MAX_LEVELS = 10_000
"""The most levels a staircase may have: at the default 20 s per step, 10,000 levels already run 55 hours."""


@dataclass(frozen=True, kw_only=True)
class StepSpec:
    warmup_s: float = 5.0
    min_duration_s: float = 20.0
    min_requests: int = 200
    max_duration_s: float = 120.0
    precision: float | None = None
    """End the step (past the floors) once the knee metric's p99 CI half-width is within this share of the p99."""
    max_lag_ms: float = 10.0
    """A step whose workers' event-loop lag p99 passes this is not judged: the generator added latency."""


SEARCH_MODES = ("search", "open_search")
STREAMS_PER_WORKER = 400
"""Streams one worker process times exactly on one core (docs/fleets.md: 50 tokens/s each)."""
OPEN_MODES = ("open_staircase", "open_search")


@dataclass(frozen=True, kw_only=True)
class ProbeSpec:
    """``load.probes``: single tiny requests at ``rate`` per second across the fleet, outside the users' loop (vLLM
    bench's ``--probe-request-rate``): their TTFT is the wait a new request meets at the step's load."""

    rate: float
    input_tokens: int = 16
    max_tokens: int = 1


@dataclass(frozen=True, kw_only=True)
class LoadPlan:
    mode: str = "staircase"
    start: float = 4
    """Users (closed loop) or requests/s (open loop) of the first step; a search's ``min``."""
    step_by: float = 4
    """The staircase's step; a search's ``resolution`` (its levels are on the same grid)."""
    max: float = 64
    spawn_rate: float = 50.0
    duration_s: float = 60.0
    """``constant`` mode only."""
    arrival: str = "poisson"
    burstiness_cv: float = 1.0
    trace_gaps: tuple[float, ...] | None = None
    """``arrival.process: trace``: the trace's inter-arrival gaps (seconds), replayed rescaled to each rate."""
    max_in_flight: int = 1000
    """Open loop: arrivals beyond this many requests in flight per worker are dropped and counted."""
    step: StepSpec = field(default_factory=StepSpec)
    probes: ProbeSpec | None = None
    """``load.probes``: tiny requests at a fixed rate beside the load, reported apart; None: none."""
    knee_metric: str = "ttft"
    knee_class: str | None = None
    """``workload.mix``: the class whose requests alone the knee follows (``load.knee.class``); None: all requests."""
    confirm_steps: int = 1
    on_worker_loss: str = "continue"
    """What a lost worker does to the run: "continue" (re-run the step on the workers left) or "abort"."""
    warmup_shapes: bool = True
    """Before the first step's own requests, one request of each shape the workload sends (prompt-length bucket,
    class), counted as warm-up (``workload/warm_shapes.py``): engines that compile or capture per shape pay it then."""

    @property
    def open_loop(self) -> bool:
        return self.mode in OPEN_MODES

    @property
    def search(self) -> bool:
        return self.mode in SEARCH_MODES

    def local_workers(self, cores: int) -> int:
        """Worker processes ``kneecap run`` starts unless told: as many as the plan's users need at
        ``STREAMS_PER_WORKER`` each, at most one per core. Each worker process costs ~0.8 s of CPU to start and its
        own timers and reports while it runs, so a plan that one worker times exactly gets one. An open loop's peak
        in flight is not known before it runs (arrivals beyond ``max_in_flight`` per worker are dropped): a worker
        per core."""
        if self.open_loop:
            return max(1, cores)
        return max(1, min(cores, math.ceil(self.max / STREAMS_PER_WORKER)))


_EPS = 1e-9
"""Float slack so that 0.1-steps reach their max (0.1 + 0.2 > 0.3 in binary)."""


def level_count(start: float, step: float, top: float) -> int:
    """How many levels the staircase ``start, start+step, … ≤ top`` has (0 when start > top)."""
    if start > top + _EPS:
        return 0
    if step <= 0:
        raise ValueError(f"a staircase step must be > 0, got {step!r}")
    return math.floor((top - start) / step + _EPS) + 1
