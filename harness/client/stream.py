"""What every API's stream tracker keeps, and how it reports a broken stream. Pure.

A tracker takes one SSE event at a time (``on_event(t, data)``, ``t`` the arrival of the bytes that completed
it) and returns True at the stream's final event (OpenAI ``[DONE]``, Responses ``response.completed``,
Anthropic ``message_stop``). ``harness.client.reader`` owns the HTTP side and turns a tracker into a
``RequestRecord``. One tracker per API: ``openai.StreamTracker`` (chat, completions), ``responses.ResponsesTracker``,
``anthropic.MessagesTracker``. They share these fields, every time relative to ``start``:

- ``chunk_times``: every event that carried output of any kind — answer text, reasoning, tool-call arguments.
  The first is the TTFT.
- ``content_t`` (first answer text: TTFO), ``reasoning_t`` (first reasoning), ``tool_t`` (first tool-call delta);
  ``reasoning_chunks``, ``tool_chunks`` count those events.
- ``chunk_tokens``: the output tokens each of ``chunk_times`` carried, when the server says so exactly (vLLM's
  ``continuous_usage_stats``: cumulative usage on every chunk); else None. ``reasoning_chunk_tokens`` likewise.
- usage: ``completion_tokens``, ``prompt_tokens``, ``cached_tokens`` (+ ``cached_source``), ``reasoning_tokens``.
- ``finish_reason`` and ``finish_t`` (absolute), ``response_id``, ``text`` (the answer's pieces, only with
  ``keep_text``: sessions send it back).
- the server's own timing of the request, in seconds, where it says (llama.cpp's ``timings``): ``server_prefill_s``
  (prompt processing), ``server_decode_s`` (generation).

A stream that breaks the protocol raises ``StreamProtocolError`` with an error class of ``metrics.record``:
``malformed_chunk`` (not JSON), ``bad_response`` (JSON of the wrong shape; the detail names the field),
``stream_error`` (the server's error event).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod

import msgspec

from harness.errors import KneecapError

__all__ = ["FieldError", "OutputTracker", "StreamProtocolError", "count_ok", "decode_json", "field_count", "field_obj",
           "field_str", "json_kind", "server_error", "split_system"]

_raw_decode = json.JSONDecoder().raw_decode
_msgspec_decode = msgspec.json.Decoder().decode
_SHALLOW = 200
"""Nesting below which json.loads never hits the recursion limit (~1000 frames): msgspec's answer stands."""


