"""What one request generates: reasoning, then an answer that is text or a tool call. Pure: the caller owns the RNG.

Output tokens = reasoning tokens R + answer tokens A; both are output (``completion_tokens``,
``max_tokens``). With cap C (``max_tokens``, or the rest of the context window), a reasoning draw R*
and a natural answer length N (the lognormal of ``OutputPolicy``; at least 3 for a tool call, the
least that spells a name and complete JSON arguments):

- ``ignore_eos`` (or ``--eos-median 0``): output = C exactly; R = min(R*, C), A = C − R;
- otherwise output = min(C, max(R* + N, min_tokens, 1)); R = min(R*, output), A = output − R.

``finish`` is ``"length"`` when output reached C (the answer, or even the reasoning, was cut), else
``"tool_calls"`` for a tool call, else ``"stop"``. A tool call cut inside the reasoning (A = 0) is no
tool call. A tool call's first answer token carries its name; each further one an arguments fragment
(``text.tool_fragment``), planned as N − 1 fragments so a finished call's arguments are valid JSON.

Tool calls: a request that offers tools gets a call to its first tool with probability
``tool_call_p`` (``tool_choice`` "required" or a named function: always, that function; "none":
never); ``pick_tool`` decides, drawing from the RNG only when 0 < p < 1.

Reasoning count spec (``--reasoning-tokens``): ``N`` (fixed; ``0`` = not a reasoning model), ``LO-HI``
(uniform integers, both included) or ``lognormal:MEDIAN:SIGMA`` (rounded). A fixed count draws
nothing from the RNG, so turning features off leaves every other draw as it was.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, field
from functools import cached_property

from harness.sim.images import DEFAULT_PATCH_PX, ImageInfo

__all__ = ["Behavior", "CountSpec", "GenRequest", "Plan", "Segment", "pick_tool", "plan_output"]


@dataclass(frozen=True)
class CountSpec:
    """A token count per request: fixed, uniform or lognormal (see the module docstring)."""

    kind: str
    a: float = 0.0
    b: float = 0.0

    @classmethod
    def parse(cls, text: str, name: str = "--reasoning-tokens") -> CountSpec:
        s = text.strip().lower()
        if re.fullmatch(r"\d+", s):
            return cls("fixed", int(s))
        if m := re.fullmatch(r"(\d+)\s*-\s*(\d+)", s):
            lo, hi = int(m[1]), int(m[2])
            if lo > hi:
                raise ValueError(f"{name} {text!r}: LO-HI needs LO <= HI")
            return cls("uniform", lo, hi)
        if m := re.fullmatch(r"lognormal:([\d.]+):([\d.]+)", s):
            try:
                return cls("lognormal", float(m[1]), float(m[2]))
            except ValueError:
                pass
        raise ValueError(f"{name} {text!r}: expected N, LO-HI or lognormal:MEDIAN:SIGMA (e.g. 512, 256-1024, "
                         f"lognormal:512:0.5)")

    @property
    def off(self) -> bool:
        return self.kind == "fixed" and self.a == 0

    def draw(self, rng: random.Random) -> int:
        if self.kind == "fixed":
            return int(self.a)
        if self.kind == "uniform":
            return rng.randint(int(self.a), int(self.b))
        return max(0, round(self.a * math.exp(self.b * rng.gauss(0.0, 1.0))))


@dataclass(frozen=True)
class Behavior:
    """What the served model does beyond plain text, and how its front end writes streams. Every field is a
    ``kneecap sim`` flag of the same name (dashes for underscores), documented in its ``help`` metadata; ``choices``
    lists a flag's values."""

    reasoning_tokens: str = field(default="0", metadata={
        "help": "Reasoning tokens each request generates before its answer: N, LO-HI or lognormal:MEDIAN:SIGMA "
                "(0 = not a reasoning model)."})
    reasoning_field: str = field(default="reasoning_content", metadata={
        "help": "Chat delta/message field of the reasoning text (vLLM/DeepSeek or newer vLLM/OpenRouter).",
        "choices": ("reasoning_content", "reasoning")})
    reasoning_usage: str = field(default="off", metadata={
        "help": "Chat usage carries completion_tokens_details.reasoning_tokens (OpenAI does; vLLM does not).",
        "choices": ("on", "off")})
    tool_call_p: float = field(default=0.0, metadata={
        "help": "Probability that a request offering tools gets a tool call instead of a text answer."})
    strict_stream_options: str = field(default="off", metadata={
        "help": "Reject stream_options other than OpenAI's (include_usage, include_obfuscation) with a 400 "
                "naming the field, as a strict OpenAI-compatible server does.", "choices": ("on", "off")})
    embedding_dim: int = field(default=16, metadata={"help": "Size of the vectors /v1/embeddings returns."})
    timings: str = field(default="off", metadata={
        "help": "Chat and completions end with llama.cpp server's per-request timings object (prompt_ms = prefill, "
                "predicted_ms = decode, cache_n = cached prompt tokens).", "choices": ("on", "off")})
    on_hang_up: str = field(default="free", metadata={
        "help": "When a client closes its stream: free its slot at once (vLLM aborts the request), or generate on "
                "to the end for no one (a server that does not notice).", "choices": ("free", "generate")})
    frames_per_write: int = field(default=1, metadata={
        "help": "Write each stream's chunks this many at a time, in one write (a server that batches its socket "
                "writes); the last write of a stream may hold fewer. 1 = each chunk when it is made."})
    front_stall_every_s: float = field(default=0.0, metadata={
        "help": "Every this many seconds the front end stops writing (a garbage-collection pause of an API server) "
                "while the engine decodes on; then it writes each stream's overdue chunks at once. 0 = never."})
    front_stall_s: float = field(default=0.15, metadata={"help": "How long each front-end stall lasts."})
    changed_answers_share: float = field(default=0.0, metadata={
        "help": "Share of greedy answers (temperature 0; chat and completions) that change from their 5th token on "
                "when their first token is made in a batch of more than --changed-answers-above sequences, as a "
                "serving stack whose output depends on its batch: exactly every 1/share-th such request. 0 = never."})
    changed_answers_above: int = field(default=0, metadata={
        "help": "Batch size (sequences running in the engine) above which greedy answers change "
                "(--changed-answers-share)."})
    malformed_json_share: float = field(default=0.0, metadata={
        "help": "Share of JSON answers (requests with response_format json_object or json_schema) that never close "
                "their JSON, as answers cut short: exactly every 1/share-th such request. 0 = never."})
    image_patch_px: int = field(default=DEFAULT_PATCH_PX, metadata={
        "help": "Pixels per side of one image token: an image costs ceil(w/P) x ceil(h/P) prompt tokens "
                "(Qwen2-VL-like)."})

    def problems(self) -> list[str]:
        out = []
        if self.embedding_dim < 1:
            out.append(f"--embedding-dim must be >= 1, got {self.embedding_dim}")
        if self.image_patch_px < 1:
            out.append(f"--image-patch-px must be >= 1, got {self.image_patch_px}")
        if self.frames_per_write < 1:
            out.append(f"--frames-per-write must be >= 1, got {self.frames_per_write}")
        if self.front_stall_every_s < 0 or self.front_stall_s <= 0:
            out.append("--front-stall-every-s must be >= 0 and --front-stall-s > 0")
        elif self.front_stall_every_s and self.front_stall_s >= self.front_stall_every_s:
            out.append(f"--front-stall-s ({self.front_stall_s}) must be shorter than --front-stall-every-s "
                       f"({self.front_stall_every_s}), or the front end would never write")
        if not 0.0 <= self.changed_answers_share <= 1.0 or self.changed_answers_above < 0:
            out.append("--changed-answers-share must be within [0, 1] and --changed-answers-above >= 0")
        if not 0.0 <= self.malformed_json_share <= 1.0:
            out.append(f"--malformed-json-share must be within [0, 1], got {self.malformed_json_share}")
        if not 0.0 <= self.tool_call_p <= 1.0:
            out.append(f"--tool-call-p must be within [0, 1], got {self.tool_call_p}")
        try:
            CountSpec.parse(self.reasoning_tokens)
        except ValueError as exc:
            out.append(str(exc))
        for f in ("reasoning_field", "reasoning_usage", "strict_stream_options", "timings", "on_hang_up"):
            choices = self.__dataclass_fields__[f].metadata["choices"]
            if getattr(self, f) not in choices:
                out.append(f"--{f.replace('_', '-')} must be one of {', '.join(choices)}, got {getattr(self, f)!r}")
        return out

    @cached_property
    def reasoning(self) -> CountSpec:
        return CountSpec.parse(self.reasoning_tokens)


