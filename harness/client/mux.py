"""The worker's one reader (gevent): every open stream's socket in one ``epoll``, drained per wake.

Without it each stream is a greenlet blocked in ``recv``: per streamed event the hub wakes, switches to that
greenlet, which reads, parses, finds nothing more (a second ``recv``, ``EAGAIN``), re-arms its watcher and
switches back: most of a worker's time goes to the gevent hub (docs/architecture.md). Here the
request's greenlet registers its socket and waits once; the hub watches the epoll's own fd, and its callback
reads every ready socket (``InFlight.pump``: one ``recvmsg`` with the kernel's timestamp, the push parsers)
and wakes a request's greenlet only when its response is over. One switch per request, not per token.

Level-triggered: a socket with bytes left stays ready and is read again on the next wake. Around each of the
hub's polls (libev prepare/check watchers) it notes whether the hub had not polled for more than 1 ms, and if so
which sockets already had bytes then: only their receives may hold chunks the kernel merged while they waited
(``InFlight.pump``'s ``behind``). Bytes that came once the hub was back in its poll woke it; they are dated by the
pass that read them (``InFlight.pump``'s ``start``). Deadlines live here
too: a timer every ``deadline.TICK_S`` ends each request whose TTFT, idle or total limit has passed (the reader
knows every stream's last arrival), so no receive waits with a timeout (under gevent each would arm a timer). A
request with a hang-up (``Deadline.hangup_at``: the user cancels, or runs out of patience) gets one one-shot timer
at that moment, which runs the same check on it: the hang-up lands within ~1 ms, not within a tick.

The callback runs in the hub and never blocks: the sockets are non-blocking and parsing is CPU work. Anything
it raises for one request (a bug) is thrown into that request's greenlet, never into the hub.
"""

from __future__ import annotations

import contextlib
import math
import select
import time
from typing import Any

from gevent.hub import Waiter, get_hub
from gevent.monkey import get_original

from harness.client.deadline import TICK_S
from harness.client.inflight import LATE_S, InFlight

__all__ = ["Mux", "available", "read"]

_NONE: frozenset[int] = frozenset()

try:  # gevent's patched select has no epoll; ours is the real one, watched by the hub
    _epoll = get_original("select", "epoll")
except AttributeError:  # not Linux: see ``available``
    _epoll = None


def available() -> bool:
    """The platform has epoll; elsewhere each request's greenlet waits for its own socket."""
    return _epoll is not None


