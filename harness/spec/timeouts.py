"""A request's time limits: one type for the scenario (``endpoint.timeouts``) and the transport that enforces them.

Long prompts get longer limits by default: prefill runs before the first token, in silence, and a 1M-token
prompt takes minutes on real hardware. ``for_prompt(tokens)`` adds ``PREFILL_S_PER_KTOKEN`` (0.3 s) per 1000
prompt tokens to each limit in ``scale_with_prompt`` — the ones the scenario left at their default: ttft_s,
idle_s (the silence before the first token is prefill too) and total_s. A limit the scenario sets stays as set.

| prompt tokens | added | ttft_s | idle_s | total_s |
|---------------|-------|--------|--------|---------|
| 1,000         | 0.3 s | 60.3   | 30.3   | 600.3   |
| 8,192         | 2.5 s | 62.5   | 32.5   | 602.5   |
| 131,072       | 39 s  | 99     | 69     | 639     |
| 262,144       | 79 s  | 139    | 109    | 679     |
| 1,048,576     | 315 s | 375    | 345    | 915     |

0.3 s per 1000 tokens is ~3,300 prompt tokens/s: a slow long-context deployment (one GPU, quadratic attention),
so a healthy endpoint's prefill never hits the default limits.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

__all__ = ["PREFILL_S_PER_KTOKEN", "SCALED", "Timeouts"]

PREFILL_S_PER_KTOKEN = 0.3
"""Seconds added to each default limit per 1000 prompt tokens."""
SCALED = frozenset({"ttft_s", "idle_s", "total_s"})
"""The limits that grow with the prompt when left at their default."""


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
    scale_with_prompt: frozenset[str] = field(default=frozenset(), compare=False)
    """The limits ``for_prompt`` lengthens (a subset of ``SCALED``): the scenario's defaults (``defaults()``);
    none for a ``Timeouts`` built with explicit values."""

    @classmethod
    def defaults(cls) -> Timeouts:
        """The scenario's defaults: every limit of ``SCALED`` grows with the prompt."""
        return cls(scale_with_prompt=SCALED)

    def for_prompt(self, prompt_tokens: int) -> Timeouts:
        """The limits for a prompt of ``prompt_tokens``: those of ``scale_with_prompt`` lengthened (see the module)."""
        if not self.scale_with_prompt or prompt_tokens <= 0:
            return self
        more = prompt_tokens / 1000 * PREFILL_S_PER_KTOKEN
        return dataclasses.replace(self, scale_with_prompt=frozenset(),
                                   **{k: getattr(self, k) + more for k in self.scale_with_prompt})
