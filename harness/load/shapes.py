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

from harness.analysis.failures import top_failures
from harness.analysis.plan import Step
from harness.analysis.results import level_unit
from harness.analysis.steps import StepInfo
from harness.metrics.aggregate import Bucket

if TYPE_CHECKING:
    from harness.load.master import MasterSide

__all__ = ["KneecapShape", "Ticker"]

log = logging.getLogger("kneecap")
PROGRESS_EVERY_S = 5.0


class KneecapShape(LoadTestShape):
    """Scenario-driven staircase / constant / open-loop plan. Use with ``kneecap run``, or
    ``-f locustfile.py,harness/load/shape_file.py``."""

    _ticker: Ticker | None = None

    def tick(self) -> tuple[int, float] | None:
        if self._ticker is None:
            self._ticker = Ticker(self.runner.environment.kneecap.master)
        step = self._ticker.tick(time.perf_counter())
        return None if step is None else (step.users, step.spawn_rate)


class Ticker:
    """One tick of the load shape at a time: the users to run now, or None to stop."""

    def __init__(self, master: MasterSide) -> None:
        self.master = master
        self.last_progress = -PROGRESS_EVERY_S

    def tick(self, now: float) -> Step | None:
        m, view = self.master, self.master.view
        ledger = view.ledger
        plan, spawn = ledger.plan, ledger.scenario.load.spawn_rate
        if view.stop_reason is not None:
            return None
        cur = ledger.current
        if cur is None:
            m.start_run()
            cur = m.begin_step(plan.levels[0], 0)
            return self._users(cur.level, spawn)
        m.judge()
        reason = ledger.stop_reason()
        measured = ledger.measured(cur.index).requests
        if reason is None and plan.step_done(now - cur.started, measured):
            nxt = plan.level(cur.level_index + 1)
            if nxt is None:
                reason = f"plan complete: last level {cur.level:g} done"
            else:
                cur, measured = m.begin_step(nxt, cur.level_index + 1), 0
        if reason is not None:
            log.info("kneecap: stopping: %s", reason)
            m.stop(reason)
            return None
        if now - self.last_progress >= PROGRESS_EVERY_S:
            self.last_progress = now
            log.info("kneecap: %s", self._progress_line(cur, now, measured))
        return self._users(cur.level, spawn)

    def _users(self, level: float, spawn: float) -> Step:
        """Closed loop: the level is users. Open loop: one arrival driver per worker, whatever the rate."""
        if self.master.source.open_loop:
            w = self.master.workers()
            return Step(w, float(w))
        return Step(int(level), spawn)

    def _progress_line(self, cur: StepInfo, now: float, measured: int) -> str:
        ledger = self.master.view.ledger
        metric = ledger.scenario.load.knee_metric
        s = ledger.measured(cur.index).sketches.get(metric)
        p99 = f" | {metric} p99 {s.quantile(0.99) * 1000:.0f} ms" if s is not None else ""
        knee = ledger.knee
        knee_text = f"knee at {knee.load:g} ({knee.confidence})" if knee.found else "no knee yet"
        seen = Bucket()  # warm-up included: failures from the first second on are worth saying
        seen.merge(ledger.fleet.bucket(cur.index, "warmup"))
        seen.merge(ledger.measured(cur.index))
        failures = top_failures(seen)
        return (f"step {cur.index} | {cur.level:g} {level_unit(ledger.mode)} | "
                f"{ledger.plan.samples_line(now - cur.started, measured)}{p99} | {knee_text}"
                + (f" | failing: {failures}" if failures else ""))