class StreamProtocolError(KneecapError):
    """The stream broke the protocol; ``kind`` is an error class of ``metrics.record``."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


def decode_json(data: str) -> object:
    """One event's JSON, exactly as ``json.loads`` reads it (``malformed_chunk`` where it fails).

    msgspec first (0.56 µs against 1.45 µs for a chat chunk, ``benchmarks/parsers.py``); wherever it refuses a
    text (NaN, Infinity, a lone surrogate escape, a float out of range, a BOM, garbage) json decides, errors and
    all. Where it accepts one it builds the same objects (big ints stay ints, the last repeated key wins), save
    nesting: its limit is a fixed 1000 levels, json's the interpreter's stack, so only a text that cannot nest
    ``_SHALLOW`` deep is left to it (a parsed text of n characters nests at most n/2 levels)."""
    if len(data) < 2 * _SHALLOW or data.count("{") + data.count("[") < _SHALLOW:
        try:
            return _msgspec_decode(data)
        except (msgspec.DecodeError, ValueError, RecursionError):  # ValueError: a lone surrogate in the str
            pass
    try:  # json.loads less its two whitespace scans when the data is exactly one value
        obj, end = _raw_decode(data)
    except (ValueError, RecursionError):
        end = -1
    if end != len(data):  # not exactly one JSON value (whitespace around it, garbage): json.loads decides
        try:
            obj = json.loads(data)
        except (ValueError, RecursionError):  # RecursionError: nested deeper than the interpreter's stack
            raise StreamProtocolError("malformed_chunk", f"chunk is not JSON: {data[:120]!r}") from None
    return obj


def split_system(messages: list[dict]) -> tuple[str | None, list[dict]]:
    """Chat messages as the Responses and Anthropic APIs take them: system text apart (joined), the rest as
    ``{role, content}``."""
    system = [m["content"] for m in messages if m.get("role") == "system"]
    rest = [{"role": m["role"], "content": m["content"]} for m in messages if m.get("role") != "system"]
    return ("\n\n".join(system) if system else None), rest


MAX_COUNT = 10**18 - 1
"""The largest token count read (18 digits, as the fast path's template takes them): past it a count is a broken
server's, and a 400-digit one made every rate of its record (tokens/s, TPOT) raise OverflowError."""


def count_ok(v: object) -> bool:
    """A token count as usage carries it: absent (None) or an integer 0..``MAX_COUNT`` (a bool is not a count)."""
    return v is None or (v.__class__ is int and 0 <= v <= MAX_COUNT)


def json_kind(v: object) -> str:
    """A JSON value in words, for error details: "an object", "'fifty'", "null"."""
    if isinstance(v, dict):
        return "an object"
    if isinstance(v, list):
        return "an array"
    if isinstance(v, str):
        return repr(v[:40])
    return json.dumps(v)  # null, true, 7, 2.5


class OutputTracker(ABC):
    """The fields every tracker fills (see the module docstring); subclasses implement ``on_event``."""

    __slots__ = ("_cum", "cached_source", "cached_tokens", "chunk_times", "chunk_tokens", "completion_tokens",
                 "content_t", "finish_reason", "finish_t", "prompt_tokens", "reasoning_chunk_tokens",
                 "reasoning_chunks", "reasoning_t", "reasoning_tokens", "response_id", "server_decode_s",
                 "server_prefill_s", "start", "text", "tool_chunks", "tool_t")

    def __init__(self, start: float, *, keep_text: bool = False) -> None:
        self.start = start
        self.chunk_times: list[float] = []
        self.chunk_tokens: list[int] | None = None
        self.content_t: float | None = None
        self.reasoning_t: float | None = None
        self.tool_t: float | None = None
        self.reasoning_chunks = 0
        self.reasoning_chunk_tokens = 0
        self.tool_chunks = 0
        self.text: list[str] | None = [] if keep_text else None
        self.completion_tokens: int | None = None
        self.prompt_tokens: int | None = None
        self.cached_tokens: int | None = None
        self.cached_source: str | None = None
        self.reasoning_tokens: int | None = None
        self.finish_reason: str | None = None
        self.finish_t: float | None = None
        self.response_id: str | None = None
        self.server_prefill_s: float | None = None
        self.server_decode_s: float | None = None
        self._cum: int | None = None  # cumulative completion tokens of the last chunk that carried usage

    @abstractmethod
    def on_event(self, t: float, data: str) -> bool:
        """One SSE event's data at ``t``; True at the stream's final event."""

    def take_events(self, chunk: bytes, t: float) -> int:
        """A tracker's fast path, before any SSE decoding: the whole events at the start of ``chunk`` (raw body bytes
        arrived at ``t``, beginning at an event boundary) it took exactly as ``on_event`` would have, as the byte
        offset where they end. Here none: every event goes through ``on_event``."""
        return 0

    # -- for subclasses: one output event of a kind ("content" | "reasoning" | "tool") at t --------------------
    def output(self, t: float, kind: str, piece: object = None, cumulative: int | None = None) -> None:
        rel = t - self.start
        self.chunk_times.append(rel)
        if kind == "content":
            if self.content_t is None:
                self.content_t = rel
            text = self.text
            if text is not None and piece.__class__ is str:
                text.append(piece)
        elif kind == "reasoning":
            self.reasoning_chunks += 1
            if self.reasoning_t is None:
                self.reasoning_t = rel
        else:
            self.tool_chunks += 1
            if self.tool_t is None:
                self.tool_t = rel
        if cumulative is not None:
            self.exact_tokens(cumulative, kind)
        elif self.chunk_tokens is not None:  # a chunk without its count: the counts no longer line up
            self.chunk_tokens = None

    def exact_tokens(self, cumulative: int, kind: str) -> None:
        """The output chunk just recorded brought the cumulative completion count to ``cumulative``."""
        tokens = self.chunk_tokens
        if tokens is None:
            if len(self.chunk_times) != 1:  # exact counts began mid-stream: they cannot be aligned
                return
            tokens = self.chunk_tokens = []
        n = cumulative - (self._cum or 0)
        tokens.append(n)
        self._cum = cumulative
        if kind == "reasoning":
            self.reasoning_chunk_tokens += n

    def usage_seen(self, cumulative: int) -> None:
        """A chunk without output carried cumulative usage. Before any output (a role chunk) later chunks count from
        here; after it (vLLM's empty chunk for a token whose text is not yet whole) its tokens go to the next output
        chunk, whose gap spans them."""
        if not self.chunk_times:
            self._cum = cumulative


# -- field checks for the API trackers: a wrong type raises FieldError, which the caller words with its event ----

class FieldError(Exception):
    """A field of the wrong type: its path, the value that came, what was expected."""

    def __init__(self, path: str, value: object, expected: str) -> None:
        super().__init__(path)
        self.path, self.value, self.expected = path, value, expected

    def words(self, where: str) -> str:
        got = "absent or null" if self.value is None else json_kind(self.value)
        return f"{where}'s {self.path} is {got}, expected {self.expected}"


def field_obj(v: object, path: str) -> dict:
    if v.__class__ is not dict:
        raise FieldError(path, v, "an object")
    return v


def field_str(v: object, path: str) -> str | None:
    if v is not None and v.__class__ is not str:
        raise FieldError(path, v, "a string")
    return v


def field_count(v: object, path: str) -> int | None:
    if not count_ok(v):
        raise FieldError(path, v, "an integer >= 0")
    return v  # type: ignore[return-value]  # count_ok passed: an int or None


def server_error(where: str, err: object, code_key: str) -> StreamProtocolError:
    """The server's own error (``{code_key, message}``, or anything else, quoted): ``stream_error``."""
    if err.__class__ is dict:
        msg, code = err.get("message"), err.get(code_key)
        text = f"{code}: {msg}" if code else str(msg if msg is not None else json.dumps(err))
    else:
        text = "no error details" if err is None else str(err)
    return StreamProtocolError("stream_error", f"server error {where}: {text[:200]}")
