"""OpenAI request validation for the simulator (chat and completions), and what the other APIs share. Pure: no I/O.

Prompt token rule (documented so clients can calibrate against ``usage.prompt_tokens``):

- completions: ``ceil(words × tokens_per_word)`` where words = whitespace-separated words of the
  prompt; a prompt given as a list of token ids counts one token per id.
- chat: the same per message content (text parts of a list content are joined; an assistant
  message's ``tool_calls`` add their names and arguments), plus 4 tokens per message and 3 for the
  reply primer (the ChatML-style template overhead). Each ``image_url`` part adds its image tokens
  (``images.py``: ``ceil(w/P) × ceil(h/P)``, P = ``Behavior.image_patch_px``); a bad or remote image is a 400
  naming the part. In the prefix cache an image is that many units keyed by its bytes' hash, before the
  message's words, so the same image in the same place hits. ``tools`` count as one more, leading, message
  whose content is their JSON text (``json.dumps(tools)``, split at whitespace).

Stream options: ``include_usage`` and vLLM's ``continuous_usage_stats`` (cumulative usage on every
chunk; only together with ``include_usage``, as vLLM). ``Behavior.strict_stream_options`` rejects any
key OpenAI does not define with a 400 naming ``stream_options.<key>`` (code ``unknown_parameter``).

Tool calls: with ``tools``, ``plan.pick_tool`` decides whether the answer is a call (``Behavior.tool_call_p``,
``tool_choice``); ``chat_stream.py`` frames it.

Output length: ``max_tokens`` (or ``max_completion_tokens``) caps it; with ``ignore_eos`` the
request generates exactly that many. Otherwise the "model" stops by itself after a natural length
drawn from a lognormal (``eos_median``, ``eos_sigma``; seeded), never below ``min_tokens``.
Without ``max_tokens`` the cap is the rest of the context window, as in vLLM. A reasoning phase
(``Behavior.reasoning_tokens``) comes first and counts as output; ``plan.py`` has the split.

Prefix cache: given ``block_size``, ``parse_request`` also returns the request's KV block keys (the
prompt's units as ``prefix.py`` defines them, then the planned output's: ``<think>`` and words for
the reasoning, then the answer's words), and responses carry ``usage.prompt_tokens_details.cached_tokens``
when a cached-token count is passed in. The next turn's history holds the answer, not the reasoning,
so it hits up to the end of the previous prompt, as with a real reasoning model.

Response bytes are in ``chat_stream.py`` (re-exported here: ``StreamFormat``, ``full_response``).
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field

from harness.sim import prefix
from harness.sim.chat_stream import StreamFormat, full_response
from harness.sim.images import DEFAULT_PATCH_PX, ImageError, ImageInfo, read_openai
from harness.sim.plan import Behavior, GenRequest, Plan, pick_tool, plan_output
from harness.sim.text import THINK_START, output_words, plain_text, token_text

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

    def render(self) -> bytes:
        """The response body; a framing with its own error shape overrides this (``anthropic.AnthropicError``)."""
        return error_body(self)


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
    early_eos_share: float = field(default=0.0, metadata={
        "help": "Share of chat/completions requests that end early (finish_reason stop, at 10 to 90 percent of "
                "max_tokens) despite ignore_eos and min_tokens, as an endpoint or gateway that drops them; exactly "
                "every 1/share-th request."})
    tokens_per_word: float = field(default=1.0, metadata={"help": "Prompt tokens per whitespace-separated word."})


_ROLES = {"system", "user", "assistant", "tool", "developer", "function"}


def _count(words: int, per_word: float) -> int:
    return math.ceil(words * per_word)


def _content_text(content: object, where: str, images: list[ImageInfo] | None = None,
                  patch_px: int = DEFAULT_PATCH_PX) -> str:
    """A message's text; its ``image_url`` parts, measured, go to ``images`` (when given)."""
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
            elif part["type"] == "image_url" and images is not None:
                try:
                    images.append(read_openai(part, patch_px))
                except ImageError as exc:
                    raise ApiError(400, f"{where}[{i}]: {exc}", param=f"{where}[{i}]") from None
        return " ".join(parts)
    raise ApiError(400, f"{where} must be a string, a list of content parts, or null; got {type(content).__name__}",
                   param=where)


