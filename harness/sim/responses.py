"""OpenAI Responses API (``POST /v1/responses``): request validation and the typed event stream. Pure: no I/O.

Request: ``input`` (a string, or a list of items: messages ``{role, content}`` with a string or
``input_text``/``output_text`` parts, ``function_call`` and ``function_call_output`` items;
``reasoning`` items are not counted), ``instructions``, ``max_output_tokens``, ``stream``, ``tools``
(flat: ``{"type": "function", "name": ...}``), ``tool_choice``, ``reasoning: {effort, summary}``, and
the simulator's ``ignore_eos``. ``previous_response_id`` is refused (nothing is stored).
Prompt tokens as chat (``openai.chat_prompt``): ``instructions`` as a leading system message, each
input item as a message (a string ``input`` is one user message), tools as a leading message.

Stream (``event: <type>`` + ``data: <json>`` whose ``type`` matches; every event has a
``sequence_number`` from 0; no ``[DONE]``):

- at once: ``response.created``, ``response.in_progress`` (the response, ``status: "in_progress"``);
- reasoning (output item 0 when there is any): ``response.output_item.added`` (``type: "reasoning"``),
  then, when the request asks for a summary (``reasoning.summary``), ``response.reasoning_summary_part.added``,
  one ``response.reasoning_summary_text.delta`` per emission, ``…text.done``, ``…part.done``; otherwise
  the raw reasoning as open-weight servers stream it: ``response.content_part.added`` (``reasoning_text``),
  ``response.reasoning_text.delta`` per emission, ``response.reasoning_text.done``, ``response.content_part.done``;
  then ``response.output_item.done``;
- a text answer: ``response.output_item.added`` (``message``), ``response.content_part.added``
  (``output_text``), one ``response.output_text.delta`` per emission, ``response.output_text.done``,
  ``response.content_part.done``, ``response.output_item.done``;
- a tool call: ``response.output_item.added`` (``function_call`` with ``name``, ``call_id``; its
  token is the name), ``response.function_call_arguments.delta`` per emission, ``…arguments.done``,
  ``response.output_item.done``;
- last: ``response.completed``, or ``response.incomplete`` (``incomplete_details.reason:
  "max_output_tokens"``) when the cap cut the output, with ``usage``: ``input_tokens``,
  ``input_tokens_details.cached_tokens``, ``output_tokens``, ``output_tokens_details.reasoning_tokens``,
  ``total_tokens``. A mid-stream failure is an ``error`` event, then ``response.failed``.

Non-streaming: the final response object.
"""

from __future__ import annotations

import json
import random

from harness.sim.openai import (
    ApiError,
    GenRequest,
    OutputPolicy,
    Tools,
    chat_prompt,
    chat_tools,
    check_stream_options,
    finish_request,
    fit_cap,
    load_body,
    natural_length,
    opt_bool,
    opt_int,
)
from harness.sim.plan import Behavior, Segment, pick_tool, plan_output
from harness.sim.text import plain_text, segment_payload, tool_arguments

__all__ = ["ResponsesWriter", "parse_responses"]

_ROLES = ("user", "assistant", "system", "developer")
_SUMMARIES = ("auto", "concise", "detailed")


def _item_text(item: object, i: int) -> tuple[str, str] | None:
    where = f"input[{i}]"
    if not isinstance(item, dict):
        raise ApiError(400, f"{where} must be an object", param="input")
    kind = item.get("type", "message")
    if kind == "message":
        role = item.get("role")
        if role not in _ROLES:
            raise ApiError(400, f"{where}.role must be one of {', '.join(_ROLES)}, got {role!r}", param="input")
        content = item.get("content")
        if isinstance(content, str):
            return role, content
        if not isinstance(content, list):
            raise ApiError(400, f"{where}.content must be a string or a list of content parts", param="input")
        parts = []
        for j, part in enumerate(content):
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise ApiError(400, f"{where}.content[{j}] must be an object with a 'type'", param="input")
            if part["type"] in ("input_text", "output_text"):
                if not isinstance(part.get("text"), str):
                    raise ApiError(400, f"{where}.content[{j}].text must be a string", param="input")
                parts.append(part["text"])
        return role, " ".join(parts)
    if kind == "function_call":
        return "assistant", f"{item.get('name', '')} {item.get('arguments', '')}"
    if kind == "function_call_output":
        output = item.get("output")
        return "tool", output if isinstance(output, str) else json.dumps(output)
    if kind == "reasoning":
        return None
    raise ApiError(400, f"{where}.type {kind!r} is not served here; use message, function_call, "
                        f"function_call_output or reasoning", param="input")


