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

from harness.analysis.failures import top_failures
from harness.analysis.ledger import Ledger
from harness.analysis.plan import Step, p99_precision
from harness.analysis.results import level_unit
from harness.analysis.search import Decision
from harness.analysis.steps import StepInfo
from harness.metrics.aggregate import Bucket
from harness.metrics.protocol import StepMessage

__all__ = ["HOLD_MAX_S", "NOTICED_AFTER_S", "PROGRESS_EVERY_S", "StepControl"]

log = logging.getLogger("kneecap")
PROGRESS_EVERY_S = 5.0
HOLD_MAX_S = 10.0
"""The longest a search waits for a finished step's last reports before choosing the next level without them."""
HOLD_WARMUP_S = 86_400.0
"""Between a search's steps the workers' records are warm-up: the load is still the last level's."""
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
        self._hold: float | None = None
        """A search between steps: when its last step ended (the load holds while its data comes in)."""
        self._pause: tuple[float, Decision, str] | None = None
        """An open-loop search going down in load: arrivals paused until (time), then the decision's step."""

    def tick(self, now: float) -> Step | None:
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
        end = None if reason is not None or self._hold is not None else self._step_end(cur, now, measured)
        if end is not None and ledger.search:
            self._begin_hold(end, now)
        elif end is not None:
            cur.ended_why = end
            reason = self._next_step(cur, now)
        elif reason is None and self._pause is not None and self._pause_over(cur, now):
            reason = self._probe(self._pause[1], now, self._pause[2])
        elif reason is None and self._pause is None and self._hold is not None and self._hold_over(cur, now):
            reason = self._next_step(cur, now)
        if ledger.current is not cur:
            cur, measured = ledger.current, 0  # type: ignore[assignment]
        if reason is not None:
            log.info("kneecap: stopping: %s", reason)
            self.stop(reason)
            return None
        if now - self._last_progress >= PROGRESS_EVERY_S:
            self._last_progress = now
            log.info("kneecap: %s", self._progress_line(cur, now, measured))
        return self._users(cur.level, spawn)

    def _step_end(self, cur: StepInfo, now: float, measured: int) -> str | None:
        """Why the running step is done (``StepPlan.step_end``), or None; the p99's precision only when asked for."""
        plan, st = self.ledger.plan, self.ledger.state(cur.index)
        precision = None
        if plan.precision is not None and st is not None:
            point = self.ledger.point(st, now)
            precision = p99_precision(point.p99, point.ci, point.n)
        return plan.step_end(now - cur.started, measured, precision, warmup_s=cur.warmup_s)

    def _begin_hold(self, why: str, now: float) -> None:
        """A search's step is done: close it, keep the load, and move the workers to a step that is all warm-up
        until the next level is chosen (``_hold_over``) from the closed step's complete data."""
        ledger = self.ledger
        ledger.end_step(self.clock(), why)
        self._hold = now
        cur = ledger.current
        rate = cur.level if self.open_loop and cur is not None else None
        self.step_message = StepMessage(index=len(ledger.states), rate=rate, stride=self.workers(),
                                        warmup_s=HOLD_WARMUP_S)
        self.send_step(self.step_message)

    def _hold_over(self, cur: StepInfo, now: float) -> bool:
        """Every worker's report from past ``cur`` arrived (they report at once on a step message), or
        ``HOLD_MAX_S`` passed (then the choice is made on the data there is, and the console says so)."""
        if self.ledger.fleet.step_complete(cur.index, self.workers()):
            return True
        if now - (self._hold or now) < HOLD_MAX_S:
            return False
        log.warning("kneecap: step %d's last reports did not all arrive within %.0f s of its end: choosing the next "
                    "level on the data there is", cur.index, HOLD_MAX_S)
        return True

    def _next_step(self, cur: StepInfo, now: float) -> str | None:
        """Begin the step after ``cur``: the staircase's next level, or where the search probes next (with a
        longer warm-up to drain a heavier step's queue). Returns why the plan is done instead, or None."""
        ledger = self.ledger
        if not ledger.search:
            nxt = ledger.plan.level(cur.level_index + 1)
            if nxt is None:
                return f"plan complete: last level {cur.level:g} done"
            self.begin_step(nxt, cur.level_index + 1)
            return None
        self.judge()
        decision = ledger.next_probe(now)
        if decision.level is None:
            return f"search done: {decision.why}"
        warmup, warmup_why = ledger.drain_warmup(cur, decision.level)
        if warmup is not None and self.open_loop:
            # An open loop's queue past the knee has no bound: pause arrivals until it is served (the server's
            # waiting queue reads 0, or the drain time passed), then warm up as usual.
            self._pause = (now + warmup, decision, f"arrivals paused to drain {cur.level:g} req/s's queue")
            self.step_message = StepMessage(index=len(ledger.states), rate=0.0, stride=self.workers(),
                                            warmup_s=HOLD_WARMUP_S)
            self.send_step(self.step_message)
            log.info("kneecap: pausing arrivals up to %.1f s: %s", warmup, warmup_why)
            return None
        return self._probe(decision, now, warmup_why, warmup)

    def _probe(self, decision: Decision, now: float, warmup_why: str, warmup: float | None = None) -> None:
        """Begin the search's next step at ``decision.level``."""
        paused = self._pause is not None and self._hold is not None
        if paused:
            warmup_why = f"{warmup_why} for {now - (self._hold or now):.1f} s; then the plan's warm-up"
        self._hold = self._pause = None
        level = decision.level or 0.0
        self.begin_step(level, self.ledger.grid.index(level), why=decision.why, warmup_s=warmup,
                        warmup_why=warmup_why)

    def _pause_over(self, cur: StepInfo, now: float) -> bool:
        """Paused arrivals end when the server says its queue is empty, or at the drain time."""
        until = self._pause[0] if self._pause is not None else now
        st = self.ledger.state(cur.index)
        since = (self._hold or now) + 1.0  # a sample taken after the pause began (and its last arrivals admitted)
        drained = st is not None and any(t >= since and w == 0 for t, w in st.waiting)
        return drained or now >= until

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
                          stride=self.workers() if self.open_loop else 1, warmup_s=warmup_s)
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
        if self.ledger.end_step(self.clock()) or self._hold is not None:
            self._hold = self._pause = None
            self.step_message = StepMessage(index=len(self.ledger.states), end=True)
            self.send_step(self.step_message)

    def stop(self, reason: str) -> None:
        """End the plan for ``reason`` (the shape then returns None and Locust stops the users)."""
        self.stop_reason = reason
        self.end_plan()

    def interrupt(self) -> None:
        log.info("kneecap: SIGTERM: ending the plan, writing partial results")
        self.stop("interrupted")

    def fleet_change(self, kind: str, worker: str) -> None:
        """A worker ``lost`` or ``joined`` (``load/wiring.py`` watches Locust's worker states; the master's
        ``finalize`` finds workers whose final report never came): say it and mark the steps it changed; while the
        plan runs, re-run the plan from the earliest level it changed, on the fleet as it is now
        (``load.on_worker_loss: continue``), or end the run (``abort``, losses only)."""
        ledger = self.ledger
        cur = ledger.current
        if cur is None or self.finalized:
            return
        event = ledger.fleet_change(kind, worker, self.clock(), time.time(), noticed_after_s=NOTICED_AFTER_S)
        running = (cur.ended is None or self._hold is not None) and self.stop_reason is None  # a search's hold too
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
        self._hold = self._pause = None  # a search chooses again once the re-run has its data
        self.begin_step(first.level, first.level_index, why=f"re-run: the fleet changed during step {steps}")
        self.rebalance()

    def _users(self, level: float, spawn: float) -> Step:
        """Closed loop: the level is users. Open loop: one arrival driver per worker, whatever the rate."""
        if self.open_loop:
            w = self.workers()
            return Step(w, float(w))
        return Step(int(level), spawn)

    def _progress_line(self, cur: StepInfo, now: float, measured: int) -> str:
        ledger = self.ledger
        metric = ledger.scenario.load.knee_metric
        s = ledger.measured(cur.index).sketches.get(metric)
        p99 = f" | {metric} p99 {s.quantile(0.99) * 1000:.0f} ms" if s is not None else ""
        knee = ledger.knee  # only once confirmed: a pending knee comes and goes as steps are judged
        knee_text = (ledger.search_line() if ledger.search else f"knee at {knee.load:g} ({knee.confidence})"
                     if knee.found and knee.confirmed else "no knee confirmed yet")
        seen = Bucket()  # warm-up included: failures from the first second on are worth saying
        seen.merge(ledger.fleet.bucket(cur.index, "warmup"))
        seen.merge(ledger.measured(cur.index))
        failures = top_failures(seen)
        return (f"step {cur.index} | {cur.level:g} {level_unit(ledger.mode)} | "
                f"{ledger.plan.samples_line(now - cur.started, measured, cur.warmup_s)}{p99} | {knee_text}"
                + (f" | failing: {failures}" if failures else ""))