@dataclass
class PromptCount:
    """A request's prompt as the simulator counts it: its tokens, and its prefix-cache units when asked."""

    tokens: int
    units: list | None
    """The prefix cache's units (``prefix.py``), when asked for."""
    messages: list[tuple[str, str]] | None = None
    images: list[ImageInfo] = field(default_factory=list)
    """Every image of the prompt, in order (their tokens are in ``tokens``)."""


def chat_prompt(texts: list[tuple[str, str]], per_word: float, want_units: bool,
                images: list[list[ImageInfo]] | None = None) -> PromptCount:
    """Count a chat-like prompt from (role, text) per message: words × per_word + 4 per message + 3, plus the
    tokens of each message's images (``images``, one list per message, when there are any)."""
    total = 3
    rendered: list[tuple[str, list[str]]] = []
    for k, (role, text) in enumerate(texts):
        words = text.split()
        pictures = images[k] if images else ()
        total += 4 + _count(len(words), per_word) + sum(p.tokens for p in pictures)
        if want_units:
            rendered.append((role, [f"<image:{p.key}>" for p in pictures for _ in range(p.tokens)] + words
                             if pictures else words))
    flat = [p for pictures in images or () for p in pictures]
    return PromptCount(total, prefix.chat_units(rendered) if want_units else None, texts, flat)


@dataclass
class Tools:
    """The tools a request offers and how it lets the model choose."""

    names: list[str]
    forced: str | None = None
    """The function a named (or "required") choice makes the model call."""
    none: bool = False
    """tool_choice "none": never call."""
    text: str = ""
    """The definitions as the prompt carries them (JSON), counted as a leading message."""


def chat_tools(body: dict, *, nested: bool = True, choice_key: str = "tool_choice", error: type[ApiError] = ApiError,
               name_of_choice=None) -> Tools:
    """Validate OpenAI ``tools`` (``{"type": "function", "function": {"name": ...}}``; ``nested=False``: the
    Responses API's flat ``{"type": "function", "name": ...}``) and ``tool_choice``."""
    tools = body.get("tools")
    choice = body.get(choice_key)
    if tools is None or tools == []:
        if choice not in (None, "none", "auto"):
            raise error(400, f"'{choice_key}' is only allowed when 'tools' are specified", param=choice_key)
        return Tools([])
    if not isinstance(tools, list):
        raise error(400, "'tools' must be a list", param="tools")
    names = []
    for i, tool in enumerate(tools):
        fn = tool.get("function") if nested and isinstance(tool, dict) else tool
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(fn, dict) \
                or not isinstance(fn.get("name"), str):
            shape = '{"type": "function", "function": {"name": ...}}' if nested else '{"type": "function", "name": ...}'
            raise error(400, f"tools[{i}] must be {shape}", param=f"tools[{i}]")
        names.append(fn["name"])
    out = Tools(names, text=json.dumps(tools))
    if choice is None or choice == "auto":
        return out
    if choice == "none":
        out.none = True
    elif choice == "required":
        out.forced = names[0]
    else:
        name = (name_of_choice or _openai_choice_name)(choice, nested)
        if name is None:
            raise error(400, f"'{choice_key}' must be \"none\", \"auto\", \"required\" or a function, got {choice!r}",
                        param=choice_key)
        if name not in names:
            raise error(400, f"'{choice_key}' names function {name!r}, which is not among the tools "
                             f"({', '.join(names)})", param=choice_key)
        out.forced = name
    return out


def _openai_choice_name(choice: object, nested: bool) -> str | None:
    if not isinstance(choice, dict) or choice.get("type") != "function":
        return None
    fn = choice.get("function") if nested else choice
    return fn.get("name") if isinstance(fn, dict) and isinstance(fn.get("name"), str) else None


def _call_text(msg: dict) -> str:
    """An assistant message's tool calls as prompt text: each call's name and arguments."""
    calls = msg.get("tool_calls")
    if not isinstance(calls, list):
        return ""
    parts = []
    for call in calls:
        fn = call.get("function") if isinstance(call, dict) else None
        if isinstance(fn, dict):
            parts += [str(fn.get("name", "")), str(fn.get("arguments", ""))]
    return " ".join(parts)


