"""Session logs: conversations and agent runs, one request per line, replayed turn by turn. Pure.

A session log is JSON lines (``.jsonl``/``.ndjson``/``.json``, or any file whose first character is ``{``) or
CSV with a header. Column names are matched case-insensitively; the first alias present wins::

    {"session_id": "a1", "turn": 1, "input_tokens": 2100, "output_tokens": 180, "delay": 0}
    {"session_id": "a1", "turn": 2, "input_tokens": 2700, "output_tokens": 95, "delay": 1.8}

- **session**: ``session_id``, ``conversation_id`` or ``session`` (required; any text).
- **input / output tokens**: the names of ``traces.INPUT_NAMES`` / ``traces.OUTPUT_NAMES`` (``prompt_tokens``,
  ``input_tokens``, ... / ``completion_tokens``, ``output_tokens``, ...), or the columns the caller names.
- **order**: ``turn`` (or ``turn_index``) if present (any integers, sorted; a repeat is an error); else the
  request's start time if the log has one; else file order. Lines of different sessions may interleave.
- **think time** (the gap before turn k, k >= 2; turn 1 has none), first of:

  1. ``delay``, ``delay_s``, ``think_time_s`` or ``think_s``: seconds before this turn, as logged.
  2. ``timestamp``, ``start_time``, ``started_at`` or ``created``: the request's start, in seconds (a number;
     one above 1e11 is epoch milliseconds) or ISO 8601 text (``2024-05-01T10:00:03.25Z``, any number of
     fractional digits, an offset or none = UTC). With a duration column (``e2e_s``, ``latency_s``,
     ``duration_s``, or ``e2e_ms``, ``latency_ms``, ``duration_ms``) think time = start_k − (start_{k−1} +
     duration_{k−1}), clipped at 0 (overlapping calls; counted in ``notes``). Without one it is the start
     gap start_k − start_{k−1}: an **over-estimate** by the previous call's whole latency, which is load on
     the endpoint, not time the user spent (noted).
  3. neither: think time 0 (noted).

**Input mode.** ``whole`` (the default of OpenAI-style usage): a turn's input is the request's whole prompt;
its new tokens are what it adds beyond the previous prompt and answer, ``input_k − input_{k−1} −
output_{k−1}`` (at least 1: a prompt that grew by less than the answer left part of it out, e.g. reasoning
tokens; counted in ``notes``). ``new``: the log records only each turn's new tokens (turn 1: the whole
prompt), taken as they are. ``auto`` (default) decides from the data: whole prompts grow — in a whole-prompt
log ``input_k > input_{k−1}`` for all turns but compactions, while a log of independent new-token counts
grows about half the time — so the log is ``whole`` when at least 75% of consecutive turns grow (midway),
else ``new``; with no session of two turns the mode does not matter. Fewer than 20 turn pairs cannot tell
the two apart reliably (noted): give ``input_mode`` for short or unusual logs.

**Compaction.** In a whole-prompt log a turn whose prompt is *smaller* than the previous one
(``input_k < input_{k−1}``) is a compaction: the agent replaced its transcript with a summary. It becomes a
``ScriptedTurn`` with ``reset_tokens`` > 0: before the turn the history is replaced by a fresh prompt of
``reset_tokens`` tokens, then the turn's ``input_tokens`` new tokens are added, so the two add up to the
logged whole prompt. The log cannot tell summary from new message; the message gets the log's median new
tokens per turn, at most half of the prompt. A new-token log cannot show compaction.

Token counts are rounded to integers; a count of 0 becomes 1 (an empty answer still costs a turn; counted).
Every problem is a ``TraceError`` naming ``file:line``, the column, the value and what to give instead.
"""

from __future__ import annotations

import itertools
import re
import statistics
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone

from harness.workload.traces import (
    INPUT_NAMES,
    MAX_TOKENS,
    OUTPUT_NAMES,
    TraceError,
    _header,
    _is_jsonl,
    _rows,
    _text,
)

