"""Anthropic Messages API (``POST /v1/messages``): request validation and the event stream. Pure: no I/O.

Request: the ``anthropic-version`` header (any value; missing → 400), ``x-api-key`` (accepted, not
checked), ``model``, ``max_tokens`` (required), ``messages`` (roles user/assistant; content a
string or blocks: ``text``, ``tool_use``, ``tool_result``, ``image`` (base64 sources, counted as
``images.py`` says; a ``url`` or ``file`` source or an unreadable image is a 400); ``document``, ``thinking`` and
``redacted_thinking`` blocks are accepted and not counted), ``system`` (string or text blocks),
``stream``, ``thinking: {type: "enabled", budget_tokens}`` (≥ 1024 and < ``max_tokens``, as the
reference requires), ``tools`` (``{name, description, input_schema}``), ``tool_choice`` (``auto``,
``any``, ``tool`` + ``name``, ``none``), and the simulator's ``ignore_eos``. Errors are Anthropic's
``{"type": "error", "error": {"type": "invalid_request_error", "message": ...}}``.

Prompt tokens as chat (``openai.chat_prompt``): ``system`` a leading message, tools one more,
each message's text (a ``tool_use`` counts its name and JSON input, a ``tool_result`` its content).
``usage.input_tokens`` is the *uncached* part, ``cache_read_input_tokens`` the prefix-cache hits,
``cache_creation_input_tokens`` 0 (the simulator's cache is automatic, nothing is written on request).

Thinking: only with ``thinking.type == "enabled"``: R = min(``budget_tokens``, a ``--reasoning-tokens``
draw), or ``budget_tokens`` when that flag is 0. Thinking tokens are output tokens (they count in
``output_tokens`` and against ``max_tokens``).

Stream (``event: <type>`` + ``data: <compact JSON with that type>``), sent with the first emission:
``message_start`` (``message`` with ``content: []``, ``usage: {input_tokens, cache_creation_input_tokens,
cache_read_input_tokens, output_tokens: 1}``), then per block ``content_block_start`` (index 0, 1…:
``{"type": "thinking", "thinking": ""}``, ``{"type": "text", "text": ""}`` or ``{"type": "tool_use", id,
name, "input": {}}`` — the tool's name token), one ``content_block_delta`` per emission
(``thinking_delta``, ``text_delta``, ``input_json_delta``; a thinking block ends with a
``signature_delta``), ``content_block_stop``; last ``message_delta`` (``delta: {stop_reason:
end_turn | max_tokens | tool_use, stop_sequence: null}``, ``usage: {output_tokens}``) and
``message_stop``. ``ping`` follows the first ``content_block_start`` and every 100th emission. A
mid-stream failure is an ``error`` event (``overloaded_error``). Non-streaming: the message object.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
from typing import Any

from harness.sim.images import DEFAULT_PATCH_PX, ImageError, ImageInfo, read_anthropic
from harness.sim.openai import (
    ApiError,
    GenRequest,
    OutputPolicy,
    Tools,
    chat_prompt,
    finish_request,
    fit_cap,
    load_body,
    natural_length,
    opt_bool,
    opt_int,
)
from harness.sim.plan import Behavior, Segment, pick_tool, plan_output
from harness.sim.text import plain_text, segment_payload, tool_arguments

__all__ = ["AnthropicError", "MessagesWriter", "parse_messages"]

_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 405: "invalid_request_error", 413: "request_too_large",
                429: "rate_limit_error", 500: "api_error", 503: "overloaded_error", 529: "overloaded_error"}
_STOP = {"length": "max_tokens", "stop": "end_turn", "tool_calls": "tool_use"}
PING_EVERY = 100
"""Emissions between two ``ping`` events (one also follows the first ``content_block_start``)."""


class AnthropicError(ApiError):
    """A refused Messages request, rendered in Anthropic's error shape."""

    def render(self) -> bytes:
        kind = _ERROR_TYPES.get(self.status, "api_error" if self.status >= 500 else "invalid_request_error")
        return json.dumps({"type": "error", "error": {"type": kind, "message": self.message}},
                          separators=(",", ":")).encode()


