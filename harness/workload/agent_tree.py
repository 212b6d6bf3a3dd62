"""Agent session trees replayed (``workload.trace`` with ``format: weka``): each user is a lane that plays one
recorded session after another, its root's requests in order with the trace's think times, its sub-agents as child
sessions at once beside each other, the parent waiting for them (but not for ``async_launched`` ones). Pure.

A play is the ``Session`` protocol ``load/session_turns.py`` drives: ``next_turn()`` gives a turn's calls, each call
with the ``chain`` of requests that follow it on its connection (a sub-agent's), joined before the next turn.

- **Prompts** are the requests' blocks (``token_blocks.BlockText``): the same id, the same text, so the server's
  prefix cache sees the trace's reuse. A ``local`` trace's ids are its own (salted with its id); ``global`` ones are
  shared across sessions.
- **Cache bust** (``bust: first_turn``, the default, as AIPerf's AgentX): every play gets a salt of its own for the
  blocks after its agents' shared tool and system prefix, as a marker in the first user message would; so two plays
  of one session share only that prefix. ``none``: plays of a session share everything.
- **Random start** (``start: random``, the default): a lane's first play starts at a random request of the root (its
  whole prompt is in its blocks, history included), so the fleet does not begin in step at every session's start;
  later plays start at the first request. Sub-agents spawned before the start point are not played.
- **Think time** before a request is its ``think_time``, at most ``think_cap_s``; after sub-agents the parent waited
  for, less their recorded run (the trace's think time includes that wait).
- **The ceiling**: each request's ideal cached tokens against the worker's unbounded cache of what it sent
  (``prefix_trace.PrefixTrie``), per block size.
"""

from __future__ import annotations

import random
import secrets
from collections.abc import Callable, Iterator

from harness.workload.agent_trace import Agent, AgentCall, AgentTrace, TreePlan
from harness.workload.prefix_trace import PrefixTrie
from harness.workload.prompts import PromptBuilder
from harness.workload.sessions import DEFAULT_TURN_BUCKETS, Call, turn_bucket, turn_labels
from harness.workload.token_blocks import BlockText

__all__ = ["TreeSampler", "TreeSession"]


class TreeSession:
    """One play of ``trace`` from root request ``start``; ``sid`` names it, ``salt`` is the run's (see the module)."""

    def __init__(self, sid: int, trace: AgentTrace, start: int, plan: TreePlan, salt: str, blocks: BlockText,
                 trie: PrefixTrie, chat: bool) -> None:
        self.id, self.trace, self.start, self.plan = sid, trace, start, plan
        self.blocks, self.trie, self.chat = blocks, trie, chat
        self.base = f"{salt}/{trace.id}" if trace.scope == "local" else salt
        self.salt = f"{self.base}/{sid}" if plan.bust else self.base
        self.prefix = trace.prefix_ids
        """Ids of the agents' tool and system prefixes: the same in every play (the cache bust comes after)."""
        self.turn = 0
        self.first = None  # the prompt builder learns nothing from a trace's prompts
        self.context_tokens = 0
        self.ended_full = False
        self.compactions = 0
        self._turns = self._plan()
        self._root_turn = False

    def next_turn(self) -> list[Call] | None:
        turn = next(self._turns, None)
        if turn is not None:
            self.turn += 1
        return turn

    def answer(self, text: str, prompt_tokens: int | None, output_tokens: int | None) -> None:
        if self._root_turn:  # the root's context: its last prompt and answer
            self.context_tokens = (prompt_tokens or 0) + (output_tokens or 0)

    def _plan(self) -> Iterator[list[Call]]:
        root, cap = self.trace.root, self.plan.think_cap_s
        seen, waited, sent = 0, 0.0, False
        later: list[Call] = []  # async sub-agents: they run beside the parent's next request
        for step in root.steps:
            if isinstance(step, AgentCall):
                seen += 1
                if seen <= self.start:
                    continue
                think = min(cap, max(0.0, step.think_s - waited)) if sent else 0.0
                self._root_turn, sent, waited = True, True, 0.0
                call = self._call(step, self.turn + 1, 0, think)
                yield [call, *later]
                later = []
            elif seen > self.start:  # a group spawned after the start point
                chains = [self._chain(a, self.turn + 1, i + 1) for i, a in enumerate(step)]
                joined = [c for c, a in zip(chains, step, strict=True) if a.joined and c is not None]
                later += [c for c, a in zip(chains, step, strict=True) if not a.joined and c is not None]
                waited = max((a.duration_s for a in step if a.joined), default=0.0)
                if joined:
                    self._root_turn = False
                    yield joined
        if later:
            self._root_turn = False
            yield later

    def _chain(self, agent: Agent, turn: int, index: int) -> Call | None:
        """A sub-agent's requests (its own sub-agents' flattened in at their place) as one call and its chain."""
        calls = [self._call(c, turn, index, 0.0 if k == 0 else min(self.plan.think_cap_s, c.think_s))
                 for k, (c, _) in enumerate(agent.walk())]
        if not calls:
            return None
        calls[0].chain = tuple(calls[1:])
        return calls[0]

    def _call(self, call: AgentCall, turn: int, index: int, think: float) -> Call:
        # the request's own blocks: its tail (by its place in the session), or all of them with salt: request
        own = f"{self.salt}/{self.trace.place[id(call)]}"
        if self.plan.per_request:
            own += f"/{secrets.token_hex(6)}"
        keys = [(h, own if self.plan.per_request else self.base if h in self.prefix else self.salt)
                for h in call.hash_ids]
        text = self.blocks.text(keys, call.input_tokens, own)
        words = self.blocks.words
        target = words.before + call.input_tokens + words.after
        return Call([{"role": "user", "content": text}] if self.chat else None, None if self.chat else text,
                    call.output_tokens, turn, index, think, target,
                    ideal_cached=self.trie.offer(keys, call.input_tokens))


class TreeSampler:
    """A lane: ``new_session()`` is the next play, a session drawn from ``traces`` by ``rng``; the first starts at a
    random root request (``TreePlan.random_start``). ``blocks(n)`` and ``trie(n)`` are the worker's, per block size."""

    def __init__(self, traces: tuple[AgentTrace, ...], plan: TreePlan, salt: str, builder: PromptBuilder,
                 blocks: Callable[[int], BlockText], trie: Callable[[int], PrefixTrie], rng: random.Random,
                 stream: int) -> None:
        self.traces, self.plan, self.salt, self.builder = traces, plan, salt, builder
        self._blocks, self._trie, self.rng, self._stream = blocks, trie, rng, stream
        self._count = 0
        self.labels = turn_labels(DEFAULT_TURN_BUCKETS)

    def new_session(self) -> TreeSession:
        trace = self.traces[self.rng.randrange(len(self.traces))]
        roots = len(trace.root.calls)
        start = self.rng.randrange(roots) if self.plan.random_start and not self._count else 0
        self._count += 1
        return TreeSession(self._stream * 1_000_000 + self._count, trace, start, self.plan, self.salt,
                           self._blocks(trace.block_tokens), self._trie(trace.block_tokens), self.builder.chat)

    def bucket(self, turn: int) -> str:
        return turn_bucket(turn, DEFAULT_TURN_BUCKETS, self.labels)
