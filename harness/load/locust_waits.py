"""Locust's fixed waits at the master's end, cut to what they wait for.

A headless master run paid ~2 s of fixed sleeps at its end that wait for nothing kneecap still needs:

- **At the end**, ``MasterRunner.quit`` sends ``quit`` to the workers and sleeps 0.5 s "for final stats report
  from all workers" — and a headless shape run calls it four times (the shape's end, "Shape test completed", the
  ``quitting`` event, the shutdown). A worker sends its last reports before its own ``quit`` message, on the same
  socket, and the master reads them in order: once every worker has quit, nothing more can come.
  ``quit_when_workers_have`` makes ``quit`` wait until then (at most the same 0.5 s), so the later calls, with no
  worker left, cost nothing. A worker that never answers (lost, unreachable) gets the full 0.5 s, as before.

- **A plain ``-u/-t`` run** (no shape) went straight to that quit: a busy machine could miss the 0.5 s, and its
  last step then lost a worker (a fleet test counted 1 of 2 workers once). ``end_the_plan_first`` ends it as a shape
  run ends: the plan first (the step message past it, which every worker answers within a round trip), waiting
  for those answers (at most ``shapes.FINAL_REPORTS_S``), then Locust's stop.

- **Before the run**, Locust's wait for ``--expect-workers`` looks at no signal: a master whose ``kneecap run`` died
  before its workers connected (its parent-death SIGTERM) waited forever, an orphan. ``end_on_sigterm`` exits then.

Left as Locust has it: the once-a-second check for ``--expect-workers`` at start (~1 s a run). Cut, the load
starts while workers are still starting up (open-loop send lag past 10 ms): that second is the workers' settling
time.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import gevent
from locust.rpc import Message
from locust.runners import STATE_INIT, MasterRunner

from harness import exitcodes
from harness.load.shapes import FINAL_REPORTS_S

if TYPE_CHECKING:
    from harness.load.master import MasterSide

__all__ = ["POLL_S", "QUIT_WAIT_S", "end_on_sigterm", "end_the_plan_first", "quit_when_workers_have"]

log = logging.getLogger("kneecap")

QUIT_WAIT_S = 0.5
"""Locust's own wait for the workers' final reports at ``quit``: the longest ours waits."""
POLL_S = 0.01


def quit_when_workers_have(runner: Any) -> None:
    """Replace ``runner.quit`` (a ``MasterRunner``'s) by one that waits for the workers' ``quit`` rather than a
    fixed 0.5 s; otherwise Locust's (stop, ``quit`` to every worker, stop the runner's greenlets)."""

    def quit() -> None:  # Locust's name: its code calls ``self.quit()``
        runner.stop(send_stop_to_client=False)
        for client in runner.clients.all:
            runner.server.send_to_client(Message("quit", None, client.id))
        deadline = time.monotonic() + QUIT_WAIT_S
        while runner.clients.all and time.monotonic() < deadline:
            gevent.sleep(POLL_S)
        runner.greenlet.kill(block=True)

    runner.quit = quit


def end_the_plan_first(environment: Any, master: MasterSide) -> None:
    """A plain run's master: when Locust begins to stop (``test_stopping``), end the plan and wait (at most
    ``FINAL_REPORTS_S``) until every worker has reported from past it."""

    def on_test_stopping(**_: Any) -> None:
        if master.finalized:
            return
        master.control.end_plan()
        deadline = time.perf_counter() + FINAL_REPORTS_S
        while master.ledger.behind_the_plan() and time.perf_counter() < deadline:
            gevent.sleep(POLL_S)  # the answers come in on the master's other greenlets meanwhile

    environment.events.test_stopping.add_listener(on_test_stopping)


def end_on_sigterm(runner: Any, interrupt: Callable[[], None]) -> None:
    """SIGTERM on a master or local run: ``interrupt`` (the plan ends, partial results); before the run began there
    is nothing to write, so the process exits (``NO_VALID_RESULT``)."""
    if runner.state == STATE_INIT:
        ready = len(runner.clients.ready) if isinstance(runner, MasterRunner) else 0
        log.error("kneecap: SIGTERM before the run began (%d workers connected): exiting", ready)
        raise SystemExit(exitcodes.NO_VALID_RESULT)  # gevent raises it in the main greenlet: the process ends
    interrupt()
