"""Request deadlines (TTFT, idle, total) and the user's hang-ups (cancel, patience): one ``Deadline`` per request.
Pure: times are passed in.

Who enforces them: for gevent (inside Locust) the worker's one reader (``client/mux.py``) checks every
in-flight request each ``TICK_S`` (50 ms, far below any sensible timeout), so no wait arms a timer per
streamed event; a hang-up must land within a few ms of its time, so a request that has one also gets a one-shot
timer at ``hangup_at()`` (one per request, not per event) that runs the same check. Plain sockets (threads,
scripts) wait for each receive with a timeout of ``next()``.

A hang-up is no timeout: it ends the request as *cancelled* (``ResponseReader.cancel``), not failed. ``cancel_at``:
the drawn delay after the request was fully sent (``workload.cancel``); ``patience_at``: the start plus
``patience.ttft_s``, which, like the TTFT limit, no longer applies once content has arrived.
"""

from __future__ import annotations

import math

__all__ = ["HANGUPS", "TICK_S", "Deadline"]

TICK_S = 0.05
HANGUPS = ("cancel", "patience")
"""The kinds that end a request as cancelled (the user hung up), not failed; the record's ``cancelled``."""


class Deadline:
    """One request's limits; the transport updates ``last`` and ``first`` as bytes and content arrive."""

    __slots__ = ("cancel_at", "expired", "first", "idle_s", "last", "patience_at", "total_at", "ttft_at")

    def __init__(self, start: float, ttft_s: float, idle_s: float, total_s: float, *, cancel_at: float = math.inf,
                 patience_at: float = math.inf) -> None:
        self.ttft_at = start + ttft_s
        self.total_at = start + total_s
        self.idle_s = idle_s
        self.cancel_at = cancel_at
        """When the user hangs up whatever came (``workload.cancel``); inf: never."""
        self.patience_at = patience_at
        """When the user hangs up unless content came (``workload.patience``); inf: never."""
        self.last = start
        """Arrival of the last bytes (the idle limit counts from here)."""
        self.first = False
        """Content has arrived: the TTFT limit and patience no longer apply."""
        self.expired: str | None = None
        """The deadline that fired: "ttft_timeout", "idle_timeout", "total_timeout", or a hang-up (``HANGUPS``)."""

    def next(self) -> tuple[float, str]:
        """The earliest deadline and its kind."""
        at, kind = min(self.total_at, self.last + self.idle_s), "total_timeout"
        if at != self.total_at:
            kind = "idle_timeout"
        if not self.first and self.ttft_at < at:
            at, kind = self.ttft_at, "ttft_timeout"
        if self.cancel_at < at:
            at, kind = self.cancel_at, "cancel"
        if not self.first and self.patience_at < at:
            at, kind = self.patience_at, "patience"
        return at, kind

    def hangup_at(self) -> float:
        """The earliest hang-up still to come (inf: none), for the exact timer."""
        return min(self.cancel_at, math.inf if self.first else self.patience_at)

    def due(self, now: float) -> str | None:
        at, kind = self.next()
        return kind if now >= at else None
