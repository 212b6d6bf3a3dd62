"""A worker's share of ``workload.trace``: the blocks' words, asked of the endpoint's tokenizer once before the load
begins (``workload/token_blocks.py``), and what the users draw from them — the trace's cursor (JSON-lines formats)
or, for agent sessions (``format: weka``), a lane per user over the worker's blocks and ceiling tries.
"""

from __future__ import annotations

import logging
import random
from dataclasses import replace
from typing import Any

from harness.client.tokenize import file_tokenizer, server_tokenizer
from harness.workload.agent_tree import TreeSampler
from harness.workload.prefix_trace import PrefixTrace, PrefixTrie, TraceCursor, trace_salt
from harness.workload.prompts import PromptBuilder
from harness.workload.sampler import TraceSampler
from harness.workload.token_blocks import CANDIDATES, BlockText, BlockWords, approximate, calibrate

__all__ = ["TraceKit"]

log = logging.getLogger("kneecap")


class TraceKit:
    """``worker``: the ``WorkerSide``; ``prompts``: its builder (the corpus, chat or not)."""

    def __init__(self, worker: Any, trace: PrefixTrace, prompts: PromptBuilder) -> None:
        self.worker, self.trace, self.prompts = worker, trace, prompts
        self.words = self._words()
        self.salt = trace_salt(trace, worker.source.option("run_id"), worker.scenario.workload.seed)
        self.cursor = TraceCursor(trace, lambda: (worker.worker_index, worker.fleet_size), self.words.before,
                                  self.words.after)
        self._blocks: dict[int, BlockText] = {}
        self._tries: dict[int, PrefixTrie] = {}

    def _words(self) -> BlockWords:
        """The blocks' words, token-exact by the endpoint's /tokenize where it has one (a few calls; every worker gets
        the same words)."""
        sc, trace, prompts = self.worker.scenario, self.trace, self.prompts
        ep = sc.endpoint
        corpus = prompts.corpus.words(0, min(CANDIDATES, prompts.corpus.n)).split()
        if trace.tokenizer == "none":
            words = approximate(corpus, "workload.trace.tokenizer is none")
        elif trace.tokenizer == "server":
            t = self.worker.target
            tls = t.tls() if t.https else None
            words = calibrate(server_tokenizer(t.base, ep.model, headers=t.auth_headers(), context=tls), corpus,
                              prompts.chat)
        else:
            words = calibrate(file_tokenizer(trace.tokenizer), corpus, prompts.chat)
            if prompts.chat:
                words = replace(words, note=f"{words.note} (a tokenizer file has no chat template: not counted)")
        (log.info if words.exact else log.warning)("kneecap: trace blocks %s", words.note)
        return words

    def blocks(self, block_tokens: int) -> BlockText:
        if block_tokens not in self._blocks:
            self._blocks[block_tokens] = BlockText(self.words, block_tokens, self.trace.max_id)
        return self._blocks[block_tokens]

    def trie(self, block_tokens: int) -> PrefixTrie:
        """The worker's unbounded cache of what its lanes sent, per block size: the sessions' ceiling."""
        if block_tokens not in self._tries:
            self._tries[block_tokens] = PrefixTrie(block_tokens, self.trace.server_block, self.words.before,
                                                   self.words.after)
        return self._tries[block_tokens]

    def sampler(self) -> TraceSampler:
        return TraceSampler(self.cursor, self.blocks(self.trace.block_tokens), self.prompts, self.salt)

    def lane(self, stream: int) -> TreeSampler:
        """A user's lane of agent sessions, its own seeded stream."""
        assert self.trace.tree is not None  # asked only for format: weka
        seed = self.worker.scenario.workload.seed
        return TreeSampler(self.trace.sessions, self.trace.tree, self.salt, self.prompts, self.blocks, self.trie,
                           random.Random(f"kneecap/{seed}/{stream}/lanes"), stream)
