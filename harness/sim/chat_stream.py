"""Chat and completions response bytes, byte-for-byte as vLLM's OpenAI server writes them. Pure: no I/O.

Chat stream: a role chunk (``delta: {role: "assistant", content: ""}``) with the first emission, then one
chunk per emission, each in one phase (an emission crossing the reasoning/answer boundary is sent as two
chunks at once, so every chunk's tokens are of one kind):

- reasoning: ``delta: {"reasoning_content": "..."}`` (or ``"reasoning"``, ``--reasoning-field``);
- text: ``delta: {"content": "..."}``;
- tool call: first ``delta: {"tool_calls": [{"id", "type": "function", "index": 0, "function": {"name",
  "arguments": ""}}]}`` (the name token), then ``{"tool_calls": [{"index": 0, "function": {"arguments":
  "<fragment>"}}]}`` per token (vLLM's field order).

The last chunk carries ``finish_reason`` (``"length"``, ``"stop"`` or ``"tool_calls"``) and
``stop_reason: null``; then, when asked, a usage chunk with ``choices: []``; then ``data: [DONE]``.
With ``stream_options.continuous_usage_stats`` (and ``include_usage``, as vLLM requires) every chunk,
the role chunk too, ends with ``"usage":{"prompt_tokens":P,"total_tokens":P+C,"completion_tokens":C}``,
C the tokens sent so far. Completions: no role chunk, ``text`` instead of a delta, reasoning as raw
``<think>…</think>`` text (``text.py``), ``stop_reason: null`` in every choice.

With ``--timings on`` the chunk with ``finish_reason`` (and a non-streaming body) ends with llama.cpp
server's per-request ``"timings"`` object (``llama_timings``; ggml-org/llama.cpp ``tools/server``:
``result_timings::to_json`` and ``server_slot::get_timings``), after any continuous usage, as llama.cpp
appends it to its last chunk.
"""

from __future__ import annotations

import json

from harness.sim.plan import GenRequest, Plan, Segment
from harness.sim.text import json_answer, plain_text, think_text, token_text, tool_arguments

__all__ = ["ChatWriter", "StreamFormat", "full_response", "llama_timings"]


def llama_timings(*, cache_n: int, prompt_n: int, prompt_ms: float, predicted_n: int, predicted_ms: float) -> dict:
    """llama.cpp's ``timings``, its field order: ``prompt_n`` prompt tokens processed (not from the cache), over
    ``prompt_ms``; ``predicted_n`` tokens generated, over ``predicted_ms`` (first token to last); ``cache_n`` prompt
    tokens from the cache. Rates divide as llama.cpp does; where it would divide by zero (NaN or inf, which its
    JSON library writes as null), null."""
    def ratio(a: float, b: float) -> float | None:
        return a / b if b else None

    return {"cache_n": cache_n, "prompt_n": prompt_n, "prompt_ms": prompt_ms,
            "prompt_per_token_ms": ratio(prompt_ms, prompt_n), "prompt_per_second": ratio(1e3 * prompt_n, prompt_ms),
            "predicted_n": predicted_n, "predicted_ms": predicted_ms,
            "predicted_per_token_ms": ratio(predicted_ms, predicted_n),
            "predicted_per_second": ratio(1e3 * predicted_n, predicted_ms)}


