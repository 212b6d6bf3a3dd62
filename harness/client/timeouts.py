"""A request's time limits: one type for the scenario (``endpoint.timeouts``) and the transport that enforces them."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Timeouts"]


@dataclass(frozen=True)
class Timeouts:
    connect_s: float = 10.0
    """Connecting (TCP, TLS)."""
    ttft_s: float = 60.0
    """From start to the first content chunk."""
    idle_s: float = 30.0
    """Longest silence once bytes flow."""
    total_s: float = 600.0
    """The whole request."""
