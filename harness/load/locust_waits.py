"""Locust's fixed waits on the master, cut to what they wait for.

A headless master run pays ~3 s of fixed sleeps that wait for nothing kneecap still needs (measured on a 1 s
run: 7.0 s from start to exit):

- **At start**, Locust checks for ``--expect-workers`` once a second: workers started beside the master connect
  ~0.1 s after it, and the load then begins a second later. ``wait_for_workers`` (called at ``init``) waits in
  10 ms polls until each has said kneecap's hello (its handlers are up, its start-up done: a worker counts as
  ready to Locust before its ``init`` runs, and load sent into a worker still starting up was late by 240 ms in
  an open-loop step), so Locust's check then finds them at once.
- **At the end**, ``MasterRunner.quit`` sends ``quit`` to the workers and sleeps 0.5 s "for final stats report
  from all workers" — and a headless shape run calls it four times (the shape's end, "Shape test completed", the
  ``quitting`` event, the shutdown). A worker sends its last reports before its own ``quit`` message, on the same
  socket, and the master reads them in order: once every worker has quit, nothing more can come.
  ``quit_when_workers_have`` makes ``quit`` wait until then (at most the same 0.5 s), so the later calls, with no
  worker left, cost nothing. A worker that never answers (lost, unreachable) gets the full 0.5 s, as before.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import gevent
from locust.rpc import Message

__all__ = ["FINAL_REPORTS_S", "POLL_S", "quit_when_workers_have", "wait_for_workers"]

FINAL_REPORTS_S = 0.5
"""Locust's own wait for the workers' final reports at ``quit``: the longest ours waits."""
POLL_S = 0.01


def wait_for_workers(ready: Callable[[], int], expected: int, timeout_s: float) -> bool:
    """Wait (yielding to the master's loop) until ``ready()`` counts ``expected`` workers or ``timeout_s`` passed;
    whether it does. Locust's own once-a-second wait follows and handles the rest (its log lines, its max wait)."""
    deadline = time.monotonic() + timeout_s
    while ready() < expected:
        if time.monotonic() >= deadline:
            return False
        gevent.sleep(POLL_S)
    return True


def quit_when_workers_have(runner: Any) -> None:
    """Replace ``runner.quit`` (a ``MasterRunner``'s) by one that waits for the workers' ``quit`` rather than a
    fixed 0.5 s; otherwise Locust's (stop, ``quit`` to every worker, stop the runner's greenlets)."""

    def quit() -> None:  # Locust's name: its code calls ``self.quit()``
        runner.stop(send_stop_to_client=False)
        for client in runner.clients.all:
            runner.server.send_to_client(Message("quit", None, client.id))
        deadline = time.monotonic() + FINAL_REPORTS_S
        while runner.clients.all and time.monotonic() < deadline:
            gevent.sleep(POLL_S)
        runner.greenlet.kill(block=True)

    runner.quit = quit
