"""OpenAI request validation and vLLM-exact response bytes for the simulator. Pure: no I/O.

Prompt token rule (documented so clients can calibrate against ``usage.prompt_tokens``):

- completions: ``ceil(words × tokens_per_word)`` where words = whitespace-separated words of the
  prompt; a prompt given as a list of token ids counts one token per id.
- chat: the same per message content (text parts of a list content are joined), plus 4 tokens per
  message and 3 for the reply primer (the ChatML-style template overhead).

Output length: ``max_tokens`` (or ``max_completion_tokens``) caps it; with ``ignore_eos`` the
request generates exactly that many. Otherwise the "model" stops by itself after a natural length
drawn from a lognormal (``eos_median``, ``eos_sigma``; seeded), never below ``min_tokens``.
Without ``max_tokens`` the cap is the rest of the context window, as in vLLM.

Prefix cache: given ``block_size``, ``parse_request`` also returns the request's KV block keys (the
prompt's units as ``prefix.py`` defines them, then the planned output's words), and responses carry
``usage.prompt_tokens_details.cached_tokens`` when a cached-token count is passed in.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field

from harness.sim import prefix

__all__ = ["ApiError", "GenRequest", "OutputPolicy", "StreamFormat", "error_body", "full_response", "output_words",
           "parse_request", "plain_text", "token_text"]


class ApiError(Exception):
    """A request the server refuses; rendered in OpenAI's error shape with ``status``."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers or {}


_ERROR_TYPES = {400: "invalid_request_error", 404: "invalid_request_error", 405: "invalid_request_error",
                413: "invalid_request_error", 429: "rate_limit_error"}


def error_body(err: ApiError) -> bytes:
    kind = _ERROR_TYPES.get(err.status, "server_error" if err.status >= 500 else "invalid_request_error")
    return json.dumps({"error": {"message": err.message, "type": kind, "param": err.param,
                                 "code": err.code}}).encode()


@dataclass(frozen=True)
class OutputPolicy:
    """How the simulated model picks its natural output length when EOS is not ignored. Every field is a
    ``kneecap sim`` flag of the same name (dashes for underscores), documented in its ``help`` metadata."""

    eos_median: float = field(default=256.0, metadata={
        "help": "Median natural output length when ignore_eos is off (0: always generate max_tokens)."})
    eos_sigma: float = field(default=0.6, metadata={"help": "Lognormal sigma of that length."})
    tokens_per_word: float = field(default=1.0, metadata={"help": "Prompt tokens per whitespace-separated word."})


@dataclass
class GenRequest:
    kind: str
    """"chat" or "completions"."""
    model: str
    stream: bool
    include_usage: bool
    prompt_tokens: int
    output_tokens: int
    """Tokens the engine will generate for this request."""
    finish_reason: str
    """"length" when ``output_tokens`` reached the cap, "stop" when the model stopped by itself."""
    block_keys: list[int] = field(default_factory=list)
    """Prefix-cache key of each full KV block (prompt, then planned output); empty without ``block_size``."""
    messages: list[tuple[str, str]] | None = None
    """Chat: (role, content text) of each message, for the trace's message hashes; None for completions."""


_ROLES = {"system", "user", "assistant", "tool", "developer", "function"}


def _count(words: int, per_word: float) -> int:
    return math.ceil(words * per_word)


def _content_text(content: object, where: str) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        parts = []
        for i, part in enumerate(content):
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise ApiError(400, f"{where}[{i}] must be an object with a 'type'", param=where)
            if part["type"] == "text":
                if not isinstance(part.get("text"), str):
                    raise ApiError(400, f"{where}[{i}].text must be a string", param=where)
                parts.append(part["text"])
        return " ".join(parts)
    raise ApiError(400, f"{where} must be a string, a list of content parts, or null; got {type(content).__name__}",
                   param=where)


@dataclass
class _Prompt:
    tokens: int
    units: list | None
    """The prefix cache's units (``prefix.py``), when asked for."""
    messages: list[tuple[str, str]] | None = None