def _prompt(kind: str, body: dict, per_word: float, want_units: bool, tools_text: str = "",
            patch_px: int = DEFAULT_PATCH_PX) -> PromptCount:
    if kind == "chat":
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ApiError(400, "'messages' is required and must be a non-empty list", param="messages")
        texts: list[tuple[str, str]] = []
        images: list[list[ImageInfo]] = []
        for i, msg in enumerate(messages):
            if not isinstance(msg, dict):
                raise ApiError(400, f"messages[{i}] must be an object", param="messages")
            role = msg.get("role")
            if role not in _ROLES:
                raise ApiError(400, f"messages[{i}].role must be one of {sorted(_ROLES)}, got {role!r}",
                               param="messages")
            images.append([])
            text = _content_text(msg.get("content"), f"messages[{i}].content", images[-1], patch_px)
            texts.append((role, text + (" " + calls if role == "assistant" and (calls := _call_text(msg)) else "")))
        if not any(images):
            images = []
        if not tools_text:
            return chat_prompt(texts, per_word, want_units, images)
        counted = chat_prompt([("tools", tools_text), *texts], per_word, want_units, [[], *images] if images else None)
        counted.messages = texts
        return counted
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        words = prompt.split()
        return PromptCount(max(1, _count(len(words), per_word)), words if want_units else None)
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return PromptCount(len(prompt), prompt if want_units else None)
    if isinstance(prompt, list) and len(prompt) > 1:
        raise ApiError(400, "the simulator serves one prompt per request; send a string, not a batch", param="prompt")
    raise ApiError(400, "'prompt' is required: a string or a list of token ids", param="prompt")


def opt_int(body: dict, key: str, low: int) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ApiError(400, f"'{key}' must be an integer >= {low}, got {value!r}", param=key)
    return value


