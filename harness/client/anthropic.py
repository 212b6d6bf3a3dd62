"""Anthropic Messages API (``POST /v1/messages``): headers, request bodies, stream events, non-streaming answers.
Pure.

A Messages stream is named events (``event: <type>`` + ``data: <json>``, the JSON's ``type`` repeating the
name). ``MessagesTracker.on_event`` reads one event's data:

- ``message_start``: ``message.id``; ``message.usage``: ``input_tokens``, ``cache_creation_input_tokens``,
  ``cache_read_input_tokens`` (the prefix-cache hits: ``cached_tokens``, source "usage.cache_read_input_tokens"),
  and ``output_tokens`` so far.
- ``content_block_start``: block ``index`` and its type (``text`` | ``thinking`` | ``tool_use`` |
  ``redacted_thinking`` | ...), kept in ``blocks``. A ``redacted_thinking`` block arrives whole here: one
  reasoning output (its reasoning is encrypted, but it was generated). A start carrying text is output too.
- ``content_block_delta``, by ``delta.type``: ``text_delta`` (``text``: the answer), ``thinking_delta``
  (``thinking``: reasoning), ``input_json_delta`` (``partial_json``: a tool call's input); ``signature_delta``,
  ``citations_delta`` and delta types added later are not output. An empty piece is not output.
- ``message_delta``: ``delta.stop_reason`` is the finish reason (``end_turn``, ``max_tokens``, ``tool_use``,
  ``stop_sequence``, ``pause_turn``, ``refusal``, ...); ``usage`` counts are cumulative and replace earlier ones.
- ``message_stop``: the final event (``on_event`` returns True).
- ``error`` (``error.type``, ``error.message``): ``stream_error``. ``ping``, ``content_block_stop`` and event
  types added later are ignored.

Token counts follow OpenAI's meaning, so records compare across APIs: ``prompt_tokens`` is the whole prompt,
``input_tokens + cache_creation_input_tokens + cache_read_input_tokens`` (Anthropic's ``input_tokens`` counts
only the tokens after the last cache breakpoint, so cached <= prompt holds as it does for OpenAI);
``completion_tokens`` is ``output_tokens`` (thinking included). Reasoning tokens: only when the server reports
``usage.output_tokens_details.thinking_tokens``; else ``reasoning_tokens`` stays None and the reader counts
reasoning chunks (flagged as counted).

Wrong shapes are ``bad_response`` naming the event, the field, what was expected and what came
("message_delta event's usage.output_tokens is '3', expected an integer >= 0"); an event that fails leaves
nothing of itself behind (reads first, writes last). Not JSON is ``malformed_chunk``.

``parse_messages_body`` reads a non-streaming answer (a ``Message`` object) into a tracker the same way.
"""

from __future__ import annotations

import json

from harness.client.stream import FieldError as _Wrong
from harness.client.stream import (
    OutputTracker,
    StreamProtocolError,
    count_ok,
    decode_json,
    json_kind,
    server_error,
    split_system,
)
from harness.client.stream import field_count as _count
from harness.client.stream import field_obj as _obj
from harness.client.stream import field_str as _str
from harness.workload.prompts import Prompt, SplicedBody, encode_body

__all__ = ["ANTHROPIC_VERSION", "MessagesTracker", "build_messages_body", "messages_headers", "parse_messages_body"]

ANTHROPIC_VERSION = "2023-06-01"
"""The ``anthropic-version`` header: the API's only stable version (features come as ``anthropic-beta``)."""
CACHED_SOURCE = "usage.cache_read_input_tokens"

_DELTA_FIELDS = {
    "text_delta": ("text", "content"),
    "thinking_delta": ("thinking", "reasoning"),
    "input_json_delta": ("partial_json", "tool"),
}


def messages_headers(api_key: str | None, version: str = ANTHROPIC_VERSION) -> dict[str, str]:
    """The headers Anthropic requires besides content-type: ``x-api-key`` (when there is a key) and
    ``anthropic-version``. Names lower-case, as ``openai.request_head`` writes them."""
    headers = {"anthropic-version": version}
    if api_key:
        headers["x-api-key"] = api_key
    return headers


