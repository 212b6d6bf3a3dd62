"""Request deadlines (TTFT, idle, total): one ``Deadline`` per request. Pure: times are passed in.

Who enforces them: for gevent (inside Locust) the worker's one reader (``client/mux.py``) checks every
in-flight request each ``TICK_S`` (50 ms, far below any sensible timeout), so no wait arms a timer per
streamed event; plain sockets (threads, scripts) wait for each receive with a timeout of ``next()``.
"""

from __future__ import annotations

__all__ = ["TICK_S", "Deadline"]

TICK_S = 0.05


class Deadline:
    """One request's limits; the transport updates ``last`` and ``first`` as bytes and content arrive."""

    __slots__ = ("expired", "first", "idle_s", "last", "total_at", "ttft_at")

    def __init__(self, start: float, ttft_s: float, idle_s: float, total_s: float) -> None:
        self.ttft_at = start + ttft_s
        self.total_at = start + total_s
        self.idle_s = idle_s
        self.last = start
        """Arrival of the last bytes (the idle limit counts from here)."""
        self.first = False
        """Content has arrived: the TTFT limit no longer applies."""
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
