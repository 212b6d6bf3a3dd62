"""OpenAI chat/completions requests and stream chunks. Pure: bytes in, fields out.

``StreamTracker.on_event`` is on the per-token hot path: one JSON decode and a few dict lookups.
TTFT is the first chunk carrying content — text, reasoning (``reasoning_content`` / ``reasoning``)
or tool-call deltas; the role-only first chunk and empty deltas do not count.

A chunk that is not JSON is ``malformed_chunk``; JSON of the wrong shape is ``bad_response``, with the field,
what was expected and what came ("server chunk's usage.prompt_tokens is 'fifty', expected an integer >= 0"):
the chunk is not an object, ``choices`` not an array of objects, ``delta`` not an object, ``finish_reason``
not a string, ``usage`` not an object or its counts not integers >= 0. Nothing of such a chunk is kept, so
no wrong type reaches the record. The checks cost nothing per token: wrong containers fail the lookups the
tracker makes anyway (the message is worked out only then), and ``finish_reason`` and ``usage`` are checked
only on the chunks that carry them.
"""

from __future__ import annotations

import json

from harness.errors import KneecapError
from harness.workload.prompts import Prompt

__all__ = ["StreamProtocolError", "StreamTracker", "build_body", "request_head"]

_raw_decode = json.JSONDecoder().raw_decode


class StreamProtocolError(KneecapError):
    """The stream broke the protocol; ``kind`` is an error class of ``metrics.record``."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


def build_body(api: str, model: str, prompt: Prompt, max_tokens: int, *, ignore_eos: bool,
               extra: dict | None = None) -> bytes:
    """The JSON body: streaming with usage; exact output length via ignore_eos/min_tokens when asked."""
    body: dict = {"model": model, "stream": True, "stream_options": {"include_usage": True},
                  "max_tokens": max_tokens}
    if api == "chat":
        body["messages"] = prompt.messages
    else:
        body["prompt"] = prompt.text
    if ignore_eos:
        body["ignore_eos"] = True
        body["min_tokens"] = max_tokens
    if extra:
        body.update(extra)
    return json.dumps(body, separators=(",", ":")).encode()


def request_head(method: str, path: str, host: str, body_len: int, api_key: str | None) -> bytes:
    """Request line and headers. ``Accept-Encoding: identity``: a compressed stream would be buffered."""
    auth = f"authorization: Bearer {api_key}\r\n" if api_key else ""
    return (f"{method} {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
            f"accept: text/event-stream\r\naccept-encoding: identity\r\nuser-agent: kneecap\r\n{auth}"
            f"content-length: {body_len}\r\n\r\n").encode()


class StreamTracker:
    """Accumulates one stream's chunks: content arrival times, usage, finish reason, id."""

    __slots__ = ("cached_source", "cached_tokens", "chunk_times", "completion_tokens", "finish_reason", "finish_t",
                 "prompt_tokens", "response_id", "start", "text")

    def __init__(self, start: float, *, keep_text: bool = False) -> None:
        self.start = start
        self.chunk_times: list[float] = []
        self.text: list[str] | None = [] if keep_text else None
        """The answer's content pieces as streamed (sessions send it back as the next turn's history); None
        unless ``keep_text``. Reasoning and tool-call deltas are not content and are not kept."""
        self.cached_tokens: int | None = None
        """Prompt tokens the server's prefix cache served: ``usage.prompt_tokens_details.cached_tokens``, else
        llama.cpp's ``timings.cache_n`` on the final chunk; ``cached_source`` says which: "usage" or
        "timings.cache_n"."""
        self.cached_source: str | None = None
        self.completion_tokens: int | None = None
        self.prompt_tokens: int | None = None
        self.finish_reason: str | None = None
        self.finish_t: float | None = None
        self.response_id: str | None = None

    def on_event(self, t: float, data: str) -> bool:
        """Take one SSE event's data; True at ``[DONE]``. Raises ``StreamProtocolError``."""
        if data == "[DONE]":
            return True
        try:
            obj, end = _raw_decode(data)  # json.loads less its two whitespace scans: ~0.6 of its ~1.8 µs
        except (ValueError, RecursionError):
            end = -1
        if end != len(data):  # not exactly one JSON value (whitespace around it, garbage): json.loads decides
            try:
                obj = json.loads(data)
            except (ValueError, RecursionError):  # RecursionError: nested deeper than the interpreter's stack
                raise StreamProtocolError("malformed_chunk", f"chunk is not JSON: {data[:120]!r}") from None
        try:
            self._take(t, obj)
        except (AttributeError, TypeError, KeyError, IndexError):
            raise StreamProtocolError("bad_response", f"{_shape_problem(obj)}: {data[:120]!r}") from None
        return False

    def _take(self, t: float, obj: dict) -> None:
        # Reads first, writes last: a chunk that fails on a wrong type leaves nothing of itself behind.
        if "error" in obj and not obj.get("choices"):
            err = obj["error"]
            msg = err.get("message", err) if isinstance(err, dict) else err
            raise StreamProtocolError("stream_error", f"server error in stream: {str(msg)[:200]}")
        choices = obj.get("choices")
        usage = obj.get("usage")
        cached = None
        if usage:
            completion, prompt = usage.get("completion_tokens"), usage.get("prompt_tokens")
            details = usage.get("prompt_tokens_details")
            cached = details.get("cached_tokens") if details else None
            if not (_count(completion) and _count(prompt) and _count(cached)):
                raise TypeError
        if choices:
            c = choices[0]
            delta = c.get("delta")
            if delta is not None:
                has = delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning") \
                    or delta.get("tool_calls")
            else:
                has = c.get("text")
            finish = c.get("finish_reason")
            if finish:
                if finish.__class__ is not str:
                    raise TypeError
                self.finish_reason = finish
                self.finish_t = t
                timings = obj.get("timings")  # llama.cpp's server: per-request timings on the final chunk
                if timings.__class__ is dict and cached is None and _count(n := timings.get("cache_n")) \
                        and n is not None:
                    self.cached_tokens, self.cached_source = n, "timings.cache_n"
            if has:
                self.chunk_times.append(t - self.start)
                text = self.text
                if text is not None:
                    piece = delta.get("content") if delta is not None else c.get("text")
                    if piece.__class__ is str:
                        text.append(piece)
        if usage:
            self.completion_tokens = completion
            self.prompt_tokens = prompt
            if cached is not None:
                self.cached_tokens, self.cached_source = cached, "usage"
        if self.response_id is None:
            self.response_id = obj.get("id")


def _count(v: object) -> bool:
    """A token count as usage carries it: absent (None) or an integer >= 0 (a bool is not a count)."""
    return v is None or (v.__class__ is int and v >= 0)  # type: ignore[operator]


def _json_kind(v: object) -> str:
    if isinstance(v, dict):
        return "an object"
    if isinstance(v, list):
        return "an array"
    if isinstance(v, str):
        return repr(v[:40])
    return json.dumps(v)  # null, true, 7, 2.5


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
    return "server chunk has fields of unexpected types"