def build_messages_body(model: str, prompt: Prompt, max_tokens: int, *, stream: bool = True,
                        extra: dict | None = None) -> bytes | SplicedBody:
    """The JSON body (``max_tokens`` is required by the API). Chat prompts: the system messages become the
    top-level ``system`` (the API has no system role), the rest ``messages``; a text prompt is one user message.
    ``extra`` overrides any key (e.g. ``{"thinking": {"type": "enabled", "budget_tokens": 2048}}``)."""
    body: dict = {"model": model, "max_tokens": max_tokens, "stream": stream}
    if prompt.messages is not None:
        system, rest = split_system(prompt.messages)
        if system is not None:
            body["system"] = system
        body["messages"] = rest
    else:
        body["messages"] = [{"role": "user", "content": prompt.text}]
    if extra:
        body.update(extra)
    return encode_body(body)


class MessagesTracker(OutputTracker):
    """One Messages stream (fields: ``stream.OutputTracker``; events: the module docstring)."""

    __slots__ = ("_cache_write", "_input", "blocks")

    def __init__(self, start: float, *, keep_text: bool = False) -> None:
        super().__init__(start, keep_text=keep_text)
        self.blocks: dict[int, str] = {}
        """Each content block's type by its index, as ``content_block_start`` announced it."""
        self._input: int | None = None  # usage.input_tokens and cache_creation_input_tokens, latest
        self._cache_write: int | None = None

    def on_event(self, t: float, data: str) -> bool:
        """Take one SSE event's data; True at ``message_stop``. Raises ``StreamProtocolError``."""
        obj = decode_json(data)
        if obj.__class__ is not dict:
            raise StreamProtocolError("bad_response", f"server event is {json_kind(obj)}, expected an object: "
                                                      f"{data[:120]!r}")
        typ = obj.get("type")
        try:
            if typ == "content_block_delta":  # the per-token path
                delta = _obj(obj.get("delta"), "delta")
                dtype = delta.get("type")
                if dtype.__class__ is not str:
                    raise _Wrong("delta.type", dtype, "a string")
                field = _DELTA_FIELDS.get(dtype)
                if field is not None:
                    key, kind = field
                    piece = delta.get(key)
                    if piece.__class__ is not str:
                        raise _Wrong(f"delta.{key}", piece, "a string")
                    if piece:
                        self.output(t, kind, piece)
                return False
            if typ.__class__ is not str:
                if "error" in obj:  # an error object without an event type
                    raise _server_error("in stream", obj["error"])
                raise _Wrong("type", typ, "a string naming the event")
            return self._other(t, typ, obj)
        except _Wrong as w:
            where = f"{typ} event" if typ.__class__ is str else "server event"
            raise StreamProtocolError("bad_response", f"{w.words(where)}: {data[:120]!r}") from None

    def _other(self, t: float, typ: str, obj: dict) -> bool:
        if typ == "content_block_start":
            index = obj.get("index")
            if index is None or not count_ok(index):
                raise _Wrong("index", index, "an integer >= 0")
            block = _obj(obj.get("content_block"), "content_block")
            btype = block.get("type")
            if btype.__class__ is not str:
                raise _Wrong("content_block.type", btype, "a string")
            kind, key = _BLOCK_OUTPUT.get(btype, (None, None))
            piece = _str(block.get(key), f"content_block.{key}") if key is not None else None
            self.blocks[index] = btype
            if piece:
                # kind is set wherever key is (one _BLOCK_OUTPUT row)
                self.output(t, kind, piece)  # type: ignore[arg-type]
            return False
        if typ == "message_delta":
            stop = None
            delta = obj.get("delta")
            if delta is not None:
                stop = _str(_obj(delta, "delta").get("stop_reason"), "delta.stop_reason")
            usage = _usage(obj.get("usage"), "usage")
            if stop is not None:
                self.finish_reason, self.finish_t = stop, t
            self._take_usage(*usage)
            return False
        if typ == "message_stop":
            return True
        if typ == "message_start":
            msg = _obj(obj.get("message"), "message")
            rid = _str(msg.get("id"), "message.id")
            usage = _usage(msg.get("usage"), "message.usage")
            if rid is not None and self.response_id is None:
                self.response_id = rid
            self._take_usage(*usage)
            return False
        if typ == "error":
            raise _server_error("in stream", obj.get("error"))
        return False  # ping, content_block_stop, and types this tracker does not know

    def _take_usage(self, inp: int | None, write: int | None, read: int | None, out: int | None,
                    thinking: int | None) -> None:
        if inp is not None:
            self._input = inp
        if write is not None:
            self._cache_write = write
        if read is not None:
            self.cached_tokens, self.cached_source = read, CACHED_SOURCE
        if self._input is not None:
            self.prompt_tokens = self._input + (self._cache_write or 0) + (self.cached_tokens or 0)
        if out is not None:
            self.completion_tokens = out
        if thinking is not None:
            self.reasoning_tokens = thinking


