"""The knee-seeking load shape (master side). Thin: the steps are ``load/control.py``'s, the plan, the judging
and the knee pure code in analysis/.

``KneecapShape`` follows the scenario's ``load`` section: each tick (~1 s, or at a step's time mark when one
comes sooner) asks the master's step control for
the users to run now (it advances the step when the plan says the step has enough data, judges steps whose
data is complete, and stops once the knee is confirmed, on an error storm / abort_on_fail threshold, or after
the last level).
"""

from __future__ import annotations

import time

import gevent
from locust import LoadTestShape

__all__ = ["FINAL_REPORTS_S", "MARK_REPORTS_S", "MARK_SLACK_S", "TICK_S", "KneecapShape"]

FINAL_REPORTS_S = 5.0
"""Once the plan ends, how long the shape waits (at most) for every worker's report from past it before it lets
Locust stop: a headless master gives the workers' final reports at most 0.5 s once it quits
(``load/locust_waits.QUIT_WAIT_S``), which a busy machine can miss. A worker answers the step message that ends
the plan within milliseconds, so a run's end waits that."""

TICK_S = 1.0
"""Locust's shape tick: ``shape_worker`` calls ``tick`` once a second (less the time the call took)."""
MARK_SLACK_S = 0.002
"""Past a step's time mark by this much, so that the tick after the wait is surely past it."""
MARK_REPORTS_S = 0.2
"""After a time mark, how long the shape waits (at most) for the step to end: each worker reports at the mark on
its own clock (``WorkerSide.step_marks``), which started when the step message reached it."""


class KneecapShape(LoadTestShape):
    """Scenario-driven staircase / constant / open-loop plan. Use with ``kneecap run``, or
    ``-f locustfile.py,harness/load/shape_file.py``."""

    _hold_until = 0.0
    """After a step changed at its mark, the next tick waits until a whole tick has passed (as Locust's own cadence
    gave): a knee confirmed at once would end the run in the new step's warm-up, a step with no data."""

    def tick(self) -> tuple[int, float] | None:
        runner = self.runner
        assert runner is not None  # Locust gives the shape its runner before the first tick
        control = runner.environment.kneecap.master.control  # type: ignore[attr-defined]  # kneecap's own attribute
        if (hold := self._hold_until - time.perf_counter()) > 0:
            gevent.sleep(hold)
        step = control.tick(time.perf_counter())
        mark = control.next_mark_s(time.perf_counter()) if step is not None else None
        if mark is not None and mark < TICK_S and (step.users, step.spawn_rate) == runner.shape_last_tick:
            # Locust ticks once a second: meet the step's time mark on time, not up to a second after it (only
            # when Locust already runs these users: it applies what tick returns, and resets its last tick at start)
            gevent.sleep(mark + MARK_SLACK_S)
            cur, deadline = control.ledger.current, time.perf_counter() + MARK_REPORTS_S
            step = control.tick(time.perf_counter())
            while step is not None and control.ledger.current is cur and time.perf_counter() < deadline:
                gevent.sleep(0.01)  # the workers' reports at the mark (load/wiring.py) are on their way
                step = control.tick(time.perf_counter())
            if control.ledger.current is not cur:
                self._hold_until = time.perf_counter() + TICK_S
        if step is not None:
            return step.users, step.spawn_rate
        deadline = time.perf_counter() + FINAL_REPORTS_S
        while control.ledger.behind_the_plan() and time.perf_counter() < deadline:
            gevent.sleep(0.01)  # the workers' reports come in on the master's other greenlets meanwhile
        return None