class Mux:
    """The streams in flight in one gevent hub (one per worker process; one per thread with its own hub)."""

    def __init__(self) -> None:
        self.hub = get_hub()
        self.epoll = _epoll()
        self.live: dict[int, InFlight] = {}
        self._hangups: dict[int, Any] = {}
        """By fd: the one-shot timer of a request's next hang-up (``_arm``)."""
        loop = self.hub.loop
        self._io = loop.io(self.epoll.fileno(), 1)
        self._timer = loop.timer(TICK_S, TICK_S)
        self._poll = self.epoll.poll
        # Around each of the hub's polls: how long it had not looked at the sockets (greenlets ran, e.g. users
        # starting their next requests) tells a receive that may have found chunks merged by waiting.
        self._prepare, self._check = loop.prepare(), loop.check()
        self.polled = time.perf_counter()
        """When the hub's last poll returned."""
        self.waited: frozenset[int] | set[int] = _NONE
        """The sockets that had bytes when the hub came back to poll more than ``LATE_S`` after the last poll
        returned: their bytes waited while the hub was away (since ``away_since``)."""
        self.away_since = self.polled

    def read(self, st: InFlight) -> None:
        """Block this greenlet until ``st``'s reading is over (its reader over, or the socket stale)."""
        fd = st.fd
        st.waiter = waiter = Waiter(self.hub)
        self.epoll.register(fd, select.EPOLLIN)
        self.live[fd] = st
        if len(self.live) == 1:
            self._io.start(self._ready)
            self._timer.start(self._tick)
            self.polled = time.perf_counter()
            self._prepare.start(self._before_poll)
            self._check.start(self._after_poll)
        if (at := st.deadline.hangup_at()) != math.inf:
            self._arm(fd, st, at)
        try:
            waiter.get()
        finally:
            if self.live.get(fd) is st:  # this greenlet was killed while waiting (a stopping user)
                self._drop(fd)

    def _arm(self, fd: int, st: InFlight, at: float) -> None:
        timer = self.hub.loop.timer(max(0.0, at - time.perf_counter()))
        self._hangups[fd] = timer
        timer.start(self._hangup, fd, st, update=True)  # update: from the loop's time now, not its last wake's

    def _hangup(self, fd: int, st: InFlight) -> None:
        """Hub callback: ``st``'s hang-up time came. Ended as its deadline says; a timer early by the clock's grain
        is armed again; a patience that content beat does nothing (content already in the socket is read first, as
        ``_tick`` does)."""
        self._hangups.pop(fd, None)
        now = time.perf_counter()
        done = self._pass()
        if self.live.get(fd) is st:
            kind = st.deadline.due(now)
            if kind is not None:
                self._end(fd, st, kind, now, done)
            elif (at := st.deadline.hangup_at()) != math.inf:
                self._arm(fd, st, at)
        self._wake(done)

    def _drop(self, fd: int) -> None:
        del self.live[fd]
        timer = self._hangups.pop(fd, None)
        if timer is not None:
            timer.stop()
        with contextlib.suppress(OSError, ValueError):  # already closed by its owner
            self.epoll.unregister(fd)
        if not self.live:  # idle: nothing keeps the hub's loop alive on our account
            self._io.stop()
            self._timer.stop()
            self._prepare.stop()
            self._check.stop()

    def _before_poll(self) -> None:
        # A socket not ready now gets bytes only while the hub waits in its poll, which they wake: not late. One
        # non-blocking poll, and only after the hub was away (users starting requests, a long pass, the CPU taken).
        self.waited = {fd for fd, _ in self._poll(0)} if time.perf_counter() - self.polled > LATE_S else _NONE
        self.away_since = self.polled

    def _after_poll(self) -> None:
        self.polled = time.perf_counter()

    def _ready(self) -> None:
        """Hub callback: the epoll has ready sockets. Read each once; wake the requests that ended."""
        self._wake(self._pass())

    def _pass(self) -> list[tuple[Any, BaseException | None]]:
        """Read each ready socket once; the requests that ended, with what their greenlets get (``_wake``)."""
        done: list[tuple[Any, BaseException | None]] = []  # (the request's greenlet, what it gets)
        live, waited, since, start = self.live, self.waited, self.away_since, time.perf_counter()
        self.waited = _NONE
        for fd, _ in self._poll(0):
            st = live.get(fd)
            if st is None:
                continue
            try:
                over = st.pump(since if fd in waited else None, start)
            except BaseException as exc:  # a bug in parsing: that request's greenlet gets it, the hub goes on
                self._drop(fd)
                done.append((st.waiter, exc))
                continue
            if over:
                self._drop(fd)
                done.append((st.waiter, None))
        return done

    @staticmethod
    def _wake(done: list[tuple[Any, BaseException | None]]) -> None:
        for waiter, error in done:
            if error is None:
                waiter.switch(None)
            else:
                waiter.throw(error)

    def _tick(self) -> None:
        """Hub callback every TICK_S: end each request whose deadline has passed.

        What reached the sockets by ``now`` is read first (one pass, as ``_ready``): back from a long absence (a long
        pass, the CPU taken) the hub runs its timers before its I/O in the same loop iteration, and a stream whose
        bytes, EOF or reset waited in the kernel is not idle; the receive's kernel stamp dates them."""
        now = time.perf_counter()
        done = self._pass()
        for fd, st in list(self.live.items()):
            kind = st.deadline.due(now)
            if kind is not None:
                self._end(fd, st, kind, now, done)
        self._wake(done)

    def _end(self, fd: int, st: InFlight, kind: str, now: float, done: list[tuple[Any, BaseException | None]]) -> None:
        """``st`` ends by its deadline (``kind``); its greenlet is woken with the others of the pass (``done``)."""
        st.expire(kind, now)
        self._drop(fd)
        done.append((st.waiter, None))


def read(st: InFlight) -> None:
    """Read ``st`` to its end in this hub's mux (made on first use)."""
    hub = get_hub()
    mux = getattr(hub, "kneecap_mux", None)
    if mux is None:
        mux = hub.kneecap_mux = Mux()
    mux.read(st)