class StreamFormat:
    """SSE chunk bytes of one chat or completions stream (see the module docstring)."""

    DONE = b"data: [DONE]\n\n"

    def __init__(self, kind: str, request_id: str, created: int, model: str) -> None:
        self.kind = kind
        head = (f'data: {{"id":"{request_id}","object":'
                f'"{"chat.completion.chunk" if kind == "chat" else "text_completion"}",'
                f'"created":{created},"model":{json.dumps(model)},"choices":').encode()
        self._head = head
        if kind == "chat":
            self._open = head + b'[{"index":0,"delta":{"content":'
            self._mid = b'},"logprobs":null,"finish_reason":'
        else:
            self._open = head + b'[{"index":0,"text":'
            self._mid = b',"logprobs":null,"finish_reason":'

    def role_chunk(self, usage: bytes | None = None) -> bytes:
        return self._head + b'[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,' \
                            b'"finish_reason":null}]' + (b'}\n\n' if usage is None else b',"usage":' + usage + b'}\n\n')

    def _tail(self, finish_reason: str | None, usage: bytes | None) -> bytes:
        if finish_reason is None:
            tail = b'null,"stop_reason":null}]' if self.kind != "chat" else b'null}]'
        else:
            tail = b'"' + finish_reason.encode() + b'","stop_reason":null}]'
        return tail + (b'}\n\n' if usage is None else b',"usage":' + usage + b'}\n\n')

    def token_chunk(self, text_json: bytes, finish_reason: str | None = None, usage: bytes | None = None) -> bytes:
        """A text chunk (chat ``content``, completions ``text``); ``usage`` is a continuous-usage object."""
        return self._open + text_json + self._mid + self._tail(finish_reason, usage)

    def delta_chunk(self, delta_json: bytes, finish_reason: str | None = None, usage: bytes | None = None) -> bytes:
        """A chat chunk with the delta object ``delta_json``."""
        return (self._head + b'[{"index":0,"delta":' + delta_json + b',"logprobs":null,"finish_reason":'
                + self._tail(finish_reason, usage))

    @staticmethod
    def running_usage(prompt_tokens: int, completion_tokens: int) -> bytes:
        """vLLM's continuous usage object (no details)."""
        return (f'{{"prompt_tokens":{prompt_tokens},"total_tokens":{prompt_tokens + completion_tokens},'
                f'"completion_tokens":{completion_tokens}}}').encode()

    def usage_chunk(self, prompt_tokens: int, completion_tokens: int, cached_tokens: int | None = None,
                    reasoning_tokens: int | None = None) -> bytes:
        """The usage chunk; ``prompt_tokens_details`` only when ``cached_tokens`` is given (prefix cache on),
        ``completion_tokens_details`` only with ``reasoning_tokens``."""
        details = "" if cached_tokens is None else f',"prompt_tokens_details":{{"cached_tokens":{cached_tokens}}}'
        if reasoning_tokens is not None:
            details += f',"completion_tokens_details":{{"reasoning_tokens":{reasoning_tokens}}}'
        return self._head + (f'[],"usage":{{"prompt_tokens":{prompt_tokens},"total_tokens":'
                             f'{prompt_tokens + completion_tokens},"completion_tokens":{completion_tokens}'
                             f'{details}}}}}\n\n').encode()


def full_response(kind: str, request_id: str, created: int, model: str, text: str | None, finish_reason: str,
                  prompt_tokens: int, completion_tokens: int, cached_tokens: int | None = None, *,
                  reasoning: str | None = None, reasoning_field: str = "reasoning_content",
                  tool_calls: list[dict] | None = None, reasoning_tokens: int | None = None,
                  timings: dict | None = None) -> bytes:
    """The non-streaming response body with ``usage`` (``prompt_tokens_details`` only with ``cached_tokens``,
    ``completion_tokens_details`` only with ``reasoning_tokens``), then ``timings`` when given; chat's message
    gets the reasoning field when ``reasoning`` is given and ``tool_calls`` when given."""
    if kind == "chat":
        message: dict = {"role": "assistant", "content": text}
        if reasoning is not None:
            message[reasoning_field] = reasoning
        if tool_calls is not None:
            message["tool_calls"] = tool_calls
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason,
                  "stop_reason": None}
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason, "stop_reason": None}
        obj = "text_completion"
    usage: dict = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + completion_tokens,
                   "completion_tokens": completion_tokens}
    if cached_tokens is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    if reasoning_tokens is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
    body = {"id": request_id, "object": obj, "created": created, "model": model, "choices": [choice], "usage": usage}
    if timings is not None:
        body["timings"] = timings
    return json.dumps(body, separators=(",", ":")).encode()


