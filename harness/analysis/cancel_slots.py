"""Did the server free the slots of the requests whose users hung up (``workload.cancel``, ``patience``)? Pure.

The client's mean concurrency over the step's measured time by Little's law — the sum of its requests' durations
(a cancelled one's to its hang-up: ``BUSY_KEY``) over that time — against the server's own mean of requests in it,
its ``running`` + ``waiting`` gauges as scraped (vLLM's ``num_requests_running`` and ``num_requests_waiting``). A
server that aborts a request when its client leaves holds about what the client has in flight; one that generates
on for no one holds more: the cancelled requests' remaining work. Judged with a margin for the scrapes' sampling
and the step's edges (``MARGIN``: 15% and one request); another client of the same endpoint would raise the
server's side too, which the words say.
"""

from __future__ import annotations

from harness.summary import CancelSlots, Server

__all__ = ["MARGIN", "cancel_slots"]

MARGIN = (0.15, 1.0)
"""The server may hold up to the client's concurrency × (1 + 0.15) + 1 and still count as having freed the slots."""


def cancel_slots(busy_ms: int, measured_s: float, server: Server | None, cancelled: int) -> CancelSlots | None:
    """The step's verdict, or None when it has no hang-ups, no measured time or no running gauge from the server."""
    running = server.running_mean if server is not None else None
    if not cancelled or measured_s <= 0 or not isinstance(running, float) or server is None:
        return None
    client = busy_ms / 1000 / measured_s
    held = running + (server.waiting_mean or 0.0)
    freed = held <= client * (1 + MARGIN[0]) + MARGIN[1]
    words = (f"the server held {held:.1f} requests on average (running + waiting) against the {client:.1f} this "
             "test had in flight: " + ("it freed the slots of the users who hung up" if freed else
                                       "it kept working after users hung up (or another client shares it)"))
    return CancelSlots(client_in_flight_mean=round(client, 3), server_in_system_mean=round(held, 3), freed=freed,
                       words=words)