def _block_text(block: object, where: str, images: list[ImageInfo] | None = None,
                patch_px: int = DEFAULT_PATCH_PX) -> str:
    """A block's text; an image block (in ``content`` or a ``tool_result``'s), measured, goes to ``images``."""
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise AnthropicError(400, f"{where} must be an object with a 'type'")
    kind = block["type"]
    if kind == "text":
        if not isinstance(block.get("text"), str):
            raise AnthropicError(400, f"{where}.text: Field required (a string)")
        return block["text"]
    if kind == "tool_use":
        return f"{block.get('name', '')} {json.dumps(block.get('input', {}))}"
    if kind == "tool_result":
        content = block.get("content", "")
        if isinstance(content, list):
            return " ".join(_block_text(b, f"{where}.content[{i}]", images, patch_px) for i, b in enumerate(content))
        return content if isinstance(content, str) else json.dumps(content)
    if kind == "image" and images is not None:
        try:
            images.append(read_anthropic(block, patch_px))
        except ImageError as exc:
            raise AnthropicError(400, f"{where}: {exc}") from None
    if kind in ("image", "document", "thinking", "redacted_thinking"):
        return ""
    raise AnthropicError(400, f"{where}.type: {kind!r} is not served here; use text, tool_use, tool_result, image, "
                              f"document, thinking or redacted_thinking")


def _text(content: object, where: str, images: list[ImageInfo] | None = None,
          patch_px: int = DEFAULT_PATCH_PX) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(t for i, b in enumerate(content) if (t := _block_text(b, f"{where}[{i}]", images, patch_px)))
    raise AnthropicError(400, f"{where}: Input should be a string or a list of content blocks")


def _tools(body: dict) -> Tools:
    tools, choice = body.get("tools"), body.get("tool_choice")
    if not tools:
        return Tools([], none=True)
    if not isinstance(tools, list):
        raise AnthropicError(400, "tools: Input should be a list")
    names = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            raise AnthropicError(400, f"tools.{i}.name: Field required")
        if tool.get("type") not in (None, "custom"):
            raise AnthropicError(400, f"tools.{i}.type: server tool {tool['type']!r} is not served by the simulator")
        names.append(tool["name"])
    out = Tools(names, text=json.dumps(tools))
    if choice is None:
        return out
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind == "none":
        out.none = True
    elif kind == "any":
        out.forced = names[0]
    elif kind == "tool":
        if choice.get("name") not in names:
            raise AnthropicError(400, f"tool_choice.name: {choice.get('name')!r} is not among the tools "
                                      f"({', '.join(names)})")
        out.forced = choice["name"]
    elif kind != "auto":
        raise AnthropicError(400, "tool_choice.type: Input should be 'auto', 'any', 'tool' or 'none'")
    return out


def _thinking(body: dict, cap: int) -> int | None:
    """The thinking budget when thinking is enabled (else None), checked as the reference requires."""
    thinking = body.get("thinking")
    if thinking is None:
        return None
    if not isinstance(thinking, dict) or thinking.get("type") not in ("enabled", "disabled"):
        raise AnthropicError(400, "thinking.type: Input should be 'enabled' or 'disabled'")
    if thinking["type"] == "disabled":
        return None
    budget = thinking.get("budget_tokens")
    if not isinstance(budget, int) or isinstance(budget, bool) or budget < 1024:
        raise AnthropicError(400, f"thinking.enabled.budget_tokens: Input should be an integer >= 1024, got {budget!r}")
    if budget >= cap:
        raise AnthropicError(400, f"`max_tokens` must be greater than `thinking.budget_tokens` ({budget}), got {cap}")
    return budget