def _prompt(kind: str, body: dict, per_word: float, want_units: bool) -> _Prompt:
    if kind == "chat":
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ApiError(400, "'messages' is required and must be a non-empty list", param="messages")
        total = 3
        texts: list[tuple[str, str]] = []
        rendered: list[tuple[str, list[str]]] = []
        for i, msg in enumerate(messages):
            if not isinstance(msg, dict):
                raise ApiError(400, f"messages[{i}] must be an object", param="messages")
            role = msg.get("role")
            if role not in _ROLES:
                raise ApiError(400, f"messages[{i}].role must be one of {sorted(_ROLES)}, got {role!r}",
                               param="messages")
            text = _content_text(msg.get("content"), f"messages[{i}].content")
            words = text.split()
            total += 4 + _count(len(words), per_word)
            texts.append((role, text))
            if want_units:
                rendered.append((role, words))
        return _Prompt(total, prefix.chat_units(rendered) if want_units else None, texts)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        words = prompt.split()
        return _Prompt(max(1, _count(len(words), per_word)), words if want_units else None)
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return _Prompt(len(prompt), prompt if want_units else None)
    if isinstance(prompt, list) and len(prompt) > 1:
        raise ApiError(400, "the simulator serves one prompt per request; send a string, not a batch", param="prompt")
    raise ApiError(400, "'prompt' is required: a string or a list of token ids", param="prompt")


def _opt_int(body: dict, key: str, low: int) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ApiError(400, f"'{key}' must be an integer >= {low}, got {value!r}", param=key)
    return value