__all__ = ["INPUT_MODES", "SESSION_NAMES", "ScriptedTurn", "SessionLog", "load_session_log", "read_session_log",
           "session_column"]

SESSION_NAMES = ("session_id", "conversation_id", "session")
_TURN = ("turn", "turn_index")
_DELAY = ("delay", "delay_s", "think_time_s", "think_s")
_START = ("timestamp", "start_time", "started_at", "created")
_DURATION = {"e2e_s": 1.0, "latency_s": 1.0, "duration_s": 1.0, "e2e_ms": 1e-3, "latency_ms": 1e-3,
             "duration_ms": 1e-3}
INPUT_MODES = ("auto", "whole", "new")
_GROW_SHARE = 0.75
"""``auto``: a log is whole-prompt when at least this share of consecutive turns grows the prompt."""
_EPOCH_MS = 1e11
"""A numeric timestamp above this is epoch milliseconds (as seconds it would be after the year 5000)."""


@dataclass(frozen=True)
class ScriptedTurn:
    """One turn of a logged session: new input tokens (the whole first prompt for turn 1), output tokens, and
    the gap before it (0 for turn 1)."""

    input_tokens: int
    output_tokens: int
    think_s: float = 0.0
    reset_tokens: int = 0
    """> 0: the agent compacted before this turn; its history becomes a fresh prompt of this many tokens
    (a cache miss), and ``input_tokens`` are added after it. 0: the history grows as usual."""
    text: str | None = None
    """The turn's new message as the log gives it (a ShareGPT user message: ``session_sharegpt.py``), sent as it
    is; None: corpus text of ``input_tokens`` tokens."""


@dataclass(frozen=True)
class SessionLog:
    """A session log as read: the scripts to replay and what reading them decided."""

    scripts: tuple[tuple[ScriptedTurn, ...], ...]
    ids: tuple[str, ...]
    """Session ids, in the order of ``scripts`` (first appearance in the file)."""
    input_mode: str
    """``whole`` or ``new``: how the input column was read."""
    mode_detected: bool
    """The input mode was decided from the data (``auto``), not given."""
    grow_share: float | None
    """Share of consecutive turns whose logged input grew (None: no session has two turns)."""
    columns: dict[str, str]
    """Role (``session``, ``turn``, ``input``, ``output``, ``delay``, ``start``, ``duration``) -> column used."""
    max_context_tokens: int
    """The largest context seen: a turn's whole prompt plus its answer."""
    compactions: int = 0
    notes: tuple[str, ...] = field(default_factory=tuple)
    """What was approximated or assumed, one sentence each (never silent)."""


@dataclass
class _Row:
    line: int
    turn: int | None
    n_in: int
    n_out: int
    delay: float | None
    start: float | None
    duration: float | None


def session_column(header: Sequence[str]) -> str | None:
    """The session-id column among ``header`` (case-insensitive), or None: not a session log."""
    return _pick(header, SESSION_NAMES)


def _pick(header: Sequence[str], names: Iterable[str]) -> str | None:
    lower = {h.lower(): h for h in header}
    return next((lower[n.lower()] for n in names if n.lower() in lower), None)


def _is_json(path: str, text: str) -> bool:
    return _is_jsonl(path) or text.lstrip().startswith("{")


def _records(path: str, text: str) -> Iterator[tuple[int, dict]]:
    """``traces._rows``, but JSON lines are recognised by content too (a ``.log`` of JSON objects)."""
    return _rows(path, text, json_lines=_is_json(path, text))


def _blank(value: object) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _number(value: object, where: str, col: str, expected: str, maximum: float = float("inf")) -> float:
    try:
        if isinstance(value, bool):
            raise TypeError
        x = float(value)  # type: ignore[arg-type]  # a non-number raises TypeError, caught below
    except (TypeError, ValueError, OverflowError):  # OverflowError: a JSON integer of 400 digits
        raise TraceError(f"{where}: column {col!r} is {value!r}, expected {expected}") from None
    if x != x or x in (float("inf"), float("-inf")) or x < 0:
        raise TraceError(f"{where}: column {col!r} is {value!r}, expected {expected} (>= 0)")
    if x > maximum:
        raise TraceError(f"{where}: column {col!r} is {value!r}, expected {expected} (<= {maximum:.0e})")
    return x


