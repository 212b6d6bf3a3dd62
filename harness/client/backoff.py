"""How long a closed-loop user waits before its next request, from how its last one ended. Pure: records in, seconds
out (``harness/load/user.py`` sleeps them, in Locust's own wait, which ends at once when the user is stopped).

- **HTTP 429 with Retry-After** (seconds or an HTTP date, ``reader.py``), with ``endpoint.retry_after: honor``
  (the default): that long, at most ``RETRY_AFTER_MAX_S`` (30 s), so a server asking for an hour cannot
  stall a step. ``ignore``: no wait. Either way the 429 counts as a failed request.
- **Connection-level failures** (``connect_error``, ``connect_timeout``, ``tls_error``, a ``reset`` before
  any header, and ``client_error``, a bug that would fail every request as fast): ``CONNECT_FIRST_S``
  (50 ms), doubling with each one in a row, at most ``CONNECT_MAX_S`` (2 s); any other outcome starts it
  over. A dead endpoint then costs each user ~7 attempts in its first 4 s and one per
  2 s after, instead of thousands per second: little CPU, and a clean storm of classified failures.
- **Anything else** (a success, a 5xx, a timeout, a stream cut short: the server answered): no wait.

Open loop does not use this: arrivals are the schedule and are never delayed by what a response said.
"""

from __future__ import annotations

from harness.metrics.record import RequestRecord

__all__ = ["CONNECT_FIRST_S", "CONNECT_MAX_S", "RETRY_AFTER_MAX_S", "Backoff"]

RETRY_AFTER_MAX_S = 30.0
"""The longest a 429's Retry-After makes a user wait."""
CONNECT_FIRST_S = 0.05
"""The wait after a first connection-level failure; it doubles with each one in a row."""
CONNECT_MAX_S = 2.0
"""The longest wait between connection-level failures."""
_CONNECTION_LEVEL = frozenset(("connect_error", "connect_timeout", "tls_error", "client_error"))


class Backoff:
    """One user's backoff. Use::

        backoff = Backoff(honor_retry_after=scenario.endpoint.retry_after == "honor")
        wait_s = backoff.after(record)   # after each request; sleep that long before the next
    """

    __slots__ = ("_next", "honor_retry_after")

    def __init__(self, *, honor_retry_after: bool = True) -> None:
        self.honor_retry_after = honor_retry_after
        """Wait as a 429's Retry-After says (``endpoint.retry_after: honor``)."""
        self._next = CONNECT_FIRST_S

    def after(self, rec: RequestRecord) -> float:
        """Seconds to wait before the next request, given how ``rec`` ended."""
        error = rec.error
        if error is None:
            self._next = CONNECT_FIRST_S
            return 0.0
        if error in _CONNECTION_LEVEL or (error == "reset" and rec.headers_s is None):
            wait = self._next
            self._next = min(wait * 2, CONNECT_MAX_S)
            return wait
        self._next = CONNECT_FIRST_S
        if error == "http_429" and self.honor_retry_after and rec.retry_after_s:
            return min(rec.retry_after_s, RETRY_AFTER_MAX_S)
        return 0.0
