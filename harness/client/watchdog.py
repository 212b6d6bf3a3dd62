"""Request deadlines (TTFT, idle, total) enforced by one watchdog per process instead of socket timeouts.

Why: under gevent, every socket wait with a timeout arms a timer — about 16 µs per streamed event,
a fifth of the client's cost per token. Here sockets block without a timeout; a single thread (a
greenlet when gevent has patched ``threading``) checks every in-flight request each ``TICK_S`` and,
past a deadline, records which one and shuts the socket down, which wakes the blocked read. Deadlines
are therefore exact to ``TICK_S`` (50 ms), far below any sensible timeout.
"""

from __future__ import annotations

import contextlib
import socket
import threading
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

    def due(self, now: float) -> str | None:
        """The earliest deadline already past, if any."""
        limits = [(self.total_at, "total_timeout"), (self.last + self.idle_s, "idle_timeout")]
        if not self.first:
            limits.append((self.ttft_at, "ttft_timeout"))
        at, kind = min(limits)
        return kind if now >= at else None


class _Watchdog:
    def __init__(self) -> None:
        self._active: dict[int, Deadline] = {}
        self._thread: threading.Thread | None = None

    def watch(self, d: Deadline) -> Deadline:
        self._active[id(d)] = d
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="kneecap-deadlines", daemon=True)
            self._thread.start()
        return d

    def forget(self, d: Deadline) -> None:
        self._active.pop(id(d), None)

    def _run(self) -> None:
        while True:
            time.sleep(TICK_S)
            now = time.perf_counter()
            for d in list(self._active.values()):
                kind = d.due(now)
                if kind is not None:
                    d.expired = kind
                    self._active.pop(id(d), None)
                    with contextlib.suppress(OSError):
                        d.sock.shutdown(socket.SHUT_RDWR)


watchdog = _Watchdog()
"""The process's watchdog (one thread, started on first use)."""