def parse_messages(raw: bytes, *, headers: dict[str, str], models: list[str], max_model_len: int,
                   policy: OutputPolicy, rng: random.Random, block_size: int | None = None,
                   behavior: Behavior | None = None) -> GenRequest:
    """Validate one Messages request; raise ``AnthropicError`` naming the bad field."""
    try:
        return _parse(raw, headers, models, max_model_len, policy, rng, block_size, behavior or Behavior())
    except AnthropicError:
        raise
    except ApiError as err:  # a shared helper's complaint, in Anthropic's shape
        raise AnthropicError(err.status, err.message, param=err.param) from None


def _parse(raw: bytes, headers: dict[str, str], models: list[str], max_model_len: int, policy: OutputPolicy,
           rng: random.Random, block_size: int | None, behavior: Behavior) -> GenRequest:
    if not headers.get("anthropic-version"):
        raise AnthropicError(400, "anthropic-version: header is required")
    body = load_body(raw, models, AnthropicError)
    cap = opt_int(body, "max_tokens", 1)
    if cap is None:
        raise AnthropicError(400, "max_tokens: Field required")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise AnthropicError(400, "messages: Field required (a non-empty list)")
    texts: list[tuple[str, str]] = []
    images: list[list[ImageInfo]] = []  # one list per entry of texts
    system = body.get("system")
    if system is not None:
        texts.append(("system", _text(system, "system")))
        images.append([])
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or msg.get("role") not in ("user", "assistant"):
            raise AnthropicError(400, f"messages.{i}.role: Input should be 'user' or 'assistant'")
        images.append([])
        texts.append((msg["role"], _text(msg.get("content"), f"messages.{i}.content", images[-1],
                                         behavior.image_patch_px)))
    tools = _tools(body)
    pictures: list[list] | None = ([[]] if tools.text else []) + images if any(images) else None
    prompt = chat_prompt([("tools", tools.text), *texts] if tools.text else texts, policy.tokens_per_word,
                         block_size is not None, pictures)
    prompt.messages = texts
    stream = opt_bool(body, "stream")
    ignore_eos = opt_bool(body, "ignore_eos")
    cap = fit_cap(prompt.tokens, cap, max_model_len, "messages", AnthropicError)
    budget = _thinking(body, cap)
    natural = natural_length(policy, rng, ignore_eos)
    reasoning = 0
    if budget is not None:
        reasoning = budget if behavior.reasoning.off else min(budget, behavior.reasoning.draw(rng))
    tool = pick_tool(tools.names, tools.forced, tools.none, behavior.tool_call_p, rng)
    plan = plan_output(cap=cap, ignore_eos=ignore_eos, min_tokens=0, natural=natural, reasoning=reasoning, tool=tool)
    gen = GenRequest("messages", body["model"], stream, False, prompt.tokens, 0, "", messages=texts, plan=plan,
                     images=prompt.images)
    return finish_request(gen, prompt, block_size)