def _start_seconds(value: object, where: str, col: str) -> float:
    """A start time in seconds: a number (epoch ms above 1e11), or ISO 8601 with any fraction and offset."""
    try:
        x = float(value)  # type: ignore[arg-type]  # a non-number raises TypeError, caught below
    except (TypeError, ValueError):
        x = None  # ISO text
    if x is not None and not isinstance(value, bool):
        if x != x or x in (float("inf"), float("-inf")):
            raise TraceError(f"{where}: column {col!r} is {value!r}, expected the request's start time in seconds")
        return x / 1000 if x > _EPOCH_MS else x
    bad = TraceError(f"{where}: column {col!r} is {value!r}, expected the request's start time: seconds "
                     "(e.g. 1714557603.25) or ISO 8601 (e.g. 2024-05-01T10:00:03.25Z)")
    m = re.fullmatch(r"\s*(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2})?)(?:[.,](\d+))?\s*(Z|[+-]\d{2}:?\d{2})?\s*",
                     str(value), flags=re.IGNORECASE)
    if not m:
        raise bad
    head, frac, tz = m.groups()
    try:
        stamp = datetime.fromisoformat(head.replace(" ", "T"))
    except ValueError:  # 2024-13-45
        raise bad from None
    if tz and tz.upper() != "Z":
        sign = 1 if tz[0] == "+" else -1
        digits = tz[1:].replace(":", "")
        offset = sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
    else:
        offset = 0
    seconds = stamp.replace(tzinfo=timezone.utc).timestamp() - offset
    return seconds + (float(f"0.{frac}") if frac else 0.0)  # int(frac) refuses 4,300 digits and more


def _columns(path: str, header: list[str], input_col: str | None, output_col: str | None) -> dict[str, str]:
    cols = {"session": session_column(header), "turn": _pick(header, _TURN),
            "input": input_col or _pick(header, INPUT_NAMES), "output": output_col or _pick(header, OUTPUT_NAMES),
            "delay": _pick(header, _DELAY), "start": _pick(header, _START), "duration": _pick(header, _DURATION)}
    have = ", ".join(header) or "(none)"
    wants = {"session": (f"session id column ({', '.join(SESSION_NAMES)})",
                         "Rename the column that groups requests into sessions"),
             "input": (f"input-token column ({', '.join(INPUT_NAMES[:4])}, ...)",
                       "Rename it, or name it (kneecap fit --input COLUMN)"),
             "output": (f"output-token column ({', '.join(OUTPUT_NAMES[:4])}, ...)",
                        "Rename it, or name it (kneecap fit --output COLUMN)")}
    for role, (want, fix) in wants.items():
        if cols[role] is None:
            raise TraceError(f"{path}: no {want}; columns are {have}. {fix}")
    for role, name in (("input", input_col), ("output", output_col)):
        if name is not None and name not in header:
            raise TraceError(f"{path}: no column {name!r} for the {role} tokens; columns are {have}")
    return {k: v for k, v in cols.items() if v is not None}


def _value(row: dict, cols: dict[str, str], role: str, where: str, *, required: bool = False) -> object:
    """The row's value for ``role`` (None if the log has no such column or the cell is blank)."""
    col = cols.get(role)
    value = None if col is None else row.get(col)
    if _blank(value):
        if required:
            raise TraceError(f"{where}: no {col!r} on this line; every line of the log needs one")
        return None
    return value