def _flat_choice_name(choice: object, nested: bool) -> str | None:
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return choice["name"]
    return None


def parse_responses(raw: bytes, *, models: list[str], max_model_len: int, policy: OutputPolicy, rng: random.Random,
                    block_size: int | None = None, behavior: Behavior | None = None) -> GenRequest:
    """Validate one Responses request; raise ``ApiError`` naming the bad field."""
    behavior = behavior or Behavior()
    body = load_body(raw, models)
    if body.get("previous_response_id") is not None:
        raise ApiError(400, "previous_response_id is not supported: the simulator stores no responses; send the "
                            "whole conversation in 'input'", param="previous_response_id")
    stream = opt_bool(body, "stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise ApiError(400, "'stream_options' must be an object", param="stream_options")
    if behavior.strict_stream_options == "on":
        check_stream_options(options)
    texts: list[tuple[str, str]] = []
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise ApiError(400, "'instructions' must be a string", param="instructions")
        texts.append(("system", instructions))
    given = body.get("input")
    if isinstance(given, str):
        texts.append(("user", given))
    elif isinstance(given, list) and given:
        texts += [t for i, item in enumerate(given) if (t := _item_text(item, i)) is not None]
    else:
        raise ApiError(400, "'input' is required: a string or a non-empty list of items", param="input")
    reasoning_opt = body.get("reasoning") or {}
    if not isinstance(reasoning_opt, dict):
        raise ApiError(400, "'reasoning' must be an object", param="reasoning")
    summary = reasoning_opt.get("summary")
    if summary is not None and summary not in _SUMMARIES:
        raise ApiError(400, f"'reasoning.summary' must be one of {', '.join(_SUMMARIES)}, got {summary!r}",
                       param="reasoning.summary")
    tools: Tools = chat_tools(body, nested=False, name_of_choice=_flat_choice_name)
    prompt_texts = [("tools", tools.text), *texts] if tools.text else texts
    prompt = chat_prompt(prompt_texts, policy.tokens_per_word, block_size is not None)
    prompt.messages = texts
    ignore_eos = opt_bool(body, "ignore_eos")
    cap = fit_cap(prompt.tokens, opt_int(body, "max_output_tokens", 1), max_model_len, "input")
    natural = natural_length(policy, rng, ignore_eos)
    reasoning = behavior.reasoning.draw(rng)
    tool = pick_tool(tools.names, tools.forced, tools.none, behavior.tool_call_p, rng)
    plan = plan_output(cap=cap, ignore_eos=ignore_eos, min_tokens=0, natural=natural, reasoning=reasoning, tool=tool)
    gen = GenRequest("responses", body["model"], stream, False, prompt.tokens, 0, "", messages=texts, plan=plan,
                     options={"instructions": instructions, "max_output_tokens": body.get("max_output_tokens"),
                              "tools": body.get("tools") or [], "tool_choice": body.get("tool_choice", "auto"),
                              "reasoning": {"effort": reasoning_opt.get("effort"), "summary": summary},
                              "metadata": body.get("metadata") or {}, "store": body.get("store", True)})
    return finish_request(gen, prompt, block_size)


class ResponsesWriter:
    """The events of one Responses request (the server's writer interface, see ``server.py``)."""

    def __init__(self, gen: GenRequest, request_id: str, created: int) -> None:
        self.gen, self.plan, self.id, self.created = gen, gen.plan, request_id, created
        tail = request_id.split("_", 1)[-1]
        self.ids = {"reasoning": "rs_" + tail, "content": "msg_" + tail, "tool": "fc_" + tail}
        self.call_id = "call_" + tail[:24]
        self.index = {"reasoning": 0, "content": int(self.plan.reasoning_tokens > 0),
                      "tool": int(self.plan.reasoning_tokens > 0)}
        self.summary = gen.options.get("reasoning", {}).get("summary") is not None
        self.seq = 0
        self._begun: list[str] = []
        delta_type = {"reasoning": "response.reasoning_summary_text.delta" if self.summary else
                      "response.reasoning_text.delta", "content": "response.output_text.delta",
                      "tool": "response.function_call_arguments.delta"}
        where = {"reasoning": ',"summary_index":0' if self.summary else ',"content_index":0',
                 "content": ',"content_index":0', "tool": ""}
        self._delta_head = {p: (f'event: {t}\ndata: {{"type":"{t}","item_id":"{self.ids[p]}","output_index":'
                                f'{self.index[p]}{where[p]},"delta":').encode() for p, t in delta_type.items()}
        self._delta_tail = {"reasoning": b',"sequence_number":', "content": b',"logprobs":[],"sequence_number":',
                            "tool": b',"sequence_number":'}

    # -- events -----------------------------------------------------------------------------
    def _event(self, kind: str, **fields: object) -> bytes:
        data = json.dumps({"type": kind, **fields, "sequence_number": self.seq}, separators=(",", ":"))
        self.seq += 1
        return f"event: {kind}\ndata: {data}\n\n".encode()

    def _delta(self, phase: str, text_json: bytes) -> bytes:
        out = self._delta_head[phase] + text_json + self._delta_tail[phase] + b"%d}\n\n" % self.seq
        self.seq += 1
        return out

    def response(self, status: str, cached: int | None = None) -> dict:
        """The response object; only a completed or incomplete one has output and usage."""
        plan, opts, done = self.plan, self.gen.options, status in ("completed", "incomplete")
        usage = None
        if done:
            usage = {"input_tokens": self.gen.prompt_tokens, "input_tokens_details": {"cached_tokens": cached or 0},
                     "output_tokens": plan.output_tokens,
                     "output_tokens_details": {"reasoning_tokens": plan.reasoning_tokens},
                     "total_tokens": self.gen.prompt_tokens + plan.output_tokens}
        return {"id": self.id, "object": "response", "created_at": self.created, "status": status, "error": None,
                "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
                "instructions": opts.get("instructions"), "max_output_tokens": opts.get("max_output_tokens"),
                "model": self.gen.model, "output": self._output() if done else [], "parallel_tool_calls": True,
                "previous_response_id": None, "reasoning": opts.get("reasoning"), "store": opts.get("store"),
                "temperature": 1.0, "text": {"format": {"type": "text"}}, "tool_choice": opts.get("tool_choice"),
                "tools": opts.get("tools"), "top_p": 1.0, "truncation": "disabled", "usage": usage,
                "metadata": opts.get("metadata")}

    def _final_status(self) -> str:
        return "incomplete" if self.plan.finish == "length" else "completed"

    def _item(self, phase: str, done: bool) -> dict:
        plan = self.plan
        if phase == "reasoning":
            text = plain_text(plan.reasoning_tokens)
            item: dict = {"id": self.ids[phase], "type": "reasoning", "summary": []}
            if done and self.summary:
                item["summary"] = [{"type": "summary_text", "text": text}]
            elif not self.summary:
                item["content"] = [{"type": "reasoning_text", "text": text}] if done else []
            return item
        status = ("incomplete" if plan.finish == "length" else "completed") if done else "in_progress"
        if phase == "content":
            content = [self._text_part(plain_text(plan.answer_tokens))] if done else []
            return {"id": self.ids[phase], "type": "message", "status": status, "content": content, "role": "assistant"}
        args = tool_arguments(plan.answer_tokens - 1, plan.args_planned) if done else ""
        return {"id": self.ids[phase], "type": "function_call", "status": status, "arguments": args,
                "call_id": self.call_id, "name": plan.tool}

    @staticmethod
    def _text_part(text: str) -> dict:
        return {"type": "output_text", "annotations": [], "logprobs": [], "text": text}

    def _output(self) -> list[dict]:
        plan = self.plan
        out = [self._item("reasoning", True)] if plan.reasoning_tokens else []
        if plan.answer_tokens:
            out.append(self._item("tool" if plan.tool is not None else "content", True))
        return out

    def _begin(self, phase: str) -> list[bytes]:
        self._begun.append(phase)
        item_id, index = self.ids[phase], self.index[phase]
        out = [self._event("response.output_item.added", output_index=index, item=self._item(phase, False))]
        if phase == "reasoning" and self.summary:
            out.append(self._event("response.reasoning_summary_part.added", item_id=item_id, output_index=index,
                                   summary_index=0, part={"type": "summary_text", "text": ""}))
        elif phase == "reasoning":
            out.append(self._event("response.content_part.added", item_id=item_id, output_index=index,
                                   content_index=0, part={"type": "reasoning_text", "text": ""}))
        elif phase == "content":
            out.append(self._event("response.content_part.added", item_id=item_id, output_index=index,
                                   content_index=0, part=self._text_part("")))
        return out

    def _end(self, phase: str) -> list[bytes]:
        item_id, index, plan = self.ids[phase], self.index[phase], self.plan
        at = {"item_id": item_id, "output_index": index}
        if phase == "reasoning":
            text = plain_text(plan.reasoning_tokens)
            if self.summary:
                out = [self._event("response.reasoning_summary_text.done", **at, summary_index=0, text=text),
                       self._event("response.reasoning_summary_part.done", **at, summary_index=0,
                                   part={"type": "summary_text", "text": text})]
            else:
                out = [self._event("response.reasoning_text.done", **at, content_index=0, text=text),
                       self._event("response.content_part.done", **at, content_index=0,
                                   part={"type": "reasoning_text", "text": text})]
        elif phase == "content":
            text = plain_text(plan.answer_tokens)
            out = [self._event("response.output_text.done", **at, content_index=0, text=text, logprobs=[]),
                   self._event("response.content_part.done", **at, content_index=0, part=self._text_part(text))]
        else:
            out = [self._event("response.function_call_arguments.done", **at,
                               arguments=tool_arguments(plan.answer_tokens - 1, plan.args_planned))]
        return [*out, self._event("response.output_item.done", output_index=index, item=self._item(phase, True))]

    def _segment(self, seg: Segment) -> list[bytes]:
        out = self._begin(seg.phase) if seg.first == 0 else []
        payload = segment_payload(seg.phase, seg.first, seg.count, self.plan.args_planned)
        if payload is not None:
            out.append(self._delta(seg.phase, payload))
        if seg.phase == "reasoning" and seg.first + seg.count == self.plan.reasoning_tokens:
            out += self._end("reasoning")
        return out

    # -- the writer interface ---------------------------------------------------------------
    def opening(self) -> list[bytes]:
        return [self._event("response.created", response=self.response("in_progress")),
                self._event("response.in_progress", response=self.response("in_progress"))]

    def head(self, cached: int | None) -> list[bytes]:
        return []

    def emit(self, index: int, count: int, finished: bool, cached: int | None) -> list[bytes]:
        out: list[bytes] = []
        for seg in self.plan.segments(index, count):
            out += self._segment(seg)
        if finished:
            if self._begun and self._begun[-1] != "reasoning":
                out += self._end(self._begun[-1])
            status = self._final_status()
            out.append(self._event(f"response.{status}", response=self.response(status, cached)))
        return out

    def malformed(self) -> bytes:
        return b'event: response.output_text.delta\ndata: {"type": "response.output_text.delta", "delta": "\n\n'

    def long_line(self, size: int) -> bytes:
        return self._delta("content", json.dumps("x" * size).encode())

    def failure(self, message: str) -> list[bytes]:
        failed = self.response("failed")
        failed["error"] = {"code": "server_error", "message": message}
        return [self._event("error", code="server_error", message=message, param=None),
                self._event("response.failed", response=failed)]

    def body(self, created: int, cached: int | None) -> bytes:
        return json.dumps(self.response(self._final_status(), cached), separators=(",", ":")).encode()