class MessagesWriter:
    """The events of one Messages request (the server's writer interface, see ``server.py``)."""

    def __init__(self, gen: GenRequest, request_id: str, created: int) -> None:
        self.gen, self.plan, self.id = gen, gen.plan, request_id
        self.tool_id = "toolu_" + request_id.split("_", 1)[-1][:24]
        self.signature = base64.b64encode(hashlib.sha256(request_id.encode()).digest() * 2).decode()
        self.block = {"reasoning": 0, "content": int(self.plan.reasoning_tokens > 0),
                      "tool": int(self.plan.reasoning_tokens > 0)}
        self._emissions = 0
        self._open: str | None = None
        self._delta_head = {p: (f'event: content_block_delta\ndata: {{"type":"content_block_delta","index":'
                                f'{self.block[p]},"delta":{{"type":"{t}","{k}":').encode()
                            for p, (t, k) in {"reasoning": ("thinking_delta", "thinking"),
                                              "content": ("text_delta", "text"),
                                              "tool": ("input_json_delta", "partial_json")}.items()}

    @staticmethod
    def _event(data: dict) -> bytes:
        return f"event: {data['type']}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()

    def _usage(self, cached: int | None, output: int) -> dict:
        return {"input_tokens": self.gen.prompt_tokens - (cached or 0), "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": cached or 0, "output_tokens": output}

    def _start(self, phase: str) -> list[bytes]:
        if phase == "reasoning":
            block: dict = {"type": "thinking", "thinking": ""}
        elif phase == "content":
            block = {"type": "text", "text": ""}
        else:
            block = {"type": "tool_use", "id": self.tool_id, "name": self.plan.tool, "input": {}}
        out = [self._event({"type": "content_block_start", "index": self.block[phase], "content_block": block})]
        if self._open is None:
            out.append(self._event({"type": "ping"}))
        self._open = phase
        return out

    def _stop(self, phase: str) -> list[bytes]:
        out = []
        if phase == "reasoning":
            out.append(self._event({"type": "content_block_delta", "index": self.block[phase],
                                    "delta": {"type": "signature_delta", "signature": self.signature}}))
        self._open = "closed"
        return [*out, self._event({"type": "content_block_stop", "index": self.block[phase]})]

    def _delta(self, phase: str, text_json: bytes) -> bytes:
        return self._delta_head[phase] + text_json + b"}}\n\n"

    def _segment(self, seg: Segment) -> list[bytes]:
        out = self._start(seg.phase) if seg.first == 0 else []
        payload = segment_payload(seg.phase, seg.first, seg.count, self.plan.args_planned)
        if payload is not None:
            out.append(self._delta(seg.phase, payload))
        if seg.phase == "reasoning" and seg.first + seg.count == self.plan.reasoning_tokens:
            out += self._stop("reasoning")
        return out

    # -- the writer interface ---------------------------------------------------------------
    def opening(self) -> list[bytes]:
        return []

    def head(self, cached: int | None) -> list[bytes]:
        """``message_start``: sent with the first emission, once admission knows the cached tokens."""
        message: dict[str, Any] = {
            "id": self.id, "type": "message", "role": "assistant", "model": self.gen.model, "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": self._usage(cached, 1)}
        return [self._event({"type": "message_start", "message": message})]

    def emit(self, index: int, count: int, finished: bool, cached: int | None) -> list[bytes]:
        out: list[bytes] = []
        for seg in self.plan.segments(index, count):
            out += self._segment(seg)
        self._emissions += 1
        if self._emissions % PING_EVERY == 0:
            out.append(self._event({"type": "ping"}))
        if finished:
            if self._open not in (None, "closed"):
                out += self._stop(self._open)
            out.append(self._event({"type": "message_delta", "delta": {"stop_reason": _STOP[self.plan.finish],
                                                                       "stop_sequence": None},
                                    "usage": {"output_tokens": self.plan.output_tokens}}))
            out.append(self._event({"type": "message_stop"}))
        return out

    def malformed(self) -> bytes:
        return b'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0, "delta": {"text": "\n\n'

    def long_line(self, size: int) -> bytes:
        phase = self._open if self._open in self.block else "content"
        return self._delta(phase, json.dumps("x" * size).encode())

    def failure(self, message: str) -> list[bytes]:
        return [self._event({"type": "error", "error": {"type": "overloaded_error", "message": message}})]

    def body(self, created: int, cached: int | None) -> bytes:
        plan = self.plan
        content: list[dict] = []
        if plan.reasoning_tokens:
            content.append({"type": "thinking", "thinking": plain_text(plan.reasoning_tokens),
                            "signature": self.signature})
        if plan.tool is not None:
            arguments = tool_arguments(plan.answer_tokens - 1, plan.args_planned)
            try:
                given = json.loads(arguments)
            except ValueError:  # cut by max_tokens: the partial JSON is lost, as a client would lose it
                given = {}
            content.append({"type": "tool_use", "id": self.tool_id, "name": plan.tool, "input": given})
        elif plan.answer_tokens:
            content.append({"type": "text", "text": plain_text(plan.answer_tokens)})
        return json.dumps({"id": self.id, "type": "message", "role": "assistant", "model": self.gen.model,
                           "content": content, "stop_reason": _STOP[plan.finish], "stop_sequence": None,
                           "usage": self._usage(cached, plan.output_tokens)}, separators=(",", ":")).encode()
