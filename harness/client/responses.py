"""OpenAI Responses API (``POST /v1/responses``): request bodies, stream events, non-streaming answers. Pure.

A Responses stream is typed events (``event: <type>`` + ``data: <json>``, the JSON's ``type`` repeating the
name; no ``[DONE]``). ``ResponsesTracker.on_event`` reads one event's data:

- ``response.created`` / ``response.in_progress``: ``response.id`` is the response id.
- Output, each event one ``delta`` string (an empty one is not output): ``response.output_text.delta`` and
  ``response.refusal.delta`` are the answer (content), ``response.reasoning_summary_text.delta`` and
  ``response.reasoning_text.delta`` reasoning, ``response.function_call_arguments.delta`` and
  ``response.custom_tool_call_input.delta`` a tool call.
- Final (``on_event`` returns True): ``response.completed`` (finish_reason "stop"; a status other than
  "completed" is kept as it came) and ``response.incomplete`` (finish_reason ``incomplete_details.reason``,
  e.g. "max_output_tokens" — a finished answer cut at the cap, as chat's "length"). Both carry
  ``response.usage``: ``input_tokens`` (cached ones included), ``output_tokens`` (reasoning included),
  ``input_tokens_details.cached_tokens``, ``output_tokens_details.reasoning_tokens``.
- ``response.failed`` (``response.error``) and ``error`` (``code``, ``message``) are ``stream_error``.
- Everything else (``response.output_item.*``, ``response.content_part.*``, ``*.done``, types added later) is
  ignored, whatever it holds.

Wrong shapes are ``bad_response`` naming the event, the field, what was expected and what came
("response.completed event's response.usage.input_tokens is 'fifty', expected an integer >= 0"); fields are
checked only on the events that are read, and an event that fails leaves nothing of itself behind (reads first,
writes last). Not JSON is ``malformed_chunk``. The per-token path is one decode, two dict lookups, a type check.

``parse_responses_body`` reads a non-streaming answer (a ``Response`` object) into a tracker the same way.
"""

from __future__ import annotations

import json

from harness.client.stream import FieldError as _Wrong
from harness.client.stream import OutputTracker, StreamProtocolError, decode_json, json_kind, server_error, split_system
from harness.client.stream import field_count as _count
from harness.client.stream import field_obj as _obj
from harness.client.stream import field_str as _str
from harness.workload.prompts import Prompt, SplicedBody, encode_body

__all__ = ["ResponsesTracker", "build_responses_body", "parse_responses_body"]

CACHED_SOURCE = "usage.input_tokens_details.cached_tokens"

_DELTA_KINDS = {
    "response.output_text.delta": "content",
    "response.refusal.delta": "content",
    "response.reasoning_summary_text.delta": "reasoning",
    "response.reasoning_text.delta": "reasoning",
    "response.function_call_arguments.delta": "tool",
    "response.custom_tool_call_input.delta": "tool",
}


def build_responses_body(model: str, prompt: Prompt, max_tokens: int, *, stream: bool = True,
                         extra: dict | None = None) -> bytes | SplicedBody:
    """The JSON body. Chat prompts: the system messages become ``instructions``, the rest ``input`` as
    ``{role, content}`` items; a text prompt is the ``input`` string. ``store: false``: a load test's answers
    are not kept server-side (OpenAI keeps them by default); ``extra`` overrides any key."""
    body: dict = {"model": model, "stream": stream, "max_output_tokens": max_tokens, "store": False}
    if prompt.messages is not None:
        system, rest = split_system(prompt.messages)
        if system is not None:
            body["instructions"] = system
        body["input"] = rest
    else:
        body["input"] = prompt.text
    if extra:
        body.update(extra)
    return encode_body(body)


class ResponsesTracker(OutputTracker):
    """One Responses stream (fields: ``stream.OutputTracker``; events: the module docstring)."""

    __slots__ = ()

    def on_event(self, t: float, data: str) -> bool:
        """Take one SSE event's data; True at ``response.completed`` / ``response.incomplete``. Raises
        ``StreamProtocolError``."""
        obj = decode_json(data)
        if obj.__class__ is not dict:
            raise StreamProtocolError("bad_response", f"server event is {json_kind(obj)}, expected an object: "
                                                      f"{data[:120]!r}")
        typ = obj.get("type")
        try:
            if typ.__class__ is not str:
                if "error" in obj:  # an error object without an event type
                    raise _server_error("in stream", obj["error"])
                raise _Wrong("type", typ, "a string naming the event")
            kind = _DELTA_KINDS.get(typ)
            if kind is not None:  # the per-token path
                piece = obj.get("delta")
                if piece.__class__ is not str:
                    raise _Wrong("delta", piece, "a string")
                if piece:
                    self.output(t, kind, piece)
                return False
            return self._lifecycle(t, typ, obj)
        except _Wrong as w:
            where = f"{typ} event" if typ.__class__ is str else "server event"
            raise StreamProtocolError("bad_response", f"{w.words(where)}: {data[:120]!r}") from None

    def _lifecycle(self, t: float, typ: str, obj: dict) -> bool:
        if typ == "response.created" or typ == "response.in_progress":
            rid = _str(_obj(obj.get("response"), "response").get("id"), "response.id")
            if rid is not None and self.response_id is None:
                self.response_id = rid
            return False
        if typ == "response.completed" or typ == "response.incomplete":
            final = _final(_obj(obj.get("response"), "response"), "response.", typ == "response.incomplete")
            _store(self, t, *final)
            return True
        if typ == "response.failed":
            resp = obj.get("response")
            raise _server_error(f"in stream ({typ})", resp.get("error") if resp.__class__ is dict else resp)
        if typ == "error":
            raise _server_error("in stream (error)", obj)
        return False  # output_item.*, content_part.*, *.done, and types this tracker does not know


