"""Byte templates of plain chat/completions content chunks: the per-token fast path of ``openai.StreamTracker``.

A server streams its answer as chunks that differ only in their text, ``{"id":"chatcmpl-1","object":
"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" word"},"logprobs":null,
"finish_reason":null}]}``. From one such chunk, already read in full, ``learn`` builds a regex over the event's exact
bytes in which only a few values may vary: the content's characters, and the ``id``, ``created`` and
``obfuscation`` (OpenAI's per-chunk padding) values, which the tracker does not read once it has an id. A match is
then taken without any decoding, at ~0.45 µs an event against ~3.5 µs for SSE split, str decode, JSON and
``_take`` (``benchmarks/parsers.py``).

Why a match is read exactly as the full parse would read it:

1. The learned text has no control character, so no frozen byte is a line end: a match is one ``data:`` line and
   the blank line after it, one event whose data is the matched payload (``sse.data_event_pattern``).
2. A hole admits only: for the content, a non-empty JSON string body of well-formed UTF-8 without raw quote or
   control character, its escapes well-formed (``\n``, ``\"``, ``\u00e9``; any of them decodes to at least one
   character, so the content is never empty, and its text is not kept in this state); for ``id`` and
   ``obfuscation``, a body of printable ASCII without quote or backslash; for ``created``, an integer of at most 18
   digits. So each matched text is valid JSON of the learned structure (same keys, same order) with only those
   values changed; none can parse differently by replaced bytes or number limits.
3. The learned chunk is one the tracker reads as a plain content chunk: an object with no repeated key (json keeps
   the last one: not worth reasoning about), no ``error``, ``choices`` exactly one object without a repeated key,
   its ``finish_reason`` absent or null, and either a ``delta`` object whose ``content`` is a non-empty string and
   whose other fields are null (``role`` aside) or, with no delta, a non-empty ``text`` (completions). Once the
   tracker has ``content_t`` and a ``response_id`` and keeps no text (``take_events`` checks), such a chunk only
   adds its arrival to ``chunk_times``.
4. ``usage`` absent or null, or (continuous usage, vLLM's ``continuous_usage_stats``) an object without a repeated
   key whose ``completion_tokens`` is an integer >= 0: then that count is a hole of its own (group ``COMPLETION``)
   and so is ``total_tokens`` (not read); the rest of the usage is frozen, so it reads as it did in the learned
   chunk. Such a chunk also adds its tokens (the count's step) to ``chunk_tokens`` and sets the usage fields, which
   the tracker does from the group and the values it read in the learned chunk — only while it counts tokens per
   chunk; a template without usage only while it does not.

Anything else — a finish reason, other usage, reasoning or tool-call fields, several choices, invalid UTF-8, a number in
a string's place — fails to match and takes the full parse. ``tests/client/test_fast_path.py`` checks the two ways
give the same record on the parser corpus and on randomized chunks.
"""

from __future__ import annotations

import functools
import json.decoder
import re
from collections.abc import Callable

from harness.client.sse import data_event_pattern

__all__ = ["COMPLETION", "Matcher", "learn"]

COMPLETION = "completion"
"""The group of a usage template's cumulative ``usage.completion_tokens`` (``match.group(COMPLETION)``)."""

Matcher = Callable[..., "re.Match[bytes] | None"]
"""A compiled template's ``match(chunk, pos=0)``: one whole event at ``pos`` or None."""

_scanstring = json.decoder.scanstring  # type: ignore[attr-defined]  # CPython has it; typeshed leaves it out
_raw_decode = json.JSONDecoder().raw_decode
_CONTROL = re.compile(r"[\x00-\x1f]")

# One character of a JSON string body: printable ASCII less '"' and '\' (DEL is allowed raw in JSON), one
# well-formed UTF-8 sequence (no overlong forms, no surrogates, nothing past U+10FFFF), or one escape.
_ASCII = rb'[\x20\x21\x23-\x5b\x5d-\x7f]'
_MULTI = (rb'(?:[\xc2-\xdf][\x80-\xbf]|\xe0[\xa0-\xbf][\x80-\xbf]|[\xe1-\xec\xee\xef][\x80-\xbf]{2}'
          rb'|\xed[\x80-\x9f][\x80-\xbf]|\xf0[\x90-\xbf][\x80-\xbf]{2}|[\xf1-\xf3][\x80-\xbf]{3}|\xf4[\x80-\x8f][\x80-\xbf]{2})')
_ESCAPE = rb'\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})'
# Runs of ASCII between multi-byte characters and escapes: each byte has one way to match, so a failing match
# backtracks linearly. The lookahead makes it non-empty (an empty content is not a content chunk).
_CONTENT = rb'(?!")' + _ASCII + rb'*(?:(?:' + _MULTI + rb'|' + _ESCAPE + rb')' + _ASCII + rb'*)*'
_PRINTABLE = rb'[\x20\x21\x23-\x5b\x5d-\x7e]*'
_INT = rb'(?:0|[1-9][0-9]{0,17})'
_recent: list[Matcher] = []
"""The templates learned last, newest first (a few servers and models per process)."""
_TOP_HOLES = {"id": str, "created": int, "obfuscation": str}
"""Top-level values the tracker does not read once it has a response id, and vary from chunk to chunk or request
to request (so one compiled template serves every stream of a server)."""