@dataclass(frozen=True, slots=True)
class Segment:
    """Part of one emission in one phase: ``count`` tokens from ``first`` (0-based within the phase)."""

    phase: str
    """"reasoning", "content" or "tool"."""
    first: int
    count: int


@dataclass(frozen=True)
class Plan:
    output_tokens: int
    reasoning_tokens: int = 0
    finish: str = "stop"
    """"length", "stop" or "tool_calls" (each framing renders its own words)."""
    tool: str | None = None
    """The called function's name when the answer is a tool call."""
    args_planned: int = 0
    """Arguments fragments of the complete call (tool calls): its natural answer length − 1."""

    @property
    def answer_tokens(self) -> int:
        return self.output_tokens - self.reasoning_tokens

    @property
    def plain(self) -> bool:
        """Text only: no reasoning, no tool call (the framings' fast path)."""
        return self.reasoning_tokens == 0 and self.tool is None

    def segments(self, index: int, count: int) -> list[Segment]:
        """Output tokens ``[index, index + count)`` cut at the reasoning/answer boundary."""
        r = self.reasoning_tokens
        answer = "tool" if self.tool is not None else "content"
        if index >= r:
            return [Segment(answer, index - r, count)]
        if index + count <= r:
            return [Segment("reasoning", index, count)]
        return [Segment("reasoning", index, r - index), Segment(answer, 0, index + count - r)]