def parse_responses_body(tracker: OutputTracker, t: float, obj: object) -> None:
    """A non-streaming answer (a ``Response`` object) into ``tracker``: usage, finish, id, the answer's text
    (``output[].content[]`` parts ``output_text`` / ``refusal``, kept only with ``keep_text``). No output times:
    nothing was streamed. A ``failed`` response is ``stream_error``; wrong shapes ``bad_response``."""
    dump = json.dumps(obj)[:160]
    if obj.__class__ is not dict:
        raise StreamProtocolError("bad_response", f"response body is {json_kind(obj)}, expected a Responses object: "
                                                  f"{dump}")
    try:
        if obj.get("status") == "failed" or obj.get("error") is not None:
            raise _server_error("in the response (status failed)", obj.get("error"))
        final = _final(obj, "", False)
        texts = _output_texts(obj.get("output"))
    except _Wrong as w:
        raise StreamProtocolError("bad_response", f"{w.words('response body')}: {dump}") from None
    _store(tracker, t, *final)
    if tracker.text is not None:
        tracker.text.extend(texts)


# -- reading a Response object (the final event's, or a non-streaming body) -----------------------------------

def _final(resp: dict, path: str, incomplete: bool) -> tuple:
    """(id, finish_reason, input, output, cached, reasoning) of a finished response, every type checked."""
    rid = _str(resp.get("id"), path + "id")
    status = _str(resp.get("status"), path + "status")
    reason = None
    details = resp.get("incomplete_details")
    if details is not None:
        reason = _str(_obj(details, path + "incomplete_details").get("reason"), path + "incomplete_details.reason")
    if incomplete or status == "incomplete":
        finish = reason or "incomplete"
    else:
        finish = "stop" if status is None or status == "completed" else status
    prompt = completion = cached = reasoning = None
    usage = resp.get("usage")
    if usage is not None:
        u = path + "usage"
        _obj(usage, u)
        prompt = _count(usage.get("input_tokens"), u + ".input_tokens")
        completion = _count(usage.get("output_tokens"), u + ".output_tokens")
        d = usage.get("input_tokens_details")
        if d is not None:
            cached = _count(_obj(d, u + ".input_tokens_details").get("cached_tokens"),
                            u + ".input_tokens_details.cached_tokens")
        d = usage.get("output_tokens_details")
        if d is not None:
            reasoning = _count(_obj(d, u + ".output_tokens_details").get("reasoning_tokens"),
                               u + ".output_tokens_details.reasoning_tokens")
    return rid, finish, prompt, completion, cached, reasoning


def _store(tracker: OutputTracker, t: float, rid: str | None, finish: str, prompt: int | None,
           completion: int | None, cached: int | None, reasoning: int | None) -> None:
    tracker.finish_reason, tracker.finish_t = finish, t
    if rid is not None and tracker.response_id is None:
        tracker.response_id = rid
    if prompt is not None:
        tracker.prompt_tokens = prompt
    if completion is not None:
        tracker.completion_tokens = completion
    if cached is not None:
        tracker.cached_tokens, tracker.cached_source = cached, CACHED_SOURCE
    if reasoning is not None:
        tracker.reasoning_tokens = reasoning


def _output_texts(output: object) -> list[str]:
    """The answer's text pieces from a Response's ``output`` items (other item types are not read)."""
    texts: list[str] = []
    if output is None:
        return texts
    if output.__class__ is not list:
        raise _Wrong("output", output, "an array")
    for i, item in enumerate(output):
        if _obj(item, f"output[{i}]").get("type") != "message":
            continue
        parts = item.get("content")
        if parts is None:
            continue
        if parts.__class__ is not list:
            raise _Wrong(f"output[{i}].content", parts, "an array")
        for j, part in enumerate(parts):
            ptype = _obj(part, f"output[{i}].content[{j}]").get("type")
            key = "text" if ptype == "output_text" else "refusal" if ptype == "refusal" else None
            if key is not None and (s := _str(part.get(key), f"output[{i}].content[{j}].{key}")):
                texts.append(s)
    return texts


def _server_error(where: str, err: object) -> StreamProtocolError:
    return server_error(where, err, "code")
