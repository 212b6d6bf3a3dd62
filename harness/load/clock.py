"""Measuring each worker's clock offset over Locust's own message channel (the math: ``metrics/clock.py``).

The master pings a worker ``ROUNDS`` times, one round trip after the other, when the test starts, whenever a
worker joins and every ``CLOCK_EVERY_S``; the worker answers each ping at once with its receive and send times;
the master estimates the offset, keeps it for summary.json (``clocks``), warns when it is off
(``metrics.clock.warning``), and tells the worker its offset (``CLOCK_MESSAGE``), which then puts its saved
requests' wall times on the master's clock.

Messages (msgpack, plain dicts), all kneecap's own types beside Locust's::

    master → worker  "kneecap_ping"   {"seq": 3, "t0": 1764609000.123}
    worker → master  "kneecap_pong"   {"seq": 3, "t0": ..., "t1": ..., "t2": ...}
    master → worker  "kneecap_clock"  {"offset": 0.0004}      (or null: not measured)

The master measures again every ``CLOCK_EVERY_S`` (``KNEECAP_CLOCK_EVERY_S`` overrides it): a clock that drifts
or is stepped mid-run is warned about (``metrics.clock.drift_warning``), and the workers' wall times follow it.

``KNEECAP_FAKE_CLOCK_SKEW_S`` (tests only) adds that many seconds to every wall-clock reading of a worker
process, as a host whose clock is off would: it exercises the warning and the correction on one kernel's clock.
``KNEECAP_FAKE_CLOCK_DRIFT`` (tests only) makes that clock run fast by that many seconds per second (0.001: 1 ms
a second), as an undisciplined one drifts.
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

__all__ = ["CLOCK_EVERY_S", "CLOCK_MESSAGE", "PING_MESSAGE", "PONG_MESSAGE", "ClockProbe", "clock_every_s",
           "register_worker", "worker_clock"]

log = logging.getLogger("kneecap")
PING_MESSAGE = "kneecap_ping"
PONG_MESSAGE = "kneecap_pong"
CLOCK_MESSAGE = "kneecap_clock"
ANSWER_TIMEOUT_S = 1.0
CLOCK_EVERY_S = 60.0
"""How often the master measures every worker's clock again during a run."""
SKEW_ENV = "KNEECAP_FAKE_CLOCK_SKEW_S"
DRIFT_ENV = "KNEECAP_FAKE_CLOCK_DRIFT"
EVERY_ENV = "KNEECAP_CLOCK_EVERY_S"


def _number(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name) or default)
    except ValueError:
        log.warning("kneecap: %s=%r is not a number; using %g", name, os.environ.get(name), default)
        return default


def clock_every_s() -> float:
    """The period of the master's clock measurements (``CLOCK_EVERY_S``, or ``KNEECAP_CLOCK_EVERY_S``; at least 1 s)."""
    return max(1.0, _number(EVERY_ENV, CLOCK_EVERY_S))


def worker_clock() -> Callable[[], float]:
    """This worker's wall clock (``time.time``, skewed and drifting only for tests)."""
    skew, rate = _number(SKEW_ENV, 0.0), _number(DRIFT_ENV, 0.0)
    if rate:
        t0 = time.monotonic()
        return lambda: time.time() + skew + rate * (time.monotonic() - t0)
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