class ChatWriter:
    """The bytes of one chat or completions request, emission by emission (the server's writer interface:
    ``opening``, ``head``, ``emit``, ``malformed``, ``long_line``, ``failure``, ``body``)."""

    def __init__(self, gen: GenRequest, request_id: str, created: int) -> None:
        self.gen = gen
        self.plan: Plan = gen.plan
        self.id = request_id
        self.fmt = StreamFormat(gen.kind, request_id, created, gen.model)
        self._field = json.dumps(gen.reasoning_field).encode()
        self._running = gen.continuous_usage
        self._fast = self.plan.plain and not self._running
        self.changed_from: int | None = None
        """The answer changes from this token on (``Behavior.changed_answers_share``); None: it does not."""
        self.json_cut = False
        """A JSON answer that never closes (``Behavior.malformed_json_share``)."""
        self.timings: dict | None = None
        """llama.cpp's ``timings`` (``llama_timings``), which the server sets before the last emission (or
        the body) with ``--timings on``; None: left out."""

    def opening(self) -> list[bytes]:
        return []

    def head(self, cached: int | None) -> list[bytes]:
        """Bytes due before the first emission's tokens: chat's role chunk."""
        if self.gen.kind != "chat":
            return []
        return [self.fmt.role_chunk(self.fmt.running_usage(self.gen.prompt_tokens, 0) if self._running else None)]

    def emit(self, index: int, count: int, finished: bool, cached: int | None) -> list[bytes]:
        """The chunks of output tokens ``[index, index + count)``; after the last, usage and ``[DONE]``
        (``cached`` matters only then)."""
        plan, fmt = self.plan, self.fmt
        if self._fast:
            out = [fmt.token_chunk(self._text(index, count), plan.finish if finished else None)]
        else:
            out = []
            done = index
            segments = plan.segments(index, count)
            for k, seg in enumerate(segments):
                done += seg.count
                finish = plan.finish if finished and k == len(segments) - 1 else None
                usage = fmt.running_usage(self.gen.prompt_tokens, done) if self._running else None
                out.append(self._chunk(seg, finish, usage))
        if finished and self.timings is not None:  # into the finish chunk's object, before its "}\n\n"
            out[-1] = out[-1][:-3] + b',"timings":' + json.dumps(self.timings, separators=(",", ":")).encode() \
                + b'}\n\n'
        if finished:
            if self.gen.include_usage:
                out.append(fmt.usage_chunk(self.gen.prompt_tokens, plan.output_tokens, cached,
                                           plan.reasoning_tokens if self.gen.reasoning_usage else None))
            out.append(StreamFormat.DONE)
        return out

    def _text(self, index: int, count: int) -> bytes:
        """JSON string (quoted) of answer tokens ``[index, index + count)``: words, or a JSON answer's fragments."""
        if self.gen.json_answer:
            return json.dumps(json_answer(index, count, self.plan.answer_tokens, self.json_cut)).encode()
        return token_text(index, count, self.changed_from)

    def _plain(self, count: int) -> str:
        if self.gen.json_answer:
            return json_answer(0, count, count, self.json_cut)
        return plain_text(count, 0, self.changed_from)

    def _chunk(self, seg: Segment, finish: str | None, usage: bytes | None) -> bytes:
        fmt = self.fmt
        if seg.phase == "content":
            return fmt.token_chunk(self._text(seg.first, seg.count), finish, usage)
        if seg.phase == "reasoning":
            if self.gen.kind != "chat":
                text = json.dumps(think_text(seg.first, seg.count, self.plan.reasoning_tokens)).encode()
                return fmt.token_chunk(text, finish, usage)
            return fmt.delta_chunk(b'{' + self._field + b':' + token_text(seg.first, seg.count) + b'}', finish,
                                   usage)
        planned = self.plan.args_planned
        if seg.first == 0:
            args = json.dumps(tool_arguments(seg.count - 1, planned))
            delta = (f'{{"tool_calls":[{{"id":"{self.tool_call_id}","type":"function","index":0,"function":'
                     f'{{"name":{json.dumps(self.plan.tool)},"arguments":{args}}}}}]}}')
        else:
            args = json.dumps(tool_arguments(seg.count, planned, seg.first - 1))
            delta = f'{{"tool_calls":[{{"index":0,"function":{{"arguments":{args}}}}}]}}'
        return fmt.delta_chunk(delta.encode(), finish, usage)

    @property
    def tool_call_id(self) -> str:
        """vLLM's tool call id, derived from the request id: ``chatcmpl-tool-`` + 32 hex digits."""
        return "chatcmpl-tool-" + self.id.rsplit("-", 1)[-1][-32:]

    def malformed(self) -> bytes:
        return b'data: {"id": "' + self.id.encode() + b'", "choices": [{"delta": {"content": "\n\n'

    def long_line(self, size: int) -> bytes:
        return self.fmt.token_chunk(json.dumps("x" * size).encode())

    def failure(self, message: str) -> list[bytes]:
        """vLLM's mid-stream error chunk, then ``[DONE]``."""
        error = {"error": {"message": message, "type": "InternalServerError", "param": None, "code": 500}}
        return [b"data: " + json.dumps(error).encode() + b"\n\n", StreamFormat.DONE]

    def body(self, created: int, cached: int | None) -> bytes:
        """The non-streaming response."""
        g, plan = self.gen, self.plan
        r, a = plan.reasoning_tokens, plan.answer_tokens
        reasoning = None
        tool_calls = None
        if g.kind != "chat":
            text: str | None = think_text(0, r, r) + self._plain(a)
        else:
            text = self._plain(a)
            if r:
                reasoning = plain_text(r)
            if plan.tool is not None:
                text = None
                tool_calls = [{"id": self.tool_call_id, "type": "function", "function": {
                    "name": plan.tool, "arguments": tool_arguments(a - 1, plan.args_planned)}}]
        return full_response(g.kind, self.id, created, g.model, text, plan.finish, g.prompt_tokens,
                             plan.output_tokens, cached, reasoning=reasoning, reasoning_field=g.reasoning_field,
                             tool_calls=tool_calls, reasoning_tokens=r if g.reasoning_usage else None,
                             timings=self.timings)
