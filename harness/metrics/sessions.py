"""Session metrics: per turn-index bucket and per whole session, mergeable like the rest of a ``Bucket``. Pure.

Per call (every request of a session), by its turn bucket ("1", "2-4", ...): calls, successes, and the
prefix cache as the client sees it (prompt and cached tokens of the calls whose usage says). TTFT by turn
bucket is a sketch of the bucket (``ttft@turn:2-4``). Per session, when it ends: duration (think time
included), model time (the time it waited on the endpoint: the sum over turns of the slowest call's E2E),
its TTFT p99, the tokens in its final context — sketches ``session_*`` — and counts.

Agent stall (computed in ``analysis.sessions``) needs the decode time and decode tokens of session calls,
kept here as sums.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["SessionRecord", "SessionStats", "nearest_rank", "turn_sketch"]



def turn_sketch(label: str) -> str:
    """The bucket sketch of TTFT for one turn bucket."""
    return f"ttft@turn:{label}"


def nearest_rank(values: list[float], q: float) -> float:
    """The nearest-rank q-quantile (of a session's few TTFTs: its p99 is the max below 100 turns)."""
    s = sorted(values)
    return s[max(0, math.ceil(q * len(s)) - 1)]


@dataclass(slots=True)
class SessionRecord:
    """One session, recorded when it ends (completed, failed, or cut short by the context window)."""

    duration_s: float
    model_time_s: float
    turns: int
    calls: int
    ttft_p99_s: float | None
    context_tokens: int
    failed: bool = False
    ended_full: bool = False
    compactions: int = 0

    @property
    def ttft_p99_ok_s(self) -> float | None:
        """Its TTFT p99, None when the session failed (a miss, counted apart)."""
        return None if self.failed else self.ttft_p99_s


# Wire order of a turn bucket's counters.
_TURN = ("calls", "ok", "cache_n", "prompt", "cached")


@dataclass
class SessionStats:
    turns: dict[str, list[int]] = field(default_factory=dict)
    """Turn bucket label -> [calls, ok, cache_n, prompt tokens of cache_n calls, cached tokens of them]."""
    decode_s: float = 0.0
    """Sum of E2E − TTFT over successful session calls with more than one output token."""
    decode_tokens: int = 0
    """Sum of output tokens − 1 over those calls."""
    ended: int = 0
    failed: int = 0
    ended_full: int = 0
    turn_sum: int = 0
    call_sum: int = 0
    compactions: int = 0

    def add_call(self, label: str, ok: bool, prompt: int | None, cached: int | None, ttft: float | None,
                 e2e: float | None, output_tokens: int | None) -> None:
        t = self.turns.get(label)
        if t is None:
            t = self.turns[label] = [0, 0, 0, 0, 0]
        t[0] += 1
        if not ok:
            return
        t[1] += 1
        if cached is not None and prompt:
            t[2] += 1
            t[3] += prompt
            t[4] += cached
        if ttft is not None and e2e is not None and output_tokens and output_tokens > 1:
            self.decode_s += e2e - ttft
            self.decode_tokens += output_tokens - 1

    def add_session(self, s: SessionRecord) -> None:
        self.ended += 1
        self.failed += s.failed
        self.ended_full += s.ended_full
        self.turn_sum += s.turns
        self.call_sum += s.calls
        self.compactions += s.compactions

    def merge(self, other: SessionStats) -> None:
        for label, v in other.turns.items():
            mine = self.turns.get(label)
            if mine is None:
                self.turns[label] = list(v)
            else:
                for i, x in enumerate(v):
                    mine[i] += x
        self.decode_s += other.decode_s
        self.decode_tokens += other.decode_tokens
        self.ended += other.ended
        self.failed += other.failed
        self.ended_full += other.ended_full
        self.turn_sum += other.turn_sum
        self.call_sum += other.call_sum
        self.compactions += other.compactions

    def to_wire(self) -> dict:
        return {"turns": {k: list(v) for k, v in self.turns.items()}, "dec": [self.decode_s, self.decode_tokens],
                "end": [self.ended, self.failed, self.ended_full, self.turn_sum, self.call_sum, self.compactions]}

    @classmethod
    def from_wire(cls, d: dict) -> SessionStats:
        turns = {str(k): [int(x) for x in v] for k, v in d["turns"].items()}
        if any(len(v) != len(_TURN) for v in turns.values()):
            raise ValueError(f"a turn bucket has {len(_TURN)} counters")
        ended, failed, full, turn_sum, call_sum, comp = (int(x) for x in d["end"])
        return cls(turns, float(d["dec"][0]), int(d["dec"][1]), ended, failed, full, turn_sum, call_sum, comp)
