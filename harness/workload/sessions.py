"""Sessions: multi-turn conversations and agent loops whose context grows turn by turn. Pure.

A session is a run of calls. Its first prompt is an ordinary one (the shared system prompt, then a user
message that starts with the unique nonce); every later turn sends **the exact conversation so far** — the
previous messages, each answer as the server streamed it (``Session.answer``), then the new turn's message
(a tool result or a user's follow-up). An endpoint's prefix cache therefore sees the reuse a real client
gives it, and only the first message is unique. Between turns the session waits ``think_time_s`` (a tool
running, a human reading): part of the session, not load on the endpoint.

- Compaction: when the next call would pass ``max_context_tokens`` (prompt + answer), the history is
  replaced by a new prompt of ``compaction.keep_tokens`` (a fresh summary: a cache miss, as in real agents;
  the shared system prompt stays) before the turn's message is added.
- Parallel calls: a turn may fan out ``parallel_calls`` calls (sub-agents) that share the history, each with
  its own new message; they run at once and are joined before the next turn. Only the first call's answer
  joins the history.
- Scripted sessions (replayed from a log, ``harness.workload.session_log``): each session is a list of turns
  with their own input/output lengths and gaps instead of draws from the distributions. A ShareGPT file's
  conversations (``session_sharegpt``) also give each turn's message text, sent as it is instead of corpus text.

A turn's ``turn_input_tokens`` is how much the prompt grows beyond the previous prompt and answer, give or
take the chat template's few tokens per message. Everything is seeded per user stream, like single requests.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field
from typing import Any

from harness.checker import Checker
from harness.workload.lengths import Duration, Fixed, Length
from harness.workload.prompts import Prompt, PromptBuilder, Spliced
from harness.workload.sampler import worker_rng
from harness.workload.session_log import ScriptedTurn, load_session_log
from harness.workload.session_sharegpt import load_sharegpt_sessions
from harness.workload.spec import duration_from_spec, length_from_spec
from harness.workload.traces import TraceError

__all__ = ["DEFAULT_TURN_BUCKETS", "LOG_FORMATS", "Call", "ScriptedTurn", "Session", "SessionSampler", "SessionSpec",
           "sessions_from_spec", "turn_bucket", "turn_labels"]

DEFAULT_TURN_BUCKETS = (1, 2, 5, 17)
"""Lower edges of the turn-index buckets metrics are split by: turn 1, 2-4, 5-16, 17+."""


@dataclass(frozen=True, kw_only=True)
class SessionSpec:
    turns: Length = field(default_factory=lambda: Fixed(1))
    first_input_tokens: Length = field(default_factory=lambda: Fixed(1000))
    turn_input_tokens: Length = field(default_factory=lambda: Fixed(200))
    output_tokens: Length = field(default_factory=lambda: Fixed(100))
    think_time_s: Duration = field(default_factory=lambda: Duration(Fixed(0)))
    max_context_tokens: int | None = None
    compaction_keep_tokens: int = 0
    """0: no compaction (a call past ``max_context_tokens`` is trimmed to fit instead)."""
    parallel_calls: Length = field(default_factory=lambda: Fixed(1))
    turn_buckets: tuple[int, ...] = DEFAULT_TURN_BUCKETS
    scripts: tuple[tuple[ScriptedTurn, ...], ...] = ()
    """Logged sessions to replay (one picked at random per session); empty: draw from the distributions."""


def turn_labels(edges: tuple[int, ...]) -> list[str]:
    """``(1, 2, 5, 17)`` -> ``["1", "2-4", "5-16", "17+"]``."""
    out = []
    for i, lo in enumerate(edges):
        hi = edges[i + 1] - 1 if i + 1 < len(edges) else None
        out.append(f"{lo}+" if hi is None else str(lo) if hi == lo else f"{lo}-{hi}")
    return out


def turn_bucket(turn: int, edges: tuple[int, ...], labels: list[str]) -> str:
    """The label of the bucket ``turn`` (1-based) falls in."""
    i = 0
    while i + 1 < len(edges) and turn >= edges[i + 1]:
        i += 1
    return labels[i]


@dataclass
class Call:
    """One request of a session: the prompt (``messages`` for chat, ``text`` for completions), its lengths."""

    messages: list[dict] | None
    text: str | Spliced | None
    max_tokens: int
    turn: int
    call: int = 0
    think_s: float = 0.0
    """The wait before this turn (the session's think/tool time); 0 for turn 1 and for sub-calls."""
    target_tokens: int = 0
    """Target prompt length (calibration: the builder learns from the first turn's prompt only)."""
    compacted: bool = False
    ideal_cached: int | None = None
    """A trace's session (``agent_tree``): the prompt tokens an unbounded prefix cache could serve."""
    chain: tuple[Call, ...] = ()
    """Calls that follow this one on its connection, each after its ``think_s`` (a sub-agent's requests)."""


class Session:
    """One conversation. ``next_turn()`` gives the turn's calls (None when the session is over); after the calls
    ran, ``answer(text, prompt_tokens, output_tokens)`` with the first call's streamed answer and usage."""

    def __init__(self, sid: int, spec: SessionSpec, builder: PromptBuilder, rng: random.Random,
                 script: tuple[ScriptedTurn, ...] | None = None) -> None:
        self.id = sid
        self.spec = spec
        self._builder = builder
        self._rng = rng
        self._script = script
        self.turns = len(script) if script else max(1, spec.turns.sample(rng))
        self.turn = 0
        """Turns started so far (the 1-based index of the current turn)."""
        self.history: list[dict] = []
        self.text: str | Spliced = ""  # completions: the transcript so far (a long first prompt stays spliced)
        self.context_tokens = 0
        """Prompt + answer tokens of the last turn, from the server's usage where given, else the targets."""
        self.first: Prompt | None = None
        """The first prompt: the caller feeds it to the builder's calibration with the reported usage."""
        self._pending: Call | None = None
        self.compactions = 0
        self.ended_full = False
        self._reset = False  # a scripted compaction happened before the current turn
        """The session stopped early: its context was full and compaction is off."""

    @property
    def done(self) -> bool:
        return self.turn >= self.turns

    def _lengths(self) -> tuple[int, int, float, str | None]:
        """The next turn's new input tokens, output tokens, think time and (a replayed text) its message."""
        spec, rng = self.spec, self._rng
        if self._script:
            t = self._script[self.turn]
            if t.reset_tokens and self.turn:  # the logged agent compacted here: a fresh history this long
                self._compact(t.reset_tokens)
                self._reset = True
            # the logged gap, plus the drawn one (0 but with a ShareGPT file, which logs none)
            think = t.think_s + spec.think_time_s.sample(rng) if self.turn else 0.0
            return t.input_tokens, t.output_tokens, think, t.text
        new = (spec.first_input_tokens if self.turn == 0 else spec.turn_input_tokens).sample(rng)
        think = spec.think_time_s.sample(rng) if self.turn else 0.0
        return new, max(1, spec.output_tokens.sample(rng)), think, None

    def next_turn(self) -> list[Call] | None:
        if self.done:
            return None
        new, out, think, text = self._lengths()
        chat = self._builder.chat
        self.turn += 1
        if self.turn == 1:
            return [self._first(new, out, text)]
        cap, compacted = self.spec.max_context_tokens, self._reset
        self._reset = False
        if cap is not None and self.context_tokens + new + out > cap:
            if self.spec.compaction_keep_tokens:
                self._compact(self.spec.compaction_keep_tokens)
                compacted = True
            room = cap - self.context_tokens - new
            if room < 1:  # the context is full and nothing compacts it: the conversation cannot go on
                self.turns = self.turn - 1
                self.ended_full = True
                return None
            out = min(out, room)
        width = 1 if self._script else max(1, self.spec.parallel_calls.sample(self._rng))
        calls = []
        for i in range(width):
            body = text if text is not None else self._builder.turn_text(
                new if i == 0 else self.spec.turn_input_tokens.sample(self._rng), self._rng)
            if chat:
                calls.append(Call([*self.history, {"role": "user", "content": body}], None, out, self.turn, i,
                                  think if i == 0 else 0.0, compacted=compacted))
            else:
                calls.append(Call(None, f"{self.text} {body}", out, self.turn, i, think if i == 0 else 0.0,
                                  compacted=compacted))
        self._pending = calls[0]
        return calls

    def _first(self, n_in: int, n_out: int, text: str | None) -> Call:
        cap = self.spec.max_context_tokens
        if cap is not None and n_in + n_out > cap:
            n_out = max(1, min(n_out, cap // 2))
            n_in = max(1, cap - n_out)
        prompt = self._builder.build(n_in, self._rng) if text is None else self._builder.build_text(text, self._rng)
        self.first = prompt
        call = Call(prompt.messages, prompt.text, n_out, 1, target_tokens=n_in)
        self._pending = call
        return call

    def _compact(self, keep: int) -> None:
        """The history becomes a fresh summary of ``keep`` tokens (new text: a cache miss but for the shared
        system prompt), as an agent's compaction replaces its transcript."""
        prompt = self._builder.build(keep, self._rng)
        self.history = list(prompt.messages) if prompt.messages is not None else []
        self.text = prompt.text or ""
        self.context_tokens = keep
        self.compactions += 1

    def answer(self, content: str, prompt_tokens: int | None, output_tokens: int | None) -> None:
        """The turn's first call came back with ``content``: it joins the history for the next turn."""
        call = self._pending
        if call is None:
            return
        if call.messages is not None:
            self.history = [*call.messages, {"role": "assistant", "content": content}]
        else:
            self.text = f"{call.text}{content}"
        if prompt_tokens:
            self.context_tokens = prompt_tokens + (output_tokens or call.max_tokens)
        else:
            self.context_tokens += call.target_tokens or 0
            self.context_tokens += output_tokens or call.max_tokens


class SessionSampler:
    """A user's stream of sessions; ``builder`` is the worker's shared prompt builder (one calibration)."""

    def __init__(self, spec: SessionSpec, builder: PromptBuilder, *, seed: int, stream: int) -> None:
        self.spec = spec
        self.builder = builder
        self.labels = turn_labels(spec.turn_buckets)
        self._rng = worker_rng(seed, stream, "sessions")
        self._stream = stream
        self._count = 0

    def new_session(self) -> Session:
        self._count += 1
        script = self.spec.scripts[int(self._rng.random() * len(self.spec.scripts))] if self.spec.scripts else None
        return Session(self._stream * 1_000_000 + self._count, self.spec, self.builder,
                       random.Random(self._rng.getrandbits(64)), script)

    def bucket(self, turn: int) -> str:
        return turn_bucket(turn, self.spec.turn_buckets, self.labels)


_SESSION_KEYS = ("turns", "first_input_tokens", "turn_input_tokens", "output_tokens", "think_time_s",
                 "max_context_tokens", "compaction", "parallel_calls", "turn_buckets", "log", "input_mode", "format")
LOG_FORMATS = ("requests", "sharegpt")
"""``sessions.format``: a session log of one request a line (``session_log.py``), or ShareGPT conversations
(``session_sharegpt.py``)."""
_DRAWN = ("turns", "first_input_tokens", "turn_input_tokens", "output_tokens", "think_time_s", "parallel_calls")


def _log(node: dict, path: str, check: Checker) -> dict[str, Any]:
    """``sessions.log`` (with ``format`` and ``input_mode``, or a ShareGPT file's ``think_time_s``): the scripts."""
    fmt = check.string(node, "format", path, "requests", choices=LOG_FORMATS)
    drawn = [k for k in _DRAWN if k in node and not (fmt == "sharegpt" and k == "think_time_s")]
    if drawn:
        check.fail(path, f"give either log or distributions, not both (remove {', '.join(drawn)})")
    if fmt == "sharegpt" and "input_mode" in node:
        check.fail(f"{path}.input_mode", "a ShareGPT file's turns are its messages: remove input_mode")
    file = check.file(node, "log", path)
    mode = check.string(node, "input_mode", path, "auto", choices=("auto", "whole", "new"))
    kw: dict[str, Any] = {}
    if fmt == "sharegpt" and "think_time_s" in node:  # the file logs no think time: drawn, as without a log
        kw["think_time_s"] = duration_from_spec(node["think_time_s"], f"{path}.think_time_s", check)
    if file is not None and mode is not None and fmt is not None:
        try:
            read = load_sharegpt_sessions(file) if fmt == "sharegpt" else load_session_log(file, input_mode=mode)
            kw["scripts"] = read.scripts
        except TraceError as exc:
            check.fail(f"{path}.log", str(exc))
    return kw


def sessions_from_spec(node: Any, path: str, check: Checker) -> SessionSpec | None:
    """``workload.sessions``: distributions (``turns``, ``first_input_tokens``, ``turn_input_tokens``,
    ``output_tokens`` required) or ``log`` (a session log to replay), plus the shared keys."""
    before = len(check.problems)
    if check.mapping(node, path, _SESSION_KEYS) is None:
        return None
    kw: dict[str, Any] = {}
    for key in ("input_mode", "format"):
        if key in node and "log" not in node:
            check.fail(f"{path}.{key}", f"{key} says how to read a session log: give it with log")
    if "log" in node:
        kw.update(_log(node, path, check))
    else:
        for key in ("turns", "first_input_tokens", "turn_input_tokens", "output_tokens"):
            if key not in node:
                check.fail(path, f"missing required key '{key}' (or give log: a session log to replay)")
            else:
                kw[key] = length_from_spec(node[key], f"{path}.{key}", check)
        if "parallel_calls" in node:
            kw["parallel_calls"] = length_from_spec(node["parallel_calls"], f"{path}.parallel_calls", check)
        if "think_time_s" in node:
            kw["think_time_s"] = duration_from_spec(node["think_time_s"], f"{path}.think_time_s", check)
    cap = check.number(node, "max_context_tokens", path, None, integer=True, minimum=2)
    kw["max_context_tokens"] = cap
    comp = node.get("compaction")
    if comp is not None and check.mapping(comp, f"{path}.compaction", ("keep_tokens",), ("keep_tokens",)):
        keep = check.number(comp, "keep_tokens", f"{path}.compaction", integer=True, minimum=1)
        if keep is not None and cap is None:
            check.fail(f"{path}.compaction", "compaction needs max_context_tokens (the size that triggers it)")
        elif keep is not None and keep >= cap:
            check.fail(f"{path}.compaction.keep_tokens", f"must be < max_context_tokens ({cap}), got {keep}")
        kw["compaction_keep_tokens"] = keep or 0
    edges = node.get("turn_buckets")
    if edges is not None:
        ok = isinstance(edges, list) and edges and edges[0] == 1 and all(
            isinstance(e, int) and not isinstance(e, bool) for e in edges) and all(
            b > a for a, b in itertools.pairwise(edges))
        if not ok:
            check.fail(f"{path}.turn_buckets", f"expected increasing turn numbers starting at 1, e.g. [1, 2, 5, 17] "
                                              f"(turn 1, 2-4, 5-16, 17+), got {edges!r}")
        else:
            kw["turn_buckets"] = tuple(edges)
    if len(check.problems) > before or any(v is None for k, v in kw.items() if k != "max_context_tokens"):
        return None
    return SessionSpec(**kw)
