"""Request deadlines (TTFT, idle, total): one ``Deadline`` per request, enforced in one of two ways.

- **Cooperative sockets (gevent, i.e. inside Locust):** one watchdog greenlet per process checks every
  in-flight request each ``TICK_S`` and, past a deadline, records which one and shuts the socket down,
  which wakes the blocked read. Sockets wait without a timeout: under gevent every wait with a timeout
  arms a timer, ~16 µs per streamed event, a fifth of the client's cost per token. Deadlines are
  exact to ``TICK_S`` (50 ms), far below any sensible timeout.
- **Plain sockets (threads, scripts):** the transport sets the socket timeout to the time left until
  ``Deadline.next()`` before each read; there a timeout costs nothing extra. No background thread is
  ever started (a real thread alive when gevent later patches the process can deadlock imports).
"""

from __future__ import annotations

import contextlib
import socket
import time

__all__ = ["TICK_S", "Deadline", "watchdog"]

TICK_S = 0.05


class Deadline:
    """One request's limits; the transport updates ``last`` and ``first`` as bytes and content arrive."""

    __slots__ = ("expired", "first", "idle_s", "last", "sock", "total_at", "ttft_at")

    def __init__(self, sock: socket.socket, start: float, ttft_s: float, idle_s: float, total_s: float) -> None:
        self.sock = sock
        self.ttft_at = start + ttft_s
        self.total_at = start + total_s
        self.idle_s = idle_s
        self.last = start
        self.first = False
        self.expired: str | None = None
        """The deadline that fired: "ttft_timeout", "idle_timeout" or "total_timeout"."""

    def next(self) -> tuple[float, str]:
        """The earliest deadline and its kind."""
        at, kind = min(self.total_at, self.last + self.idle_s), "total_timeout"
        if at != self.total_at:
            kind = "idle_timeout"
        if not self.first and self.ttft_at < at:
            at, kind = self.ttft_at, "ttft_timeout"
        return at, kind

    def due(self, now: float) -> str | None:
        at, kind = self.next()
        return kind if now >= at else None


class _Watchdog:
    def __init__(self) -> None:
        self._active: dict[int, Deadline] = {}
        self._running = False

    def watch(self, d: Deadline) -> Deadline:
        """Enforce ``d`` from the watchdog greenlet (cooperative sockets only)."""
        self._active[id(d)] = d
        if not self._running:
            import gevent  # only reached with gevent sockets, i.e. gevent is in use

            self._running = True
            gevent.spawn(self._run)
        return d

    def forget(self, d: Deadline) -> None:
        self._active.pop(id(d), None)

    def _run(self) -> None:
        import gevent

        while True:
            gevent.sleep(TICK_S)
            now = time.perf_counter()
            for d in list(self._active.values()):
                kind = d.due(now)
                if kind is not None:
                    d.expired = kind
                    self._active.pop(id(d), None)
                    with contextlib.suppress(OSError):
                        d.sock.shutdown(socket.SHUT_RDWR)


watchdog = _Watchdog()
"""The process's watchdog (its greenlet starts on first use)."""