def learn(data: str) -> Matcher | None:
    """The template of the plain content chunk ``data`` (one SSE event's data, already taken by the full parse),
    or None when it is not one (see the module docstring, 3) or not a layout this module reads."""
    if _CONTROL.search(data):
        return None
    # Any template is sound wherever it matches (the proof above does not depend on the stream that taught it):
    # a new stream of a known server finds its own in ~1 µs instead of a ~25 µs walk.
    try:
        event = b"data: " + data.encode() + b"\n\n"
    except UnicodeEncodeError:  # a lone surrogate: not from the wire's bytes
        return None
    for match in _recent:
        if (m := match(event)) is not None and m.end() == len(event):
            return match
    try:
        holes = _holes(data)
    except (ValueError, RecursionError):  # not a layout we read: a repeated key, a stray character, deep nesting
        return None
    if holes is None:
        return None
    parts, pos = [], 0
    for start, end, rx in sorted(holes):
        parts += [re.escape(data[pos:start].encode()), rx]
        pos = end
    parts.append(re.escape(data[pos:].encode()))
    match = _compiled(data_event_pattern(b"".join(parts)))
    if match not in _recent:
        _recent.insert(0, match)
        del _recent[8:]
    return match


@functools.lru_cache(maxsize=64)
def _compiled(pattern: bytes) -> Matcher:
    # A compile costs ~280 µs; the holes make the pattern the same for every request of a server and model.
    return re.compile(pattern).match


def _holes(s: str) -> list[tuple[int, int, bytes]] | None:
    """The spans of ``s`` that may vary, with the pattern of each; None if ``s`` is not a plain content chunk."""
    top, end = _object(s, 0)
    if end != len(s) or "error" in top:
        return None
    holes = []
    a, b, usage = top.get("usage", (0, 0, None))
    if usage is not None:  # cumulative usage on every chunk (continuous_usage_stats): its counts are holes
        if usage.__class__ is not dict:
            return None
        fields, u_end = _object(s, a)
        done = fields.get("completion_tokens", (0, 0, None))
        if u_end != b or done[2].__class__ is not int or done[2] < 0:
            return None
        holes.append((done[0], done[1], b"(?P<" + COMPLETION.encode() + b">" + _INT + b")"))
        total = fields.get("total_tokens", (0, 0, None))
        if total[2].__class__ is int and total[2] >= 0:
            holes.append((total[0], total[1], _INT))  # not read by the tracker
    for key, kind in _TOP_HOLES.items():
        a, b, v = top.get(key, (0, 0, None))
        if v.__class__ is str and kind is str:
            holes.append((a + 1, b - 1, _PRINTABLE))  # inside the quotes
        elif v.__class__ is int and kind is int and v >= 0:
            holes.append((a, b, _INT))
    if "choices" not in top:
        return None
    a, b, choices = top["choices"]
    if choices.__class__ is not list or len(choices) != 1 or choices[0].__class__ is not dict:
        return None
    choice, c_end = _object(s, _skip(s, a + 1))
    if _skip(s, c_end) != b - 1:  # "]" right after the one element
        return None
    if choice.get("finish_reason", (0, 0, None))[2] is not None:
        return None
    delta = choice.get("delta", (0, 0, None))
    if delta[2] is not None:
        if delta[2].__class__ is not dict:
            return None
        fields, d_end = _object(s, delta[0])
        if d_end != delta[1] or "content" not in fields:
            return None
        if any(v is not None and not (k == "role" and v.__class__ is str) for k, (_, _, v) in fields.items()
               if k != "content"):
            return None
        piece = fields["content"]
    elif "text" in choice:
        piece = choice["text"]
    else:
        return None
    if piece[2].__class__ is not str or not piece[2]:
        return None
    return [*holes, (piece[0] + 1, piece[1] - 1, _CONTENT)]


def _skip(s: str, i: int) -> int:
    while s[i:i + 1] == " ":  # the only whitespace there can be: the text has no control character
        i += 1
    return i


def _object(s: str, i: int) -> tuple[dict[str, tuple[int, int, object]], int]:
    """The object at ``s[i]`` as key → (value start, value end, value), and its end; ValueError if it is not one
    or repeats a key."""
    if s[i:i + 1] != "{":
        raise ValueError(i)
    members: dict[str, tuple[int, int, object]] = {}
    i = _skip(s, i + 1)
    if s[i:i + 1] == "}":
        return members, i + 1
    while True:
        if s[i:i + 1] != '"':
            raise ValueError(i)
        key, i = _scanstring(s, i + 1)
        i = _skip(s, i)
        if s[i:i + 1] != ":":
            raise ValueError(i)
        i = _skip(s, i + 1)
        value, end = _raw_decode(s, i)
        if key in members:
            raise ValueError(key)
        members[key] = (i, end, value)
        i = _skip(s, end)
        if s[i:i + 1] == "}":
            return members, i + 1
        if s[i:i + 1] != ",":
            raise ValueError(i)
        i = _skip(s, i + 1)
