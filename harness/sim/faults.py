"""Fault injection for the simulator: which request fails, and how. Pure: the caller owns the RNG.

Kinds (flag ``--fault KIND=P``, or per request with the header ``X-Kneecap-Fault: KIND``):

| kind        | what the client sees                                                            |
|-------------|---------------------------------------------------------------------------------|
| `429`       | HTTP 429 with `Retry-After` before any token                                     |
| `500`/`503` | HTTP 500 / 503 in the route's error shape (OpenAI's; Anthropic's on /v1/messages) |
| `reset`     | TCP reset (RST) halfway through the stream                                       |
| `stall`     | no bytes for `stall_s` seconds halfway through the stream, then it continues     |
| `malformed` | one `data:` line that is not JSON halfway through, then the stream continues     |
| `no_done`   | the connection closes cleanly halfway through: no finish_reason, no `[DONE]`     |
| `long_line` | one `data:` chunk of `long_line_bytes` bytes halfway through (valid JSON)        |
| `stream_error` | the framing's own error event halfway through, then a clean end (below)         |

`stream_error` sends, for chat/completions, vLLM's ``data: {"error": {...}}`` then ``[DONE]``; for
Responses an ``error`` event then ``response.failed``; for Anthropic ``event: error``
(``overloaded_error``).

Mid-stream kinds apply to every streaming framing (chat, completions, Responses, Anthropic Messages),
each in its own bytes: `malformed` is a cut-off ``data:`` line of that framing's delta event,
`no_done` ends without the final event (``[DONE]``, ``response.completed``/``incomplete``,
``message_delta`` + ``message_stop``). Non-streaming requests and embeddings get only the HTTP kinds.

At most one fault per request; kinds are drawn in the table's order, each with its own probability.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

__all__ = ["FAULT_KINDS", "FaultConfig", "parse_fault_spec"]

FAULT_KINDS = ("429", "500", "503", "reset", "stall", "malformed", "no_done", "long_line", "stream_error")
HTTP_FAULTS = {"429": 429, "500": 500, "503": 503}


@dataclass(frozen=True)
class FaultConfig:
    """Which faults to inject and their sizes. Each field but ``probabilities`` (``--fault KIND=P``) is a
    ``kneecap sim`` flag of the same name (dashes for underscores), documented in its ``help`` metadata."""

    probabilities: dict[str, float] = field(default_factory=dict)
    stall_s: float = field(default=5.0, metadata={"help": "Length of an injected stall."})
    long_line_bytes: int = field(default=1 << 20, metadata={"help": "Size of an injected long line."})
    retry_after_s: int = field(default=1, metadata={"help": "Retry-After of 429 answers."})

    def pick(self, rng: random.Random, header: str | None = None) -> str | None:
        """The fault for one request: the header's kind when given, else a draw (None = healthy)."""
        if header:
            kind = header.strip().lower()
            if kind not in FAULT_KINDS:
                raise ValueError(f"unknown fault {header!r} in X-Kneecap-Fault; choose one of {', '.join(FAULT_KINDS)}")
            return kind
        for kind in FAULT_KINDS:
            p = self.probabilities.get(kind, 0.0)
            if p and rng.random() < p:
                return kind
        return None


def parse_fault_spec(specs: list[str]) -> dict[str, float]:
    """``["reset=0.01", "429=0.05"]`` → ``{"reset": 0.01, "429": 0.05}``; ValueError names the bad item."""
    out: dict[str, float] = {}
    for spec in specs:
        kind, sep, value = spec.partition("=")
        kind = kind.strip().lower()
        if not sep or kind not in FAULT_KINDS:
            raise ValueError(f"bad --fault {spec!r}: expected KIND=PROBABILITY, KIND one of {', '.join(FAULT_KINDS)}")
        try:
            p = float(value)
        except ValueError:
            raise ValueError(f"bad --fault {spec!r}: probability {value!r} is not a number") from None
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"bad --fault {spec!r}: probability must be within [0, 1]")
        out[kind] = p
    return out
