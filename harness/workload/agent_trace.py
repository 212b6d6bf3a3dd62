"""Agent session traces in the Weka format (Claude-Code sessions: callanjfox/agentic-coding-analysis
``TRACE_FORMAT.md``, SemiAnalysis's cc-traces-weka): one JSON object per session, its requests in order, sub-agents
among them. Read with every problem named. Pure.

A session: ``id``, ``block_size`` (tokens per hash id; 64 in the published ones), ``hash_id_scope`` (``local``: ids
mean something within the file only; ``global``: across files), ``tool_tokens`` + ``system_tokens`` (the shared
prefix before the first message), ``requests``. A request: ``t`` (s from the session's start), ``in``, ``out``,
``hash_ids`` (whole blocks; a trailing partial one is tolerated), ``think_time`` (s the client spent before it: a
tool running, a person reading, waiting on sub-agents). A ``type: "subagent"`` entry is a child session spawned
there: ``agent_id``, ``duration_ms``, ``status`` (``async_launched``: the parent does not wait for it), its own
``tool_tokens``/``system_tokens`` and ``requests`` (sub-agents of its own allowed). Consecutive sub-agents between
two of the parent's requests run at once.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from typing import Any

from harness.workload.traces import MAX_TOKENS, TraceError

__all__ = ["Agent", "AgentCall", "AgentTrace", "TreePlan", "read_weka"]


@dataclass(frozen=True)
class TreePlan:
    """How a lane plays sessions (``agent_tree``): ``bust`` (a salt per play after the agents' shared prefix),
    ``random_start`` (a lane's first play from a random root request), ``think_cap_s`` (the longest think time)."""

    bust: bool = True
    random_start: bool = True
    think_cap_s: float = 10.0
    per_request: bool = False
    """``salt: request``: every request's blocks its own (the control)."""


@dataclass(frozen=True)
class AgentCall:
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...]
    think_s: float
    """The client's time before this request, as the trace has it (``think_time``)."""


@dataclass(frozen=True)
class Agent:
    """A session's root or one of its sub-agents: its steps in order, each a request or a group of sub-agents spawned
    together."""

    steps: tuple[AgentCall | tuple[Agent, ...], ...]
    prefix_tokens: int = 0
    """``tool_tokens`` + ``system_tokens``: what every request of this agent starts with."""
    joined: bool = True
    """False for ``status: async_launched``: its parent goes on without waiting for it."""
    duration_s: float = 0.0
    """``duration_ms``: how long it ran when recorded (its parent's next ``think_time`` includes the wait)."""
    name: str = ""

    @property
    def calls(self) -> list[AgentCall]:
        """Its own requests, in order (not its sub-agents')."""
        return [s for s in self.steps if isinstance(s, AgentCall)]

    def walk(self) -> list[tuple[AgentCall, Agent]]:
        """Every request of the tree, depth first in order, with the agent that sends it."""
        out: list[tuple[AgentCall, Agent]] = []
        for step in self.steps:
            if isinstance(step, AgentCall):
                out.append((step, self))
            else:
                for sub in step:
                    out += sub.walk()
        return out


@dataclass(frozen=True)
class AgentTrace:  # not slots: prefix_ids is cached on the instance
    id: str
    block_tokens: int
    scope: str
    """"local" or "global": whether equal ids in two sessions are the same block."""
    root: Agent

    @property
    def requests(self) -> int:
        return len(self.root.walk())

    @functools.cached_property
    def place(self) -> dict[int, int]:
        """Each request's place in the session (``walk`` order), by its ``id()``: the same on every worker."""
        return {id(call): i for i, (call, _) in enumerate(self.root.walk())}

    @functools.cached_property
    def prefix_ids(self) -> frozenset[int]:
        """The ids of every agent's tool and system prefix (its first ``prefix_tokens`` of whole blocks)."""
        return frozenset(h for call, agent in self.root.walk()
                         for h in call.hash_ids[:agent.prefix_tokens // self.block_tokens])


def read_weka(path: str) -> list[AgentTrace]:
    """The sessions of ``path``: a folder of ``*.json`` files (one session each, by name), or one file holding a
    session or a list of them. Every problem of every session named in one ``TraceError``."""
    files = [os.path.join(path, f) for f in sorted(os.listdir(path)) if f.endswith(".json")] \
        if os.path.isdir(path) else [path]
    if not files:
        raise TraceError(f"{path}: no *.json session file in the folder")
    traces, problems = [], []
    for file in files:
        try:
            with open(file, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            problems.append(f"{file}: not a JSON file ({exc})")
            continue
        for i, obj in enumerate(data if isinstance(data, list) else [data]):
            where = file if not isinstance(data, list) else f"{file}[{i}]"
            stem = os.path.splitext(os.path.basename(file))[0]
            trace = _trace(obj, where, stem if not isinstance(data, list) else f"{stem}[{i}]", problems)
            if trace is not None:
                traces.append(trace)
    if problems:
        raise TraceError("; ".join(problems[:20]) + (f"; and {len(problems) - 20} more" if len(problems) > 20 else ""))
    if not traces:
        raise TraceError(f"{path}: no session")
    return traces


def _trace(obj: object, where: str, default_id: str, problems: list[str]) -> AgentTrace | None:
    if not isinstance(obj, dict) or not isinstance(obj.get("requests"), list):
        problems.append(f"{where}: a session is an object with a list of requests (the Weka format)")
        return None
    block = obj.get("block_size", 64)
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        problems.append(f"{where}: block_size must be an integer of tokens >= 1, got {block!r}")
        return None
    scope = obj.get("hash_id_scope", "local")
    if scope not in ("local", "global"):
        problems.append(f"{where}: hash_id_scope must be local or global, got {scope!r}")
        return None
    before = len(problems)
    root = _agent(obj, where, block, problems, depth=0)
    if len(problems) > before:
        return None
    if not root.calls:
        problems.append(f"{where}: the session has no request of its own (type n or s)")
        return None
    return AgentTrace(str(obj.get("id", default_id)), block, scope, root)


def _agent(obj: dict, where: str, block: int, problems: list[str], depth: int) -> Agent:
    steps: list[Any] = []
    for i, r in enumerate(obj["requests"]):
        at = f"{where}: requests[{i}]" if depth == 0 else f"{where}.requests[{i}]"
        if isinstance(r, dict) and r.get("type") == "subagent":
            if depth >= 8 or not isinstance(r.get("requests"), list):
                problems.append(f"{at}: a subagent needs a list of requests (at most 8 deep)")
                continue
            child = _agent(r, at, block, problems, depth + 1)
            sub = Agent(child.steps, _tokens(r), r.get("status") != "async_launched",
                        _number(r.get("duration_ms", 0)) / 1000, str(r.get("agent_id", "")))
            if steps and isinstance(steps[-1], tuple):
                steps[-1] += (sub,)
            else:
                steps.append((sub,))
        else:
            call = _call(r, at, block, problems)
            if call is not None:
                steps.append(call)
    return Agent(tuple(steps), _tokens(obj))


def _call(r: object, at: str, block: int, problems: list[str]) -> AgentCall | None:
    if not isinstance(r, dict):
        problems.append(f"{at}: expected an object, got {type(r).__name__}")
        return None
    missing = [k for k in ("in", "out", "hash_ids") if k not in r]
    if missing:
        problems.append(f"{at}: missing {', '.join(missing)} (a request has in, out, hash_ids)")
        return None
    tokens = {}
    for key, low in (("in", 1), ("out", 0)):
        v = r[key]
        if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= MAX_TOKENS:
            problems.append(f"{at}.{key} must be an integer of tokens >= {low}, got {v!r}")
            return None
        tokens[key] = v
    ids = r["hash_ids"]
    if not isinstance(ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) and h >= 0 for h in ids):
        problems.append(f"{at}.hash_ids must be a list of integers >= 0")
        return None
    if len(ids) > -(-tokens["in"] // block):
        problems.append(f"{at}: {len(ids)} hash_ids for in {tokens['in']}: at most {-(-tokens['in'] // block)} "
                        f"blocks of {block} tokens (is block_size the trace's?)")
        return None
    think = r.get("think_time", 0) or 0
    if isinstance(think, bool) or not isinstance(think, int | float) or not think >= 0:
        problems.append(f"{at}.think_time must be seconds >= 0, got {think!r}")
        return None
    # out 0 (a cancelled call) still costs a turn: one token
    return AgentCall(tokens["in"], max(1, tokens["out"]), tuple(ids), float(think))


def _tokens(obj: dict) -> int:
    return int(_number(obj.get("tool_tokens", 0)) + _number(obj.get("system_tokens", 0)))


def _number(v: object) -> float:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and v >= 0 else 0.0