def plan_output(*, cap: int, ignore_eos: bool, min_tokens: int, natural: int | None, reasoning: int,
                tool: str | None) -> Plan:
    """The plan from the cap, a natural answer length (None: ignore EOS), a reasoning draw and a tool name."""
    if ignore_eos or natural is None:
        output = cap
        planned_answer = cap - min(reasoning, cap)
    else:
        if tool is not None:
            natural = max(natural, 3)
        output = min(cap, max(reasoning + natural, min_tokens, 1))
        planned_answer = max(natural, output - reasoning)
    r = min(reasoning, output)
    if output - r == 0:
        tool = None
    finish = "length" if output >= cap else "tool_calls" if tool is not None else "stop"
    return Plan(output, r, finish, tool, max(0, planned_answer - 1) if tool is not None else 0)


def pick_tool(names: list[str], forced: str | None, none: bool, p: float, rng: random.Random) -> str | None:
    """The function the answer calls, or None for a text answer: ``forced`` (a named or required choice) wins,
    ``none`` forbids, else the first tool with probability ``p``."""
    if not names or none:
        return None
    if forced is not None:
        return forced
    if p >= 1.0 or (p > 0.0 and rng.random() < p):
        return names[0]
    return None


@dataclass
class GenRequest:
    kind: str
    """"chat", "completions", "responses", "messages" (Anthropic) or "embeddings"."""
    model: str
    stream: bool
    include_usage: bool
    prompt_tokens: int
    output_tokens: int
    """Tokens the engine will generate for this request (reasoning + answer)."""
    finish_reason: str
    """"length" when ``output_tokens`` reached the cap, "stop" when the model stopped by itself, "tool_calls"
    when it stopped after a tool call (each framing renders its own words)."""
    block_keys: list[int] = field(default_factory=list)
    """Prefix-cache key of each full KV block (prompt, then planned output); empty without ``block_size``."""
    messages: list[tuple[str, str]] | None = None
    """Chat: (role, content text) of each message, for the trace's message hashes; None for completions."""
    plan: Plan = field(default_factory=lambda: Plan(0))
    """Reasoning, answer and tool call of the output (``plan.py``); ``output_tokens``/``finish_reason`` are its."""
    continuous_usage: bool = False
    """Every chunk carries cumulative usage (``stream_options.continuous_usage_stats`` with ``include_usage``)."""
    reasoning_field: str = "reasoning_content"
    reasoning_usage: bool = False
    """Usage carries ``completion_tokens_details.reasoning_tokens``."""
    options: dict = field(default_factory=dict)
    """Framing-specific request fields a writer echoes or obeys (Responses, Messages)."""
    greedy: bool = False
    """``temperature`` 0: the answer a deterministic model gives (``--changed-answers-share`` changes some)."""
    json_answer: bool = False
    """``response_format`` asked JSON (``json_object``, ``json_schema``): the answer is a JSON object
    (``text.json_answer``)."""
    images: list[ImageInfo] = field(default_factory=list)
    """The prompt's images (chat image_url parts, Messages image blocks), in order; their tokens are in
    ``prompt_tokens``."""
