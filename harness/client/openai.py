"""OpenAI chat/completions requests and stream chunks. Pure: bytes in, fields out.

``StreamTracker.on_event`` is on the per-token hot path: one JSON decode and a few dict lookups. Before it,
``take_events`` takes plain content chunks straight from the bytes, by a template learned from one of them
(``chunk_template.py``): no SSE decode, no JSON, the same record.
TTFT is the first chunk carrying content — text, reasoning (``reasoning_content`` / ``reasoning``)
or tool-call deltas; the role-only first chunk and empty deltas do not count.

A chunk that is not JSON is ``malformed_chunk``; JSON of the wrong shape is ``bad_response``, with the field,
what was expected and what came ("server chunk's usage.prompt_tokens is 'fifty', expected an integer >= 0"):
the chunk is not an object, its ``id`` not a string (read until a chunk gives one), ``choices`` not an array of
objects, ``delta`` not an object, ``finish_reason`` not a string, ``usage`` not an object or its counts not
integers >= 0, llama.cpp's ``timings`` not an object or its ``cache_n`` not a count, its ``prompt_ms`` /
``predicted_ms`` not milliseconds >= 0. Nothing of such a
chunk is kept, so no wrong type reaches the record. The checks cost nothing per token: wrong containers fail
the lookups the tracker makes anyway (the message is worked out only then), and ``finish_reason``, ``usage``
and ``timings`` are checked only on the chunks that carry them (``timings`` only on the finish chunk, where
llama.cpp puts it; they become ``server_prefill_s`` / ``server_decode_s``).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from harness.client import chunk_template
from harness.client.stream import OutputTracker, StreamProtocolError, count_ok, decode_json, json_kind
from harness.workload.prompts import Prompt, SplicedBody, encode_body

__all__ = ["SplicedBody", "StreamProtocolError", "StreamTracker", "build_body", "encode_body", "parse_body",
           "request_head"]

def build_body(api: str, model: str, prompt: Prompt, max_tokens: int, *, ignore_eos: bool,
               extra: dict | None = None, stream: bool = True, continuous_usage: bool = False) -> bytes | SplicedBody:
    """The JSON body: streaming with usage (``continuous_usage``: on every chunk, vLLM's
    ``continuous_usage_stats``), or not streaming; exact output length via ignore_eos/min_tokens when asked."""
    body: dict = {"model": model, "stream": stream, "max_tokens": max_tokens}
    if stream:
        body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True} if continuous_usage \
            else {"include_usage": True}
    if api == "chat":
        body["messages"] = prompt.messages
    else:
        body["prompt"] = prompt.text
    if ignore_eos:
        body["ignore_eos"] = True
        body["min_tokens"] = max_tokens
    if extra:
        body.update(extra)
    return encode_body(body)


def request_head(method: str, path: str, host: str, body_len: int, api_key: str | None,
                 headers: dict[str, str] | None = None, *, bearer: bool = True) -> bytes:
    """Request line and headers. ``Accept-Encoding: identity``: a compressed stream would be buffered. ``headers``:
    more lines (an API's own, the endpoint's); ``bearer`` False leaves the key to them (Anthropic's x-api-key)."""
    auth = f"authorization: Bearer {api_key}\r\n" if api_key and bearer else ""
    more = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    return (f"{method} {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
            f"accept: text/event-stream\r\naccept-encoding: identity\r\nuser-agent: kneecap\r\n{auth}{more}"
            f"content-length: {body_len}\r\n\r\n").encode()


class StreamTracker(OutputTracker):
    """One chat/completions stream (fields: ``stream.OutputTracker``). Chat deltas: ``content`` is the answer,
    ``reasoning_content`` / ``reasoning`` is reasoning, ``tool_calls`` a tool call; completions: ``text``."""

    __slots__ = ("_learns", "_match", "_usage")

    def __init__(self, start: float, *, keep_text: bool = False, fast_path: bool = True) -> None:
        super().__init__(start, keep_text=keep_text)
        self._match: chunk_template.Matcher | None = None
        """The template of this stream's plain content chunks, once learned."""
        self._usage: tuple[int | None, int | None, int | None] | None = None
        """A usage template's frozen usage (prompt tokens, cached, reasoning) as the full parse read them; None for a
        template without usage."""
        self._learns = _LEARNS if fast_path else 0
        """Templates still to try (``fast_path`` False: none, every event is parsed in full; for tests)."""

    def on_event(self, t: float, data: str) -> bool:
        """Take one SSE event's data; True at ``[DONE]``. Raises ``StreamProtocolError``."""
        if data == "[DONE]":
            return True
        obj = decode_json(data)
        n = len(self.chunk_times)
        try:
            self._take(t, obj)  # type: ignore[arg-type]  # a non-dict fails in _take, caught below
        except (AttributeError, TypeError, KeyError, IndexError):
            raise StreamProtocolError("bad_response", f"{_shape_problem(obj)}: {data[:120]!r}") from None
        if self._learns and len(self.chunk_times) > n and self._fast_state():
            self._learn(data)
        return False

    def take_events(self, chunk: bytes, t: float) -> int:
        """The plain content chunks at the start of ``chunk`` (raw body bytes at an event boundary, arrived at
        ``t``), taken by the template: their arrival added to ``chunk_times`` (and, with continuous usage, their
        tokens to ``chunk_tokens``); the offset where they end."""
        match, usage = self._match, self._usage
        # Learned only in the fast state (content_t and response_id set, no text kept), which nothing taken here
        # changes; a template with usage applies while tokens are counted per chunk, one without while they are not.
        if match is None or (self.chunk_tokens is None) is (usage is not None):
            return 0
        m = match(chunk)
        if m is None:
            return 0
        rel = t - self.start  # one arrival for every event of one receive
        times, n = self.chunk_times, len(chunk)
        while True:
            times.append(rel)
            if usage is not None:  # as _take -> output -> exact_tokens, then the usage fields
                done = int(m.group(_COMPLETION))
                # usage is set only while chunk_tokens counts (checked above)
                self.chunk_tokens.append(done - (self._cum or 0))  # type: ignore[union-attr]
                self._cum = self.completion_tokens = done
                self.prompt_tokens = usage[0]
                if usage[1] is not None:
                    self.cached_tokens, self.cached_source = usage[1], "usage"
                if usage[2] is not None:
                    self.reasoning_tokens = usage[2]
            end = m.end()
            if end == n:  # the common case, one event: no failing match to find the end
                return end
            m = match(chunk, end)
            if m is None:
                return end

    def _fast_state(self) -> bool:
        """The state in which ``_take`` does to a plain content chunk only what ``take_events`` does."""
        return self.content_t is not None and self.text is None and self.response_id is not None

    def _learn(self, data: str) -> None:
        # A content chunk that took the full parse: no template yet, or it missed (also by the framing: split across
        # receives, CRLF). Each try counts, so a stream read mostly through on_event stops paying ~1 µs a chunk.
        self._learns -= 1
        match = chunk_template.learn(data)
        if match is None:
            return
        self._match, self._usage = match, None
        if _COMPLETION in match.__self__.groupindex:  # type: ignore[attr-defined]  # a Matcher is a bound Pattern.match
            usage = decode_json(data)["usage"]  # type: ignore[index]  # as _take read it (the parse succeeded)
            details, out = usage.get("prompt_tokens_details"), usage.get("completion_tokens_details")
            self._usage = (usage.get("prompt_tokens"), details.get("cached_tokens") if details else None,
                           out.get("reasoning_tokens") if out else None)

    def _take(self, t: float, obj: dict) -> None:
        # Reads first, writes last: a chunk that fails on a wrong type leaves nothing of itself behind.
        if "error" in obj and not obj.get("choices"):
            err = obj["error"]
            msg = err.get("message", err) if isinstance(err, dict) else err
            raise StreamProtocolError("stream_error", f"server error in stream: {str(msg)[:200]}")
        choices = obj.get("choices")
        usage = obj.get("usage")
        rid = obj.get("id") if self.response_id is None else None  # read once: later chunks repeat it
        if rid is not None and rid.__class__ is not str:
            raise TypeError
        cached = reasoning = None
        if usage:
            completion, prompt = usage.get("completion_tokens"), usage.get("prompt_tokens")
            details = usage.get("prompt_tokens_details")
            cached = details.get("cached_tokens") if details else None
            out_details = usage.get("completion_tokens_details")
            reasoning = out_details.get("reasoning_tokens") if out_details else None
            if not (_count(completion) and _count(prompt) and _count(cached) and _count(reasoning)):
                raise TypeError
        kind = piece = None
        if choices:
            c = choices[0]
            delta = c.get("delta")
            if delta is not None:
                piece = delta.get("content")
                if piece:
                    kind = "content"
                elif delta.get("reasoning_content") or delta.get("reasoning"):
                    kind = "reasoning"
                elif delta.get("tool_calls"):
                    kind = "tool"
            else:
                piece = c.get("text")
                if piece:
                    kind = "content"
            finish = c.get("finish_reason")
            if finish:
                self._finish(t, obj, finish, cached)
        if kind == "content" and self.content_t is not None and not usage and self.text is None \
                and self.chunk_tokens is None:
            self.chunk_times.append(t - self.start)  # the per-token common case, inline
        elif kind is not None:
            self.output(t, kind, piece, completion if usage else None)
        if usage:
            if kind is None and completion is not None:
                self.usage_seen(completion)
            self.completion_tokens = completion
            self.prompt_tokens = prompt
            if cached is not None:
                self.cached_tokens, self.cached_source = cached, "usage"
            if reasoning is not None:
                self.reasoning_tokens = reasoning
        if rid is not None:
            self.response_id = rid

    def _finish(self, t: float, obj: dict, finish: object, cached: int | None) -> None:
        """The chunk with a ``finish_reason`` (``cached``: its usage's, if any): the reason, its time and llama.cpp's
        per-request ``timings``, all checked before anything is kept. Off the per-token path: once a stream."""
        if finish.__class__ is not str:
            raise TypeError
        timings = obj.get("timings")  # llama.cpp's server: per-request timings on the final chunk
        if timings is not None:
            n, prefill_ms, decode_ms = timings.get("cache_n"), timings.get("prompt_ms"), timings.get("predicted_ms")
            if not (_count(n) and _ms(prefill_ms) and _ms(decode_ms)):
                raise TypeError
        self.finish_reason = finish
        self.finish_t = t
        if timings is not None:
            if cached is None and n is not None:
                self.cached_tokens, self.cached_source = n, "timings.cache_n"
            if prefill_ms is not None:
                self.server_prefill_s = prefill_ms / 1000
            if decode_ms is not None:
                self.server_decode_s = decode_ms / 1000


_count, _json_kind = count_ok, json_kind
_MAX_FLOAT = sys.float_info.max
_COMPLETION = chunk_template.COMPLETION
_LEARNS = 4
"""Tries a stream has at learning a template: a server whose chunks vary in a field we do not model stops costing
a learn (~25 µs, ~1 µs for a layout the process knows) per chunk after that."""


def _ms(v: object) -> bool:
    """A duration as llama.cpp's timings carry it: absent (None) or a finite number of milliseconds >= 0."""
    # Bounded by the largest float: an integer past it cannot become seconds (ms / 1000 raised OverflowError).
    return v is None or ((v.__class__ is float or v.__class__ is int) and 0 <= v <= _MAX_FLOAT)


def parse_body(tracker: OutputTracker, t: float, obj: Any) -> None:
    """A non-streaming chat/completions answer into ``tracker``: usage, finish reason, id, the answer's text."""
    try:
        choice = obj["choices"][0]
        usage = obj.get("usage") or {}
        completion, prompt = usage.get("completion_tokens"), usage.get("prompt_tokens")
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
        reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens")
        message = choice.get("message")
        text = message.get("content") if message is not None else choice.get("text")
        finish = choice.get("finish_reason")
        rid = obj.get("id")
        ok = all(map(_count, (completion, prompt, cached, reasoning))) and (finish is None or finish.__class__ is str) \
            and (rid is None or rid.__class__ is str)
    except (AttributeError, TypeError, KeyError, IndexError):
        ok = False
    if not ok:
        raise StreamProtocolError("bad_response", f"answer is not a chat/completions response with choices, "
                                                  f"integer usage counts and a string id: {json.dumps(obj)[:160]}")
    tracker.completion_tokens, tracker.prompt_tokens, tracker.reasoning_tokens = completion, prompt, reasoning
    if cached is not None:
        tracker.cached_tokens, tracker.cached_source = cached, "usage"
    tracker.finish_reason, tracker.finish_t = finish or "stop", t
    tracker.response_id = rid
    if tracker.text is not None and text.__class__ is str:
        tracker.text.append(text)


def _shape_problem(obj: object) -> str:
    """What makes ``obj`` not an OpenAI chunk, in words (only on the failure path: it walks the chunk again)."""
    if not isinstance(obj, dict):
        return f"server chunk is {_json_kind(obj)}, expected an object"
    choices = obj.get("choices")
    if choices is not None and not isinstance(choices, list):
        return f"server chunk's choices is {_json_kind(choices)}, expected an array"
    if choices:
        c = choices[0]
        if not isinstance(c, dict):
            return f"server chunk's choices[0] is {_json_kind(c)}, expected an object"
        delta = c.get("delta")
        if delta is not None and not isinstance(delta, dict):
            return f"server chunk's choices[0].delta is {_json_kind(delta)}, expected an object"
        finish = c.get("finish_reason")
        if finish and not isinstance(finish, str):
            return f"server chunk's choices[0].finish_reason is {_json_kind(finish)}, expected a string"
    usage = obj.get("usage")
    if usage and not isinstance(usage, dict):
        return f"server chunk's usage is {_json_kind(usage)}, expected an object"
    if usage:
        for key in ("prompt_tokens", "completion_tokens"):
            if not _count(usage.get(key)):
                return f"server chunk's usage.{key} is {_json_kind(usage.get(key))}, expected an integer >= 0"
        details = usage.get("prompt_tokens_details")
        if details and not isinstance(details, dict):
            return f"server chunk's usage.prompt_tokens_details is {_json_kind(details)}, expected an object"
        if details and not _count(details.get("cached_tokens")):
            return (f"server chunk's usage.prompt_tokens_details.cached_tokens is "
                    f"{_json_kind(details.get('cached_tokens'))}, expected an integer >= 0")
        out = usage.get("completion_tokens_details")
        if out and not isinstance(out, dict):
            return f"server chunk's usage.completion_tokens_details is {_json_kind(out)}, expected an object"
        if out and not _count(out.get("reasoning_tokens")):
            return (f"server chunk's usage.completion_tokens_details.reasoning_tokens is "
                    f"{_json_kind(out.get('reasoning_tokens'))}, expected an integer >= 0")
    timings = obj.get("timings")
    if timings is not None and not isinstance(timings, dict):
        return f"server chunk's timings is {_json_kind(timings)}, expected an object"
    if timings is not None:
        if not _count(timings.get("cache_n")):
            return f"server chunk's timings.cache_n is {_json_kind(timings.get('cache_n'))}, expected an integer >= 0"
        for key in ("prompt_ms", "predicted_ms"):
            if not _ms(timings.get(key)):
                return (f"server chunk's timings.{key} is {_json_kind(timings.get(key))}, expected a number of "
                        f"milliseconds >= 0")
    rid = obj.get("id")  # checked last: only the first chunk's id is read
    if rid is not None and not isinstance(rid, str):
        return f"server chunk's id is {_json_kind(rid)}, expected a string"
    return "server chunk has fields of unexpected types"
