"""KV-cache blocks and the prefix cache over them (vLLM's block pool, simplified). Pure: no I/O, no clock.

A block holds ``block_size`` tokens. A running sequence holds its blocks in order: the first
``seq.shared`` are *cached* blocks, known by their key (``seq.block_hashes[j]``, a hash of the whole
prefix through block j, see ``prefix.py``) and shared by every running sequence with that prefix
(a reference count); the rest are *private*, being written. A private block becomes cached when its
tokens are computed: the prompt's blocks when prefill completes, the rest when the sequence leaves
the batch (finished, preempted or aborted). If another sequence cached the same key meanwhile, the
sequence switches to that block and gives its own back.

Accounting (the ``kv_usage`` gauge, as vLLM counts it): ``used`` = private blocks of running
sequences + cached blocks with references, each counted once however many sequences share it.
Cached blocks without references keep their content but are free space: an allocation takes empty
blocks first, then evicts those, least recently released first. A sequence releases its blocks tail
first (as vLLM does), so a chain loses its tail before its head and a shorter prefix stays usable.
Invariant: ``used + empty + evictable == total``.

With caching off nothing is ever cached: blocks are counted, nothing more.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Protocol

__all__ = ["BlockPool", "PoolSequence"]


class PoolSequence(Protocol):
    """What the pool reads and writes of a running sequence (``engine.Sequence`` is one)."""

    blocks: int
    """KV blocks held (cached shared ones first, then private ones)."""
    block_hashes: list[int]
    shared: int
    """How many of the leading ``blocks`` are cached blocks, shared by reference."""


class BlockPool:
    """Usage: ``hits = pool.hits(seq, n)``, then ``pool.allocate(seq, n + 1, hits)`` (False: no room, nothing
    changed); ``pool.grow(seq, tokens)`` while decoding; ``pool.cache(seq, computed)`` when tokens are computed;
    ``pool.release(seq)`` when the sequence leaves the batch."""

    def __init__(self, total: int, block_size: int, caching: bool) -> None:
        self.total = total
        self.block_size = block_size
        self.caching = caching
        self.used = 0
        """Blocks held by running sequences (the KV usage)."""
        self.empty = total
        """Blocks holding nothing."""
        self.evictions = 0
        """Cached blocks evicted to make room (cumulative)."""
        self._refs: dict[int, int] = {}  # key -> running sequences holding the cached block
        self._evictable: OrderedDict[int, None] = OrderedDict()  # cached, unreferenced; oldest release first

    @property
    def free(self) -> int:
        """Blocks an allocation can take: empty ones and evictable cached ones."""
        return self.empty + len(self._evictable)

    @property
    def cached(self) -> int:
        """Blocks in the prefix cache, referenced or not."""
        return len(self._refs)

    def hits(self, seq: PoolSequence, tokens: int) -> int:
        """Leading blocks of ``seq``'s first ``tokens`` tokens that are cached. At most ``(tokens - 1) // block_size``:
        the last token is always computed (its logits give the next token), in whole blocks as vLLM v1 does."""
        if not self.caching:
            return 0
        keys, refs = seq.block_hashes, self._refs
        n = min(len(keys), (tokens - 1) // self.block_size)
        h = 0
        while h < n and keys[h] in refs:
            h += 1
        return h

    def allocate(self, seq: PoolSequence, tokens: int, hits: int) -> bool:
        """Give a sequence that holds nothing blocks for ``tokens``: its first ``hits`` blocks from the cache, the
        rest new. False, and nothing changes, when they do not fit."""
        keys, refs = seq.block_hashes, self._refs
        new = -(-tokens // self.block_size) - hits
        revived = sum(1 for k in keys[:hits] if refs[k] == 0)
        if new + revived > self.free:
            return False
        for k in keys[:hits]:  # before taking new blocks, so that taking cannot evict them
            if refs[k] == 0:
                del self._evictable[k]
                self.used += 1
            refs[k] += 1
        self._take(new)
        seq.shared = hits
        seq.blocks = hits + new
        return True

    def grow(self, seq: PoolSequence, tokens: int) -> bool:
        """Make ``seq`` hold enough blocks for ``tokens``; False when there is no room."""
        new = -(-tokens // self.block_size) - seq.blocks
        if new <= 0:
            return True
        if new > self.free:
            return False
        self._take(new)
        seq.blocks += new
        return True

    def cache(self, seq: PoolSequence, computed: int) -> None:
        """Cache ``seq``'s full blocks within its first ``computed`` tokens, the KV it has computed."""
        if not self.caching:
            return
        keys, refs = seq.block_hashes, self._refs
        end = min(len(keys), computed // self.block_size, seq.blocks)
        for j in range(seq.shared, end):
            k = keys[j]
            n = refs.get(k)
            if n is None:
                refs[k] = 1  # the private block becomes the cached one
                continue
            if n == 0:  # computed twice (admitted before the other finished): share the cached one, free ours
                del self._evictable[k]
                self.used += 1
            refs[k] = n + 1
            self.used -= 1
            self.empty += 1
        seq.shared = max(seq.shared, end)

    def release(self, seq: PoolSequence) -> None:
        """Give back every block ``seq`` holds; cached ones stay cached, tail first in eviction order."""
        keys, refs, evictable = seq.block_hashes, self._refs, self._evictable
        for j in range(seq.shared - 1, -1, -1):
            k = keys[j]
            refs[k] -= 1
            if refs[k] == 0:
                evictable[k] = None
                self.used -= 1
        private = seq.blocks - seq.shared
        self.used -= private
        self.empty += private
        seq.blocks = seq.shared = 0

    def _take(self, n: int) -> None:
        from_empty = min(n, self.empty)
        self.empty -= from_empty
        for _ in range(n - from_empty):
            key, _ = self._evictable.popitem(last=False)
            del self._refs[key]
        self.evictions += n - from_empty
        self.used += n