def opt_bool(body: dict, key: str) -> bool:
    value = body.get(key, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ApiError(400, f"'{key}' must be a boolean, got {value!r}", param=key)
    return value


def load_body(raw: bytes, models: list[str], error: type[ApiError] = ApiError) -> dict:
    """The request body as a dict with a served ``model``; ``error`` is the framing's ApiError class."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise error(400, f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise error(400, f"request body must be a JSON object, got {type(body).__name__}")
    model = body.get("model")
    if not isinstance(model, str):
        raise error(400, "'model' is required and must be a string", param="model")
    if model not in models:
        raise error(404, f"The model `{model}` does not exist. Served models: {', '.join(models)}",
                    param="model", code="model_not_found")
    return body


def fit_cap(prompt_tokens: int, cap: int | None, max_model_len: int, param: str,
            error: type[ApiError] = ApiError) -> int:
    """The output cap, checked against the context window (``None``: the rest of the window, as vLLM)."""
    if prompt_tokens >= max_model_len or (cap is not None and prompt_tokens + cap > max_model_len):
        raise error(400, f"This model's maximum context length is {max_model_len} tokens. However, you requested "
                         f"{prompt_tokens + (cap or 0)} tokens ({prompt_tokens} in the messages, {cap or 0} in the "
                         f"completion). Please reduce the length of the messages or completion.",
                    param=param, code="context_length_exceeded")
    return max_model_len - prompt_tokens if cap is None else cap


def natural_length(policy: OutputPolicy, rng: random.Random, ignore_eos: bool) -> int | None:
    """The answer's natural length (None: EOS ignored or ``eos_median`` 0 — generate the cap)."""
    if ignore_eos or policy.eos_median <= 0:
        return None
    return max(1, round(policy.eos_median * math.exp(policy.eos_sigma * rng.gauss(0.0, 1.0))))


def output_units(plan: Plan) -> list[str]:
    """The planned output's prefix-cache units: ``<think>`` and words for the reasoning, then the answer's."""
    r = plan.reasoning_tokens
    head = [THINK_START, *output_words(r - 1)] if r else []
    return head + output_words(plan.output_tokens - r)


def finish_request(gen: GenRequest, prompt: PromptCount, block_size: int | None) -> GenRequest:
    """Fill in what follows from the plan: output tokens, finish reason, block keys."""
    gen.output_tokens, gen.finish_reason = gen.plan.output_tokens, gen.plan.finish
    if prompt.units is not None and block_size is not None:
        gen.block_keys = prefix.block_keys(prompt.units, gen.prompt_tokens, output_units(gen.plan), block_size)
    return gen


OPENAI_STREAM_OPTIONS = ("include_usage", "include_obfuscation")


def check_stream_options(options: dict | None) -> None:
    """A strict server's answer to a stream option OpenAI does not define (vLLM's ``continuous_usage_stats``)."""
    for key in options or {}:
        if key not in OPENAI_STREAM_OPTIONS:
            raise ApiError(400, f"Unknown parameter: 'stream_options.{key}'.", param=f"stream_options.{key}",
                           code="unknown_parameter")


def parse_request(kind: str, raw: bytes, *, models: list[str], max_model_len: int, policy: OutputPolicy,
                  rng: random.Random, block_size: int | None = None, behavior: Behavior | None = None,
                  early: bool = False) -> GenRequest:
    """Validate one completions/chat request body; raise ``ApiError`` naming the bad field. With ``block_size``
    (the prefix cache is on) the result carries the request's KV block keys. ``early``: this request's
    ``ignore_eos``/``min_tokens`` are dropped and it ends before its cap (``--early-eos-share``)."""
    behavior = behavior or Behavior()
    body = load_body(raw, models)
    n = opt_int(body, "n", 0)
    if n is not None and n != 1:
        raise ApiError(400, f"'n' must be 1 on this server, got {n}", param="n")
    stream = opt_bool(body, "stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise ApiError(400, "'stream_options' must be an object", param="stream_options")
    if options and not stream:
        raise ApiError(400, "Stream options can only be defined when `stream=True`.", param="stream_options")
    if behavior.strict_stream_options == "on":
        check_stream_options(options)
    include_usage = opt_bool(options or {}, "include_usage")
    continuous = opt_bool(options or {}, "continuous_usage_stats")
    ignore_eos = opt_bool(body, "ignore_eos")
    tools = chat_tools(body) if kind == "chat" else Tools([])
    parsed = _prompt(kind, body, policy.tokens_per_word, block_size is not None, tools.text, behavior.image_patch_px)

    cap = opt_int(body, "max_completion_tokens", 1)
    if cap is None:
        cap = opt_int(body, "max_tokens", 1)
    min_tokens = opt_int(body, "min_tokens", 0) or 0
    cap = fit_cap(parsed.tokens, cap, max_model_len, "messages" if kind == "chat" else "prompt")
    if min_tokens > cap:
        raise ApiError(400, f"'min_tokens' ({min_tokens}) must be <= max_tokens ({cap})", param="min_tokens")

    natural = natural_length(policy, rng, ignore_eos)
    if early and cap > 1:
        ignore_eos, min_tokens, natural = False, 0, min(cap - 1, max(1, round(cap * rng.uniform(0.1, 0.9))))
    reasoning = behavior.reasoning.draw(rng)
    tool = pick_tool(tools.names, tools.forced, tools.none, behavior.tool_call_p, rng)
    plan = plan_output(cap=cap, ignore_eos=ignore_eos, min_tokens=min_tokens, natural=natural, reasoning=reasoning,
                       tool=tool)
    gen = GenRequest(kind, model=body["model"], stream=stream, include_usage=include_usage,
                     prompt_tokens=parsed.tokens, output_tokens=0, finish_reason="", messages=parsed.messages,
                     plan=plan, continuous_usage=include_usage and continuous,
                     reasoning_field=behavior.reasoning_field, reasoning_usage=behavior.reasoning_usage == "on",
                     images=parsed.images, greedy=_greedy(body.get("temperature")),
                     json_answer=_json_format(body.get("response_format")))
    return finish_request(gen, parsed, block_size)


def _json_format(response_format: object) -> bool:
    return isinstance(response_format, dict) and response_format.get("type") in ("json_object", "json_schema")


def _greedy(temperature: object) -> bool:
    return isinstance(temperature, int | float) and not isinstance(temperature, bool) and temperature == 0
