"""Session logs: conversations and agent runs as JSON lines, replayed turn by turn. Pure.

Layout (one object per request)::

    {"session_id": "a1", "turn": 1, "input_tokens": 2100, "output_tokens": 180, "delay": 0}
    {"session_id": "a1", "turn": 2, "input_tokens": 2700, "output_tokens": 95, "delay": 1.8}

``input_tokens`` is the request's whole prompt as the server's usage reports it; a turn's new tokens are what
it adds beyond the previous prompt and answer. ``delay`` is the gap in seconds before the turn (think or tool
time). Lines of one session may come in any order; ``turn`` orders them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from harness.workload.traces import TraceError, _text

__all__ = ["ScriptedTurn", "read_session_log"]


@dataclass(frozen=True)
class ScriptedTurn:
    """One turn of a logged session: new input tokens (the whole first prompt for turn 1), output tokens, and
    the gap before it (0 for turn 1)."""

    input_tokens: int
    output_tokens: int
    think_s: float = 0.0



def read_session_log(path: str) -> list[tuple[ScriptedTurn, ...]]:
    rows: dict[str, list[tuple[int, int, int, float]]] = {}
    for i, line in enumerate(_text(path).splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            sid, turn = str(obj["session_id"]), int(obj["turn"])
            n_in, n_out, delay = int(obj["input_tokens"]), int(obj["output_tokens"]), float(obj.get("delay", 0))
        except (ValueError, KeyError, TypeError) as exc:
            raise TraceError(f"{path}:{i}: expected session_id, turn, input_tokens, output_tokens (and delay): "
                             f"{exc}") from None
        rows.setdefault(sid, []).append((turn, n_in, n_out, delay))
    if not rows:
        raise TraceError(f"{path}: no sessions")
    out = []
    for turns in rows.values():
        turns.sort()
        script, prev = [], 0
        for k, (_, n_in, n_out, delay) in enumerate(turns):
            script.append(ScriptedTurn(max(1, n_in - prev) if k else max(1, n_in), max(1, n_out),
                                       max(0.0, delay) if k else 0.0))
            prev = n_in + n_out
        out.append(tuple(script))
    return out