def _parse(path: str, text: str, cols: dict[str, str]) -> dict[str, list[_Row]]:
    sessions: dict[str, list[_Row]] = {}
    for n, row in _records(path, text):
        where = f"{path}:{n}"
        sid = str(_value(row, cols, "session", where, required=True)).strip()
        turn = None
        if "turn" in cols:
            x = _number(_value(row, cols, "turn", where, required=True), where, cols["turn"], "a turn number")
            if x != int(x):
                raise TraceError(f"{where}: column {cols['turn']!r} is {x:g}, expected a whole turn number")
            turn = int(x)
        n_in = _number(_value(row, cols, "input", where, required=True), where, cols["input"], "a token count",
                       MAX_TOKENS)
        n_out = _number(_value(row, cols, "output", where, required=True), where, cols["output"], "a token count",
                        MAX_TOKENS)
        delay, start, dur = (_value(row, cols, role, where) for role in ("delay", "start", "duration"))
        sessions.setdefault(sid, []).append(_Row(
            n, turn, round(n_in), round(n_out),
            None if delay is None else _number(delay, where, cols["delay"], "seconds before this turn"),
            None if start is None else _start_seconds(start, where, cols["start"]),
            None if dur is None else _number(dur, where, cols["duration"], "the request's duration in "
                                             f"{'ms' if cols['duration'].lower().endswith('_ms') else 's'}")
            * _DURATION[cols["duration"].lower()]))
    return sessions


def _order(path: str, sid: str, rows: list[_Row], cols: dict[str, str]) -> list[_Row]:
    if "turn" in cols:
        rows = sorted(rows, key=lambda r: (r.turn, r.line))
        for a, b in itertools.pairwise(rows):
            if a.turn == b.turn:
                raise TraceError(f"{path}:{b.line}: session {sid!r} has turn {b.turn} twice (also line {a.line}); "
                                 "give each turn of a session its own number")
    elif "start" in cols and all(r.start is not None for r in rows):
        rows = sorted(rows, key=lambda r: (r.start, r.line))
    return rows


def _think(path: str, sid: str, prev: _Row, row: _Row, cols: dict[str, str], counts: dict[str, int]) -> float:
    """The gap before ``row`` (turn 2 or later), by the rules of the module docstring."""
    if "delay" in cols:
        if row.delay is None:
            raise TraceError(f"{path}:{row.line}: no {cols['delay']!r} for a later turn of session {sid!r}; give "
                             "the seconds before this turn (0 if none)")
        return row.delay
    if "start" in cols:
        for r in (prev, row):
            if r.start is None:
                raise TraceError(f"{path}:{r.line}: no {cols['start']!r} on this line; every turn needs its "
                                 "start time to give the think time")
        gap = row.start - prev.start  # type: ignore[operator]  # the loop above raised on a None start
        if gap < 0:
            raise TraceError(f"{path}:{row.line}: session {sid!r} turn {row.turn} starts {-gap:g} s before the "
                             f"turn before it (line {prev.line}); fix the turn numbers or the times")
        if "duration" not in cols or prev.duration is None:
            counts["start_gap"] += 1
            return gap
        if gap - prev.duration < 0:
            counts["overlap"] += 1
        return max(0.0, gap - prev.duration)
    counts["no_timing"] += 1
    return 0.0


def _detect(ordered: list[list[_Row]], input_mode: str) -> tuple[str, float | None]:
    pairs = [(a.n_in, b.n_in) for rows in ordered for a, b in itertools.pairwise(rows)]
    share = sum(b > a for a, b in pairs) / len(pairs) if pairs else None
    if input_mode != "auto":
        return input_mode, share
    return ("whole" if share is None or share >= _GROW_SHARE else "new"), share