_BLOCK_OUTPUT = {"text": ("content", "text"), "thinking": ("reasoning", "thinking"),
                 "redacted_thinking": ("reasoning", "data")}
"""Block types whose ``content_block_start`` can carry output: the kind, and the field that carries it."""


def parse_messages_body(tracker: OutputTracker, t: float, obj: object) -> None:
    """A non-streaming answer (a ``Message`` object) into ``tracker``: usage, ``stop_reason``, id, the answer's
    text (its ``text`` blocks, kept only with ``keep_text``). No output times: nothing was streamed. An error
    object is ``stream_error``; wrong shapes ``bad_response``."""
    dump = json.dumps(obj)[:160]
    if obj.__class__ is not dict:
        raise StreamProtocolError("bad_response", f"response body is {json_kind(obj)}, expected a Message object: "
                                                  f"{dump}")
    try:
        if obj.get("type") == "error":
            raise _server_error("in the response", obj.get("error"))
        rid = _str(obj.get("id"), "id")
        stop = _str(obj.get("stop_reason"), "stop_reason")
        inp, write, read, out, thinking = _usage(obj.get("usage"), "usage")
        texts = []
        content = obj.get("content")
        if content is not None:
            if content.__class__ is not list:
                raise _Wrong("content", content, "an array")
            for i, block in enumerate(content):
                if _obj(block, f"content[{i}]").get("type") == "text" and \
                        (s := _str(block.get("text"), f"content[{i}].text")):
                    texts.append(s)
    except _Wrong as w:
        raise StreamProtocolError("bad_response", f"{w.words('response body')}: {dump}") from None
    tracker.finish_reason, tracker.finish_t = stop, t
    if rid is not None:
        tracker.response_id = rid
    if inp is not None:
        tracker.prompt_tokens = inp + (write or 0) + (read or 0)
    if read is not None:
        tracker.cached_tokens, tracker.cached_source = read, CACHED_SOURCE
    if out is not None:
        tracker.completion_tokens = out
    if thinking is not None:
        tracker.reasoning_tokens = thinking
    if tracker.text is not None:
        tracker.text.extend(texts)


def _usage(usage: object, path: str) -> tuple:
    """(input, cache write, cache read, output, thinking) of a ``usage`` object (each None when absent), checked."""
    if usage is None:
        return None, None, None, None, None
    u = _obj(usage, path)
    thinking = None
    details = u.get("output_tokens_details")
    if details is not None:
        thinking = _count(_obj(details, path + ".output_tokens_details").get("thinking_tokens"),
                          path + ".output_tokens_details.thinking_tokens")
    return (_count(u.get("input_tokens"), path + ".input_tokens"),
            _count(u.get("cache_creation_input_tokens"), path + ".cache_creation_input_tokens"),
            _count(u.get("cache_read_input_tokens"), path + ".cache_read_input_tokens"),
            _count(u.get("output_tokens"), path + ".output_tokens"),
            thinking)


def _server_error(where: str, err: object) -> StreamProtocolError:
    return server_error(where, err, "type")
