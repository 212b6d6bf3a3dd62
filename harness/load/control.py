"""The one owner of the run's steps (master side): begins them, ends the plan, re-runs after a fleet change.

Every change of step goes through ``StepControl``: the load shape's ``tick`` (the scenario's plan), a plain
``-u/-t`` run's single step (``begin_plain``), a fleet change (``fleet_change``: re-run from the earliest
level it touched, or abort) and the end (``stop``, ``interrupt``). It tells the workers where a step begins
(``send_step``) and keeps the last boundary sent (``step_message``) for a worker that joins mid-run. The
plan, the judging and the knee are pure code in ``analysis/``; this object only turns their answers into
steps and messages.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Literal

from harness.analysis.failures import top_failures
from harness.analysis.ledger import Ledger
from harness.analysis.plan import Tick, p99_precision
from harness.analysis.steps import StepInfo
from harness.load.search_steps import SearchSteps
from harness.metrics.aggregate import Bucket
from harness.metrics.protocol import StepMessage
from harness.summary import level_unit

__all__ = ["NOTICED_AFTER_S", "PROGRESS_EVERY_S", "StepControl"]

log = logging.getLogger("kneecap")
PROGRESS_EVERY_S = 5.0
NOTICED_AFTER_S = 5.0
"""How long after a worker dies the master may notice: Locust marks a worker missing after 3 missed 1 s
heartbeats (``HEARTBEAT_LIVENESS``), and the watch polls every 0.5 s."""


class StepControl:
    """Reached as ``master.control``. Usage: the shape calls ``tick(now)`` about once a second and runs the users it
    returns (None: stop)."""

    def __init__(self, ledger: Ledger, *, open_loop: bool, send_step: Callable[[StepMessage], None],
                 workers: Callable[[], int], clock: Callable[[], float], start_run: Callable[[], None],
                 judge: Callable[[], None], event: Callable[[str, str, float | None], None],
                 rebalance: Callable[[], None]) -> None:
        self.ledger = ledger
        self.open_loop = open_loop
        self.send_step = send_step
        self.workers = workers
        """How many workers the fleet has now (1 in local mode)."""
        self.clock = clock
        self.start_run = start_run
        self.judge = judge
        self.event = event
        """Say a step change to the live sinks: (kind, text, load)."""
        self.rebalance = rebalance
        """Spread the running users over the workers there are now (after a fleet change)."""
        self.stop_reason: str | None = None
        self.step_message: StepMessage | None = None
        """The last step boundary sent: a worker that connects mid-run gets it first (``load/wiring.py``)."""
        self.finalized = False
        """Set by the master at the end: fleet changes from then on are its own bookkeeping, not a re-run."""
        self._last_progress = -PROGRESS_EVERY_S
        self.search = SearchSteps(self) if ledger.search else None
        """A search's steps between two levels (``load/search_steps.py``); None for a staircase or constant plan."""

    def tick(self, now: float) -> Tick | None:
        """The shape's tick: the users to run now, or None to stop (see ``load/shapes.py``)."""
        ledger = self.ledger
        plan, spawn = ledger.plan, ledger.scenario.load.spawn_rate
        if self.stop_reason is not None:
            return None
        cur = ledger.current
        if cur is None:
            self.start_run()
            cur = self.begin_step(plan.levels[0], 0, why="start at min" if ledger.search else "")
            return self._users(cur.level, spawn)
        self.judge()
        reason = ledger.stop_reason()
        measured = ledger.measured(cur.index).requests
        between = self.search is not None and self.search.between
        end = None if reason is not None or between else self._step_end(cur, now, measured)
        if end is not None and self.search is not None:
            self.search.hold(end, now)
        elif end is not None:
            cur.ended_why = end
            reason = self._next_level(cur)
        elif reason is None and between:
            reason = self.search.tick(cur, now)  # type: ignore[union-attr]  # between is True only with a search
        if (current := ledger.current) is not None and current is not cur:  # a step began: steps are never removed
            cur, measured = current, 0
        if reason is not None:
            log.info("kneecap: stopping: %s", reason)
            self.stop(reason)
            return None
        if now - self._last_progress >= PROGRESS_EVERY_S:
            self._last_progress = now
            log.info("kneecap: %s", self._progress_line(cur, now, measured))
        return self._users(cur.level, spawn)

    def next_mark_s(self, now: float) -> float | None:
        """Seconds until the running step may end by time (``StepPlan.next_mark_s``); None without one."""
        cur = self.ledger.current
        if cur is None or cur.ended is not None or self.stop_reason is not None:
            return None
        return self.ledger.plan.next_mark_s(now - cur.started, warmup_s=cur.warmup_s)

    def _step_end(self, cur: StepInfo, now: float, measured: int) -> str | None:
        """Why the running step is done (``StepPlan.step_end``), or None; the p99's precision only when asked for."""
        plan, st = self.ledger.plan, self.ledger.state(cur.index)
        precision = None
        if plan.precision is not None and st is not None:
            point = self.ledger.point(st, now)
            precision = p99_precision(point.p99, point.ci, point.n)
        return plan.step_end(now - cur.started, measured, precision, warmup_s=cur.warmup_s)

    def _next_level(self, cur: StepInfo) -> str | None:
        """Begin the staircase's next level after ``cur``; returns why the plan is done instead, or None."""
        nxt = self.ledger.plan.level(cur.level_index + 1)
        if nxt is None:
            return f"plan complete: last level {cur.level:g} done"
        self.begin_step(nxt, cur.level_index + 1)
        return None

    def begin_plain(self, users: float) -> None:
        """A plain ``-u/-r/-t`` run (no shape): one step at its users, from the start."""
        self.start_run()
        self.begin_step(users)

    def begin_step(self, level: float, level_index: int = 0, *, why: str = "", warmup_s: float | None = None,
                   warmup_why: str = "") -> StepInfo:
        """Start a new step at ``level`` users (or req/s), the plan's ``level_index``-th; workers tag their
        records from now on (and count its first ``warmup_s`` as warm-up, when it is not the plan's)."""
        info = self.ledger.begin_step(level, self.clock(), time.time(), level_index, why=why, warmup_s=warmup_s,
                                      warmup_why=warmup_why)
        msg = StepMessage(index=info.index, rate=level if self.open_loop else None,
                          stride=self.workers(), warmup_s=warmup_s)
        text = f"step {info.index}: {level:g} {level_unit(self.ledger.mode)}" + (f" ({why})" if why else "") + (
            f"; warm-up {info.warmup_s:.1f} s: {warmup_why}" if warmup_why else "")
        log.info("kneecap: %s", text)
        self.event("step", text, level)
        self.step_message = msg
        self.send_step(msg)
        return info

    def end_plan(self) -> None:
        """Close the last step now: workers move to a step past the plan (their records from here on are
        not part of any step) and open-loop drivers stop dispatching."""
        between = self.search is not None and self.search.between
        if self.ledger.end_step(self.clock()) or between:
            if self.search is not None:
                self.search.clear()
            self.step_message = StepMessage(index=len(self.ledger.states), end=True)
            self.send_step(self.step_message)

    def stop(self, reason: str) -> None:
        """End the plan for ``reason`` (the shape then returns None and Locust stops the users)."""
        self.stop_reason = reason
        self.end_plan()

    def interrupt(self) -> None:
        log.info("kneecap: SIGTERM: ending the plan, writing partial results")
        self.stop("interrupted")

    def fleet_change(self, kind: Literal["lost", "joined"], worker: str) -> None:
        """A worker ``lost`` or ``joined`` (``load/wiring.py`` watches Locust's worker states; the master's
        ``finalize`` finds workers whose final report never came): say it and mark the steps it changed; while the
        plan runs, re-run the plan from the earliest level it changed, on the fleet as it is now
        (``load.on_worker_loss: continue``), or end the run (``abort``, losses only)."""
        ledger = self.ledger
        cur = ledger.current
        if cur is None or self.finalized:
            return
        event = ledger.fleet_change(kind, worker, self.clock(), time.time(), noticed_after_s=NOTICED_AFTER_S)
        between = self.search is not None and self.search.between  # a search's step ended, the next not begun
        running = (cur.ended is None or between) and self.stop_reason is None
        policy = ledger.scenario.load.on_worker_loss if kind == "lost" else "continue"
        what = "lost (no heartbeat, or it quit)" if kind == "lost" else "joined"
        steps = ", ".join(map(str, event.steps)) or "none"
        # re-run from the earliest level it touched, so that every level keeps a judged step, in order
        first = min((s for s in ledger.steps if s.index in event.steps), key=lambda s: s.level_index, default=cur)
        then = ("the plan had ended" if not running else "aborting (load.on_worker_loss: abort)" if policy == "abort"
                else f"re-running from {first.level:g} {level_unit(ledger.mode)} on {self.workers()} workers")
        log.warning("kneecap: worker %s %s during step %s: not judged; %s", worker, what, steps, then)
        self.event(f"worker_{kind}", f"worker {worker} {what} during step {steps}", cur.level)
        if not running:
            return
        if policy == "abort":
            self.stop(f"worker lost: {worker} (load.on_worker_loss: abort)")
            return
        if self.search is not None:
            self.search.clear()  # it chooses again once the re-run has its data
        self.begin_step(first.level, first.level_index, why=f"re-run: the fleet changed during step {steps}")
        self.rebalance()

    def _users(self, level: float, spawn: float) -> Tick:
        """Closed loop: the level is users. Open loop: one arrival driver per worker, whatever the rate."""
        if self.open_loop:
            w = self.workers()
            return Tick(w, float(w))
        return Tick(int(level), spawn)

    def _progress_line(self, cur: StepInfo, now: float, measured: int) -> str:
        ledger = self.ledger
        metric = ledger.scenario.load.knee_metric
        s = ledger.measured(cur.index).sketches.get(metric)
        p99 = f" | {metric} p99 {s.quantile(0.99) * 1000:.0f} ms" if s is not None else ""
        knee = ledger.knee  # only once confirmed: a pending knee comes and goes as steps are judged
        knee_text = (ledger.search_line() if ledger.search else f"knee at {knee.load:g} ({knee.confidence})"
                     if knee.found and knee.confirmed else "no knee confirmed yet")
        seen = Bucket()  # warm-up included: failures from the first second on are worth saying
        for b in (ledger.fleet.bucket(cur.index, "warmup"), ledger.measured(cur.index)):
            seen.merge(b, rows=False, sketches=())  # its counts; copying 100k rows for a status line would not do
        failures = top_failures(seen)
        return (f"step {cur.index} | {cur.level:g} {level_unit(ledger.mode)} | "
                f"{ledger.plan.samples_line(now - cur.started, measured, cur.warmup_s)}{p99} | {knee_text}"
                + (f" | failing: {failures}" if failures else ""))