def _script(path: str, sid: str, rows: list[_Row], cols: dict[str, str], mode: str, typical: int | None,
            counts: dict[str, int]) -> tuple[tuple[ScriptedTurn, ...], int]:
    """One session's turns, and its largest context (whole prompt + answer)."""
    script, context, biggest = [], 0, 0
    for k, row in enumerate(rows):
        prev = rows[k - 1]
        n_out, reset = max(1, row.n_out), 0
        counts["zero"] += row.n_out < 1
        if k == 0 or mode == "new":
            n_in = max(1, row.n_in)
        elif row.n_in < prev.n_in:  # the whole prompt shrank: the agent compacted its history
            whole = max(2, row.n_in)
            n_in = max(1, min(typical or whole, whole // 2))
            reset = whole - n_in
            counts["compactions"] += 1
        else:
            n_in = row.n_in - prev.n_in - prev.n_out
            counts["clamped"] += n_in < 1
            n_in = max(1, n_in)
        context = (context + n_in if k and mode == "new" else row.n_in) + n_out
        biggest = max(biggest, context)
        script.append(ScriptedTurn(n_in, n_out, _think(path, sid, prev, row, cols, counts) if k else 0.0, reset))
    return tuple(script), biggest


def load_session_log(path: str, *, input_mode: str = "auto", input_col: str | None = None,
                     output_col: str | None = None) -> SessionLog:
    """Read ``path`` (rules in the module docstring); ``input_mode`` is ``auto``, ``whole`` or ``new``;
    ``input_col``/``output_col`` name the token columns instead of guessing them."""
    if input_mode not in INPUT_MODES:
        raise ValueError(f"input_mode must be one of {', '.join(INPUT_MODES)}, got {input_mode!r}")
    text = _text(path)
    if not text.strip():
        raise TraceError(f"{path}: the file is empty; expected JSON lines or CSV with a header, one request a line")
    if _is_json(path, text):  # JSON lines may leave keys out (turn 1 without a delay): all keys seen
        header = list(dict.fromkeys(k for _, row in _records(path, text) for k in row))
    else:
        header = _header(path, text)
    cols = _columns(path, header, input_col, output_col)
    parsed = _parse(path, text, cols)
    if not parsed:
        raise TraceError(f"{path}: no requests after the header; expected one line per request")
    ordered = [_order(path, sid, rows, cols) for sid, rows in parsed.items()]
    mode, share = _detect(ordered, input_mode)
    news = [b.n_in - a.n_in - a.n_out for rows in ordered for a, b in itertools.pairwise(rows)
            if b.n_in > a.n_in + a.n_out]
    typical = round(statistics.median(news)) if news and mode == "whole" else None
    counts = dict.fromkeys(("start_gap", "overlap", "no_timing", "clamped", "zero", "compactions"), 0)
    counts["pairs"] = sum(len(rows) - 1 for rows in ordered)
    scripts, biggest = [], 0
    for sid, rows in zip(parsed, ordered, strict=True):
        script, most = _script(path, sid, rows, cols, mode, typical, counts)
        scripts.append(script)
        biggest = max(biggest, most)
    return SessionLog(tuple(scripts), tuple(parsed), mode, input_mode == "auto", share, cols, biggest,
                      counts["compactions"], _notes(counts, mode, share, input_mode))


def _notes(counts: dict[str, int], mode: str, share: float | None, given: str) -> tuple[str, ...]:
    out = []
    if given == "auto" and share is not None:
        out.append(f"input_mode {mode}: detected, as {share:.0%} of {counts['pairs']} consecutive turn pairs grow "
                   f"the prompt (whole prompts grow in >= {_GROW_SHARE:.0%}); "
                   f"{'too few to be sure: ' if counts['pairs'] < 20 else ''}set input_mode if that is wrong")
    if counts["start_gap"]:
        out.append(f"{counts['start_gap']} think times are start-to-start gaps (no duration column): each "
                   "over-estimates the user's time by the previous call's latency")
    if counts["overlap"]:
        out.append(f"{counts['overlap']} turns started before the previous call ended: think time 0")
    if counts["no_timing"]:
        out.append(f"{counts['no_timing']} think times are 0: the log has no delay or timestamp column")
    if counts["clamped"]:
        out.append(f"{counts['clamped']} turns grew the prompt by less than the previous answer (reasoning left "
                   "out of the history?): 1 new token each")
    if counts["zero"]:
        out.append(f"{counts['zero']} turns had 0 output tokens: replayed as 1")
    return tuple(out)


def read_session_log(path: str, *, input_mode: str = "auto") -> list[tuple[ScriptedTurn, ...]]:
    """The sessions of ``path`` as scripts to replay (``load_session_log`` for what reading them decided)."""
    return list(load_session_log(path, input_mode=input_mode).scripts)
