"""A search's steps between two levels (master side): hold the load while the finished step's last data comes in,
choose the next level on it, drain a heavier step's queue before a lighter one, begin the next step.

``StepControl`` (``load/control.py``) owns the steps; for ``load.mode: search | open_search`` it hands the time
between two of them to this object: ``hold`` when a step is done, then ``tick`` each second until the next one
begins (or the search is done). The choice itself is pure code (``analysis/search.py``, through the ledger).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from harness.analysis.ledger import Ledger
from harness.analysis.search import Decision, drain_warmup
from harness.analysis.steps import StepInfo
from harness.metrics.protocol import StepMessage
from harness.summary import level_unit

__all__ = ["HOLD_MAX_S", "HOLD_WARMUP_S", "SearchSteps", "Steps"]

log = logging.getLogger("kneecap")
HOLD_MAX_S = 10.0
"""The longest a search waits for a finished step's last reports before choosing the next level without them."""
HOLD_WARMUP_S = 86_400.0
"""Between a search's steps the workers' records are warm-up: the load is still the last level's (or paused)."""


class Steps(Protocol):
    """What this object uses of the step control (``load/control.StepControl``)."""

    ledger: Ledger
    open_loop: bool
    step_message: StepMessage | None
    clock: Callable[[], float]
    send_step: Callable[[StepMessage], None]
    workers: Callable[[], int]
    judge: Callable[[], None]

    def begin_step(self, level: float, level_index: int = 0, *, why: str = "", warmup_s: float | None = None,
                   warmup_why: str = "") -> StepInfo: ...


class SearchSteps:
    """Between two steps of a search: ``hold``, then ``tick`` until the next step begins."""

    def __init__(self, control: Steps) -> None:
        self.control = control
        self._hold: float | None = None
        """When the last step ended (the load holds while its data comes in); None while a step runs."""
        self._pause: tuple[float, Decision, str] | None = None
        """An open loop going down in load: arrivals paused until (time), then the decision's step, and why."""

    @property
    def between(self) -> bool:
        """A step ended and the next has not begun."""
        return self._hold is not None

    def clear(self) -> None:
        """The plan ended, or a fleet change re-runs a level: nothing to choose any more."""
        self._hold = self._pause = None

    def tick(self, cur: StepInfo, now: float) -> str | None:
        """Begin the next step once its time came; returns why the search is done instead, or None."""
        if self._pause is not None:
            if self._pause_over(cur, now):
                self._probe(self._pause[1], now, self._pause[2])
            return None
        return self._next(cur, now) if self._hold_over(cur, now) else None

    def _send(self, rate: float | None) -> None:
        """Move the workers to a step that is all warm-up (at ``rate``: open loop; 0 pauses arrivals)."""
        c = self.control
        c.step_message = StepMessage(index=len(c.ledger.states), rate=rate, stride=c.workers(), warmup_s=HOLD_WARMUP_S)
        c.send_step(c.step_message)

    def hold(self, why: str, now: float) -> None:
        """A search's step is done: close it, keep the load, and move the workers to a step that is all warm-up
        until the next level is chosen (``_hold_over``) from the closed step's complete data."""
        c = self.control
        c.ledger.end_step(c.clock(), why)
        self._hold = now
        cur = c.ledger.current
        self._send(cur.level if c.open_loop and cur is not None else None)

    def _hold_over(self, cur: StepInfo, now: float) -> bool:
        """Every worker's report from past ``cur`` arrived (they report at once on a step message), or
        ``HOLD_MAX_S`` passed (then the choice is made on the data there is, and the console says so)."""
        if self.control.ledger.fleet.step_complete(cur.index, self.control.workers()):
            return True
        if now - (self._hold or now) < HOLD_MAX_S:
            return False
        log.warning("kneecap: step %d's last reports did not all arrive within %.0f s of its end: choosing the next "
                    "level on the data there is", cur.index, HOLD_MAX_S)
        return True

    def _next(self, cur: StepInfo, now: float) -> str | None:
        """Choose where to probe after ``cur`` and begin it (after a drain when an open loop goes down in load).
        Returns why the search is done instead, or None."""
        c = self.control
        ledger = c.ledger
        c.judge()
        decision = ledger.next_probe(now)
        if decision.level is None:
            return f"search done: {decision.why}"
        e2e, spec = ledger.measured(cur.index).sketches.get("e2e"), ledger.scenario.load.step
        warmup, warmup_why = drain_warmup(cur, decision.level, e2e.quantile(0.99) if e2e and e2e.count else None,
                                          warmup_s=spec.warmup_s, max_duration_s=spec.max_duration_s,
                                          unit=level_unit(ledger.mode))
        if warmup is not None and c.open_loop:
            # An open loop's queue past the knee has no bound: pause arrivals until it is served (the server's
            # waiting queue reads 0, or the drain time passed), then warm up as usual.
            self._pause = (now + warmup, decision, f"arrivals paused to drain {cur.level:g} req/s's queue")
            self._send(0.0)
            log.info("kneecap: pausing arrivals up to %.1f s: %s", warmup, warmup_why)
            return None
        self._probe(decision, now, warmup_why, warmup)
        return None

    def _probe(self, decision: Decision, now: float, warmup_why: str, warmup: float | None = None) -> None:
        """Begin the search's next step at ``decision.level``."""
        paused = self._pause is not None and self._hold is not None
        if paused:
            warmup_why = f"{warmup_why} for {now - (self._hold or now):.1f} s; then the plan's warm-up"
        self._hold = self._pause = None
        level = decision.level or 0.0
        self.control.begin_step(level, self.control.ledger.grid.index(level), why=decision.why, warmup_s=warmup,
                                warmup_why=warmup_why)

    def _pause_over(self, cur: StepInfo, now: float) -> bool:
        """Paused arrivals end when the server says its queue is empty, or at the drain time."""
        until = self._pause[0] if self._pause is not None else now
        st = self.control.ledger.state(cur.index)
        since = (self._hold or now) + 1.0  # a sample taken after the pause began (and its last arrivals admitted)
        drained = st is not None and any(t >= since and w == 0 for t, w in st.waiting)
        return drained or now >= until