def _opt_bool(body: dict, key: str) -> bool:
    value = body.get(key, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ApiError(400, f"'{key}' must be a boolean, got {value!r}", param=key)
    return value


def parse_request(kind: str, raw: bytes, *, models: list[str], max_model_len: int, policy: OutputPolicy,
                  rng: random.Random, block_size: int | None = None) -> GenRequest:
    """Validate one completions/chat request body; raise ``ApiError`` naming the bad field. With ``block_size``
    (the prefix cache is on) the result carries the request's KV block keys."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise ApiError(400, f"request body must be a JSON object, got {type(body).__name__}")
    model = body.get("model")
    if not isinstance(model, str):
        raise ApiError(400, "'model' is required and must be a string", param="model")
    if model not in models:
        raise ApiError(404, f"The model `{model}` does not exist. Served models: {', '.join(models)}",
                       param="model", code="model_not_found")
    n = _opt_int(body, "n", 0)
    if n is not None and n != 1:
        raise ApiError(400, f"'n' must be 1 on this server, got {n}", param="n")
    stream = _opt_bool(body, "stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise ApiError(400, "'stream_options' must be an object", param="stream_options")
    if options and not stream:
        raise ApiError(400, "Stream options can only be defined when `stream=True`.", param="stream_options")
    include_usage = _opt_bool(options or {}, "include_usage")
    ignore_eos = _opt_bool(body, "ignore_eos")
    parsed = _prompt(kind, body, policy.tokens_per_word, block_size is not None)
    prompt_tokens = parsed.tokens

    cap = _opt_int(body, "max_completion_tokens", 1)
    if cap is None:
        cap = _opt_int(body, "max_tokens", 1)
    min_tokens = _opt_int(body, "min_tokens", 0) or 0
    if prompt_tokens >= max_model_len or (cap is not None and prompt_tokens + cap > max_model_len):
        raise ApiError(400, f"This model's maximum context length is {max_model_len} tokens. However, you requested "
                            f"{prompt_tokens + (cap or 0)} tokens ({prompt_tokens} in the messages, {cap or 0} in the "
                            f"completion). Please reduce the length of the messages or completion.",
                       param="messages" if kind == "chat" else "prompt", code="context_length_exceeded")
    if cap is None:
        cap = max_model_len - prompt_tokens
    if min_tokens > cap:
        raise ApiError(400, f"'min_tokens' ({min_tokens}) must be <= max_tokens ({cap})", param="min_tokens")

    if ignore_eos or policy.eos_median <= 0:
        natural = cap
    else:
        natural = max(1, round(policy.eos_median * math.exp(policy.eos_sigma * rng.gauss(0.0, 1.0))))
    output = min(cap, max(natural, min_tokens, 1))
    keys = [] if parsed.units is None or block_size is None else \
        prefix.block_keys(parsed.units, prompt_tokens, output_words(output), block_size)
    return GenRequest(kind, model, stream, include_usage, prompt_tokens, output, "length" if output >= cap else "stop",
                      keys, parsed.messages)


# -- response bytes ---------------------------------------------------------------------------

_VOCAB = tuple(
    "the of and to in a is that for it as was with be by on not he this are or his from at which but have "
          "an had they you were their one all we can her has there been if more when will would who so no she "
          "other its may these about than into them only new some could time two first then do any like my now "
          "over such our man me even most made after also did many before must through back years where much "
          "your way well down should because each just those people how too little state good very make world "
          "still own see men work long get here between both life being under never day same another know while "
          "last might us great old year off come since against go came right used take three".split()
)
_VOCAB_JSON = [json.dumps(" " + w).encode() for w in _VOCAB]


def token_text(index: int, count: int = 1) -> bytes:
    """JSON string (quoted) of ``count`` output tokens starting at ``index``: one word per token."""
    if count == 1:
        return _VOCAB_JSON[index % len(_VOCAB_JSON)]
    return json.dumps("".join(" " + _VOCAB[(index + i) % len(_VOCAB)] for i in range(count))).encode()


def plain_text(count: int) -> str:
    """The text of the first ``count`` output tokens (the non-streaming response's content)."""
    return "".join(" " + _VOCAB[i % len(_VOCAB)] for i in range(count))


def output_words(count: int) -> list[str]:
    """``plain_text(count).split()``, fast: the output's units for the prefix cache."""
    return list(_VOCAB * (count // len(_VOCAB)) + _VOCAB[:count % len(_VOCAB)])


class StreamFormat:
    """SSE chunk bytes for one request, byte-for-byte as vLLM's OpenAI server writes them.

    Chat: a role chunk, one chunk per emission (the last one carries ``finish_reason``), an optional
    usage chunk with empty ``choices``, then ``data: [DONE]``. Completions: no role chunk.
    """

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

    def role_chunk(self) -> bytes:
        return self._head + b'[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,' \
                            b'"finish_reason":null}]}\n\n'

    def token_chunk(self, text_json: bytes, finish_reason: str | None = None) -> bytes:
        if finish_reason is None:
            tail = b'null,"stop_reason":null}]}\n\n' if self.kind != "chat" else b'null}]}\n\n'
        else:
            tail = b'"' + finish_reason.encode() + b'","stop_reason":null}]}\n\n'
        return self._open + text_json + self._mid + tail

    def usage_chunk(self, prompt_tokens: int, completion_tokens: int, cached_tokens: int | None = None) -> bytes:
        """The usage chunk; ``prompt_tokens_details`` only when ``cached_tokens`` is given (prefix cache on)."""
        details = "" if cached_tokens is None else f',"prompt_tokens_details":{{"cached_tokens":{cached_tokens}}}'
        return self._head + (f'[],"usage":{{"prompt_tokens":{prompt_tokens},"total_tokens":'
                             f'{prompt_tokens + completion_tokens},"completion_tokens":{completion_tokens}'
                             f'{details}}}}}\n\n').encode()


def full_response(kind: str, request_id: str, created: int, model: str, text: str, finish_reason: str,
                  prompt_tokens: int, completion_tokens: int, cached_tokens: int | None = None) -> bytes:
    """The non-streaming response body with ``usage`` (``prompt_tokens_details`` only with ``cached_tokens``)."""
    if kind == "chat":
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                  "finish_reason": finish_reason, "stop_reason": None}
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason, "stop_reason": None}
        obj = "text_completion"
    usage: dict = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + completion_tokens,
                   "completion_tokens": completion_tokens}
    if cached_tokens is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    return json.dumps({"id": request_id, "object": obj, "created": created, "model": model, "choices": [choice],
                       "usage": usage}, separators=(",", ":")).encode()
