"""The master's watch over its workers: Locust's worker states, read every ``WATCH_EVERY_S``.

A worker missing (3 missed heartbeats) or gone is lost, a new one joined: Locust keeps the load going on
the others, the step control re-runs the step (``StepControl.fleet_change``). Clocks drift and get
stepped, so every ``clock_every_s()`` the watch measures each worker's clock again, and a joiner's at once
(a new host, or one back from a partition). A plain ``-u/-t`` run aborted by a loss (``on_worker_loss:
abort``) is ended here; a shape ends by itself. ``poll`` is one pass on the clock it is given, so the tests
drive it on a fake runner and a fake clock; ``start`` runs it on a greenlet.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import gevent
from locust.runners import STATE_MISSING, STATE_RUNNING, STATE_SPAWNING

from harness.load.clock import clock_every_s
from harness.load.control import StepControl

__all__ = ["WATCH_EVERY_S", "FleetWatch"]

WATCH_EVERY_S = 0.5


class FleetWatch:
    """Usage: ``FleetWatch(runner, control, measure=probe.measure, plain=...).start()`` at test start."""

    def __init__(self, runner: Any, control: StepControl, *, measure: Callable[[str], None], plain: bool,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.runner = runner
        self.control = control
        self.measure = measure
        """Measure a worker's clock offset (``load/clock.py``)."""
        self.plain = plain
        """A plain ``-u/-t`` run (no shape): an abort ends it here."""
        self.clock = clock
        self.known: set[str] = set()
        self.clocks_due = 0.0

    def alive(self) -> set[str]:
        return {c.id for c in self.runner.clients.all if c.state != STATE_MISSING}

    def begin(self) -> None:
        """The fleet at test start: every worker's clock measured once, the next measurement scheduled."""
        self.known = self.alive()
        for worker in sorted(self.known):
            self.measure(worker)
        self.clocks_due = self.clock() + clock_every_s()

    def poll(self) -> bool:
        """One look at the fleet; False once the run is to end (a plain run aborted)."""
        now = self.alive()
        if self.runner.state in (STATE_RUNNING, STATE_SPAWNING):  # not the workers stopping at the end
            if self.clock() >= self.clocks_due:
                self.clocks_due = self.clock() + clock_every_s()
                for worker in sorted(now & self.known):
                    self.measure(worker)
            for worker in sorted(self.known - now):
                self.control.fleet_change("lost", worker)
            for worker in sorted(now - self.known):
                self.control.fleet_change("joined", worker)
                self.measure(worker)
            if self.control.stop_reason is not None and self.plain:
                self.runner.quit()  # aborted (on_worker_loss) in a plain -u/-t run; a shape ends by itself
                return False
        self.known = now
        return True

    def start(self) -> gevent.Greenlet:
        self.begin()
        return gevent.spawn(self._loop)

    def _loop(self) -> None:
        while not self.control.finalized:
            gevent.sleep(WATCH_EVERY_S)
            if not self.poll():
                return
