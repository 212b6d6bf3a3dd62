"""The knee-seeking load shape (master side). Thin: the plan, the judging and the knee are pure code in analysis/.

``KneecapShape`` follows the scenario's ``load`` section. Each tick (~1 s) it advances the step when
the plan says the step has enough data, judges steps whose data is complete, and stops once the knee
is confirmed (or on an error storm / abort_on_fail threshold, or after the last level).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from locust import LoadTestShape

from harness.analysis.plan import Step, stop_reason
from harness.analysis.steps import StepInfo
from harness.metrics.aggregate import Bucket

if TYPE_CHECKING:
    from harness.load.plugin import Kneecap

__all__ = ["KneecapShape", "tick"]

log = logging.getLogger("kneecap")
PROGRESS_EVERY_S = 5.0


class KneecapShape(LoadTestShape):
    """Scenario-driven staircase / constant / open-loop plan. Use with ``kneecap run``, or
    ``-f locustfile.py,harness/load/shape_file.py``."""

    def tick(self) -> tuple[int, float] | None:
        step = tick(self.runner.environment.kneecap)
        return None if step is None else (step.users, step.spawn_rate)


def tick(k: Kneecap) -> Step | None:
    """One tick of the load shape: the users to run now, or None to stop."""
    plan, now = k.plan, time.perf_counter()
    spawn = k.scenario.load.spawn_rate
    if k.stop_reason is not None:
        return None
    if not k.steps:
        k.start_run()
        k.begin_step(plan.levels[0])
        return _users(k, plan.levels[0], spawn)
    cur = k.steps[-1]
    k.judge()
    reason = stop_reason(k.knee, [v["error_rate"] for _, v in sorted(k.verdicts.items())],
                         [r["threshold"] for v in k.verdicts.values() for r in v["slo"]
                          if r["abort_on_fail"] and not r["passed"]])
    measured = k.fleet.steps.get((cur.index, "measure"), Bucket()).requests
    if reason is None and plan.step_done(now - cur.started, measured):
        nxt = plan.level(cur.index + 1)
        if nxt is None:
            reason = f"plan complete: last level {cur.level:g} done"
        else:
            cur = k.steps[k.begin_step(nxt)]
            measured = 0
    if reason is not None:
        k.stop_reason = reason
        log.info("kneecap: stopping: %s", reason)
        k.end_plan()
        return None
    if now - k.last_progress >= PROGRESS_EVERY_S:
        k.last_progress = now
        log.info("kneecap: %s", _progress_line(k, cur, now, measured))
    return _users(k, cur.level, spawn)


def _users(k: Kneecap, level: float, spawn: float) -> Step:
    """Closed loop: the level is users. Open loop: one arrival driver per worker, whatever the rate."""
    if k.open_loop:
        w = k.workers()
        return Step(w, float(w))
    return Step(int(level), spawn)


def _progress_line(k: Kneecap, cur: StepInfo, now: float, measured: int) -> str:
    metric = k.scenario.load.knee_metric
    b = k.fleet.steps.get((cur.index, "measure"))
    p99 = ""
    if b is not None and metric in b.sketches:
        p99 = f" | {metric} p99 {b.sketches[metric].quantile(0.99) * 1000:.0f} ms"
    knee = f"knee at {k.knee.load:g} ({k.knee.confidence})" if k.knee.found else "no knee yet"
    unit = "req/s" if k.open_loop else "users"
    return (f"step {cur.index} | {cur.level:g} {unit} | {k.plan.samples_line(now - cur.started, measured)}"
            f"{p99} | {knee}")
