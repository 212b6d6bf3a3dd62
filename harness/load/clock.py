"""Measuring each worker's clock offset over Locust's own message channel (the math: ``metrics/clock.py``).

The master pings a worker ``ROUNDS`` times, one round trip after the other, when the test starts and whenever a
worker joins; the worker answers each ping at once with its receive and send times; the master estimates the
offset, keeps it for summary.json (``clocks``), warns when it is off (``metrics.clock.warning``), and tells the
worker its offset (``CLOCK_MESSAGE``), which then puts its saved requests' wall times on the master's clock.

Messages (msgpack, plain dicts), all kneecap's own types beside Locust's::

    master → worker  "kneecap_ping"   {"seq": 3, "t0": 1764609000.123}
    worker → master  "kneecap_pong"   {"seq": 3, "t0": ..., "t1": ..., "t2": ...}
    master → worker  "kneecap_clock"  {"offset": 0.0004}      (or null: not measured)

``KNEECAP_FAKE_CLOCK_SKEW_S`` (tests only) adds that many seconds to every wall-clock reading of a worker
process, as a host whose clock is off would: it exercises the warning and the correction on one kernel's clock.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

import gevent
from gevent.event import AsyncResult

from harness.metrics.clock import ROUNDS, ClockOffset, RoundTrip, estimate

__all__ = ["CLOCK_MESSAGE", "PING_MESSAGE", "PONG_MESSAGE", "ClockProbe", "register_worker", "worker_clock"]

log = logging.getLogger("kneecap")
PING_MESSAGE = "kneecap_ping"
PONG_MESSAGE = "kneecap_pong"
CLOCK_MESSAGE = "kneecap_clock"
ANSWER_TIMEOUT_S = 1.0
SKEW_ENV = "KNEECAP_FAKE_CLOCK_SKEW_S"


def _skew() -> float:
    try:
        return float(os.environ.get(SKEW_ENV) or 0.0)
    except ValueError:
        log.warning("kneecap: %s=%r is not a number; ignored", SKEW_ENV, os.environ.get(SKEW_ENV))
        return 0.0


def worker_clock() -> Callable[[], float]:
    """This worker's wall clock (``time.time``, skewed only for tests)."""
    skew = _skew()
    return (lambda: time.time() + skew) if skew else time.time


def register_worker(runner: Any, on_offset: Callable[[float | None], None]) -> None:
    """Answer the master's pings, and take the offset it measured."""
    now = worker_clock()

    def ping(msg: Any, **_: Any) -> None:
        t1 = now()
        d = msg.data
        runner.send_message(PONG_MESSAGE, {"seq": d["seq"], "t0": d["t0"], "t1": t1, "t2": now()})

    runner.register_message(PING_MESSAGE, ping)
    runner.register_message(CLOCK_MESSAGE, lambda msg, **_: on_offset(msg.data.get("offset")))


class ClockProbe:
    """Master side: ``measure(worker)`` runs the round trips in a greenlet and hands the result to ``done``."""

    def __init__(self, runner: Any, done: Callable[[str, ClockOffset], None]) -> None:
        self.runner = runner
        self.done = done
        self._waiting: dict[tuple[str, int], AsyncResult] = {}
        self._seq = 0
        runner.register_message(PONG_MESSAGE, self._pong)

    def _pong(self, msg: Any, **_: Any) -> None:
        t3 = time.time()
        d = msg.data
        waiting = self._waiting.pop((msg.node_id, d.get("seq")), None)
        if waiting is not None:  # else an answer after its timeout: that round trip already counted as lost
            waiting.set(RoundTrip(float(d["t0"]), float(d["t1"]), float(d["t2"]), t3))

    def measure(self, worker: str) -> gevent.Greenlet:
        return gevent.spawn(self._measure, worker)

    def _measure(self, worker: str) -> None:
        trips = []
        for _ in range(ROUNDS):
            self._seq += 1
            key = (worker, self._seq)
            answer = self._waiting[key] = AsyncResult()
            try:
                self.runner.send_message(PING_MESSAGE, {"seq": self._seq, "t0": time.time()}, client_id=worker)
                trips.append(answer.get(timeout=ANSWER_TIMEOUT_S))
            except (gevent.Timeout, Exception):  # no answer in time (a BaseException), or no worker: lost
                self._waiting.pop(key, None)
        result = estimate(trips)
        try:
            self.runner.send_message(CLOCK_MESSAGE, {"offset": result.offset_s}, client_id=worker)
        except Exception:  # the worker went away: its records (if any) keep their own clock, and say so
            log.warning("kneecap: could not tell worker %s its clock offset", worker)
        self.done(worker, result)
