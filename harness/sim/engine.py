"""A continuous-batching engine model: the capacity that makes the simulator's knee real.

No I/O, no clock: the caller passes ``now`` in and waits ``Iteration.duration_s`` itself, so the model runs as fast
on a fake clock in tests as it does in real time behind HTTP.

One iteration (vLLM's scheduler step, simplified):

1. Every running sequence that has finished its prefill decodes ``tokens_per_chunk`` tokens (one by default; more
   imitates speculative decoding). Growing past the KV budget preempts the most recently admitted sequence (recompute,
   as vLLM does): its blocks are freed and it returns to the head of the queue, to redo prefill over prompt + tokens
   generated so far.
2. Sequences still in prefill take chunks of at most ``max_num_batched_tokens`` per iteration in total (chunked
   prefill). A sequence whose prefill completes emits its first token.
3. Waiting sequences are admitted FCFS while a slot (``max_num_seqs``) is free and the KV cache can hold their whole
   prompt; the head of the queue blocks the rest (no skipping). With the prefix cache on, the prompt's leading blocks
   found in the cache are hits: ``cached_tokens`` = hit blocks × ``block_size`` (at most ``prompt_tokens - 1``, in whole
   blocks), and only the rest is prefilled, so hits cost no prefill time. A preempted sequence's recompute looks up the
   cache the same way.

Prefix cache (``prefix_cache="on"``, the default; ``kv.py`` has the block accounting): a sequence carries
``block_hashes``, one key per full block of prompt + planned output (the API layer computes them, ``prefix.py``); a
sequence without keys caches nothing. Blocks are cached once computed (prompt blocks when prefill completes, the rest
when the sequence leaves the batch); blocks of finished requests stay cached but count as free, and are evicted least
recently used when an allocation needs the room. Blocks shared by running sequences are counted once. Counters, in
tokens as vLLM v1: ``prefix_cache_queries_total`` (prompt tokens looked up at first admission) and
``prefix_cache_hits_total`` (the sum of ``cached_tokens``). With ``prefix_cache="off"`` nothing is looked up or cached
and the engine behaves exactly as it did without one.

Prefill-only sequences (``output_tokens == 0``: an embedding input) go through the same admission and prefill
budget, then finish with an emission of 0 tokens, never decoding. With prompts of P tokens they saturate the budget
at ``min(max_num_seqs, max_num_batched_tokens / P)`` in flight: a closed-loop knee, since each iteration then lasts
``iter_base_ms + prefill_per_ktoken_ms × max_num_batched_tokens / 1000`` and serves ``max_num_batched_tokens / P``.

Iteration time = ``iter_base_ms`` + ``iter_per_seq_ms`` × decoding sequences + ``iter_per_kv_ktoken_ms`` × (context
tokens of decoding sequences / 1000) + ``prefill_per_ktoken_ms`` × (prefill tokens this iteration / 1000), times an
optional jitter.

Engine stalls (``engine_stall_every_s`` S > 0, ``engine_stall_s`` D): the whole engine stops for D seconds at
``epoch + k × S`` (k ≥ 1), whatever it is serving (a GC pause, a noisy neighbour). An iteration due to start inside a
stall starts when it ends; one a stall begins during ends D later. Requests see it as queue, prefill or decode time.

LoRA (``lora.py``): a sequence with an ``adapter`` joins the batch only while the batch mixes fewer than
``max_loras`` adapters or already has its own (else it is skipped and keeps its place, as vLLM v1); admitting it
when its adapter is not resident loads it (least recently used idle one out) and adds ``lora_load_ms`` to that
iteration, so the whole batch pays; ``Sequence.lora_loaded`` records it. So does the first admission of each
prompt-length bucket with ``shape_compile_ms`` (an engine that compiles or captures a graph per shape).

Stage times (vLLM v1's ``FinishedRequestStats``, ``vllm/v1/metrics/stats.py``): each sequence records ``admitted_at``
(first scheduled; a preemption does not move it), ``first_token_at`` and ``last_token_at`` (the end of the iteration
that emitted them); ``Sequence.stages()`` turns them into queue, prefill, decode and inference times, none negative
(the server's loop plans on a clock that may run behind the real one: a request can arrive after an iteration's start).

Why there is a knee: with closed-loop users and fixed lengths, each of up to ``max_num_seqs`` users owns a slot and
TTFT stays at about one prefill; the next waits a whole request's service time for a slot: TTFT jumps, throughput not.
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass, field

from harness.sim.engine_config import EngineConfig
from harness.sim.kv import BlockPool
from harness.sim.lora import LoraSlots

__all__ = ["Emission", "Engine", "EngineConfig", "Iteration", "Sequence", "StageTimes"]


@dataclass(eq=False)
class Sequence:
    """One request inside the engine. Times are in the caller's clock."""

    id: int
    prompt_tokens: int
    output_tokens: int
    """How many tokens this request will generate in total (decided by the API layer); 0: prefill only."""
    arrival: float
    generated: int = 0
    prefilled: int = 0
    prefill_target: int = 0
    """Tokens to prefill: the prompt, plus generated tokens after a preemption (recompute), less the tokens
    found in the prefix cache on admission."""
    blocks: int = 0
    """KV blocks held (cached shared ones first, then private ones)."""
    block_hashes: list[int] = field(default_factory=list)
    """Prefix-cache key of each full block of prompt + planned output, in order (empty: nothing cacheable)."""
    shared: int = 0
    """How many of the leading ``blocks`` are cached blocks, shared by reference."""
    cached_tokens: int = 0
    """Prompt tokens found in the prefix cache at first admission (what ``usage`` reports)."""
    admitted_at: float | None = None
    """Start of the iteration that first scheduled it (vLLM's ``scheduled_ts``, which ignores preemptions)."""
    first_token_at: float | None = None
    """End of the iteration that emitted its first token (None for a prefill-only sequence)."""
    last_token_at: float | None = None
    """End of the iteration that emitted its latest token."""
    preemptions: int = 0
    running: bool = False
    """In the batch (holds a slot); False while waiting, after preemption and when done."""
    adapter: str | None = None
    """The LoRA adapter it runs with (None: the base model)."""
    lora_loaded: bool = False
    """An admission of it had to load its adapter (paid ``lora_load_ms``)."""

    @property
    def context(self) -> int:
        return self.prompt_tokens + self.generated

    def stages(self) -> StageTimes | None:
        """Its stage times once it has a first token (None before, and for a prefill-only sequence)."""
        if self.admitted_at is None or self.first_token_at is None or self.last_token_at is None:
            return None
        admitted = max(self.admitted_at, self.arrival)
        first = max(self.first_token_at, admitted)
        last = max(self.last_token_at, first)
        return StageTimes(queue_s=admitted - self.arrival, prefill_s=first - admitted, decode_s=last - first,
                          inference_s=last - admitted)


@dataclass(frozen=True, slots=True)
class StageTimes:
    """Where one request's time went, as vLLM v1 splits it (seconds on the engine's clock)."""

    queue_s: float
    """Arrival → first scheduled (vLLM ``queued_time``)."""
    prefill_s: float
    """First scheduled → first token (``prefill_time``; includes any preemption before it)."""
    decode_s: float
    """First token → last token (``decode_time``)."""
    inference_s: float
    """First scheduled → last token (``inference_time`` = prefill + decode)."""


@dataclass(slots=True)
class Emission:
    """Tokens that become visible to the client at the end of the iteration."""

    seq: Sequence
    tokens: int
    finished: bool


@dataclass
class Iteration:
    duration_s: float
    emissions: list[Emission]
    decode_seqs: int
    prefill_tokens: int
    admitted: list[Sequence] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)


class Engine:
    """The batching model. Usage (fake clock)::

        engine = Engine(EngineConfig(max_num_seqs=4))
        engine.add(Sequence(id=1, prompt_tokens=100, output_tokens=20, arrival=0.0))
        now = 0.0
        while not engine.idle:
            it = engine.step(now)
            now += it.duration_s        # tokens in it.emissions are visible at this time
    """

    def __init__(self, config: EngineConfig, *, epoch: float = 0.0) -> None:
        """``epoch``: the caller's time the stall schedule counts from (the first stall begins at
        ``epoch + engine_stall_every_s``)."""
        bad = config.problems()
        if bad:
            raise ValueError("invalid engine configuration: " + "; ".join(bad))
        self.config = config
        self.total_blocks = config.kv_cache_tokens // config.block_size
        self.kv = BlockPool(self.total_blocks, config.block_size, config.prefix_cache == "on")
        self.loras = LoraSlots(config.max_loras)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self._rng = random.Random(config.seed)
        self.epoch = epoch
        # Cumulative counters, exported as Prometheus counters.
        self.preemptions_total = 0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.prefix_cache_queries_total = 0
        self.prefix_cache_hits_total = 0
        self.shapes_seen: set[int] = set()  # prompt-length buckets compiled (``shape_compile_ms``)

    # -- queue management -------------------------------------------------------------------
    @property
    def idle(self) -> bool:
        return not self.running and not self.waiting

    @property
    def prefix_caching(self) -> bool:
        return self.kv.caching

    @property
    def used_blocks(self) -> int:
        """Blocks held by running sequences; cached blocks nobody holds are free."""
        return self.kv.used

    @property
    def kv_usage(self) -> float:
        return self.kv.used / self.total_blocks

    def add(self, seq: Sequence) -> None:
        """Queue a request. The API layer has already checked it fits the context window."""
        seq.prefill_target = seq.prompt_tokens
        self.waiting.append(seq)

    def abort(self, seq: Sequence) -> None:
        """Drop a request (client went away); frees its slot and KV blocks. Unknown ones are ignored."""
        if seq.running:
            self.running.remove(seq)
            seq.running = False
            self._free(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)

    # -- one iteration ----------------------------------------------------------------------
    def step(self, now: float) -> Iteration:
        """Schedule and account one iteration that starts at ``now`` (or when a stall under way ends): decode, go on
        with chunked prefills, admit from the queue, all within one token budget; then time the iteration and
        deliver its tokens."""
        stalls = self.config.engine_stall_every_s
        start = self._resume_at(now)
        emissions: list[Emission] = []
        preempted: list[Sequence] = []
        budget, decode_seqs, decode_context = self._decode(self.config.max_num_batched_tokens, emissions, preempted)
        budget, prefill_tokens = self._prefill(budget, emissions)
        admitted, admitted_tokens, load_ms = self._admit(start, budget, emissions)
        prefill_tokens += admitted_tokens
        ms = self._duration_ms(decode_seqs, decode_context, prefill_tokens) + load_ms
        end = self._stalled_end(start, start + ms / 1000) if stalls else now + ms / 1000
        self._deliver(emissions, end)
        return Iteration(end - now if stalls else ms / 1000, emissions, decode_seqs, prefill_tokens, admitted,
                         preempted)

    def _decode(self, budget: int, emissions: list[Emission], preempted: list[Sequence]) -> tuple[int, int, int]:
        """1. Decode, oldest admissions first; preempt the newest when KV runs out. The budget left, the decoding
        sequences and their context tokens."""
        chunk_tokens = self.config.tokens_per_chunk
        decode_seqs = decode_context = 0
        for seq in list(self.running):
            if not seq.running or seq.prefilled < seq.prefill_target or budget <= 0:
                continue
            k = min(chunk_tokens, seq.output_tokens - seq.generated, budget)
            while not self.kv.grow(seq, seq.context + k):
                victim = self.running[-1]
                self._preempt(victim)
                preempted.append(victim)
                if victim is seq:
                    break
            if not seq.running:
                continue
            budget -= k
            decode_seqs += 1
            decode_context += seq.context
            seq.generated += k
            emissions.append(Emission(seq, k, seq.generated >= seq.output_tokens))
        return budget, decode_seqs, decode_context

    def _prefill(self, budget: int, emissions: list[Emission]) -> tuple[int, int]:
        """2. Continue chunked prefills already admitted. The budget left and the tokens prefilled."""
        prefill_tokens = 0
        for seq in self.running:
            if budget <= 0:
                break
            if seq.prefilled < seq.prefill_target:
                chunk = min(seq.prefill_target - seq.prefilled, budget)
                budget -= chunk
                prefill_tokens += chunk
                seq.prefilled += chunk
                if seq.prefilled == seq.prefill_target:
                    self._prefill_done(seq, emissions)
        return budget, prefill_tokens

    def _admit(self, start: float, budget: int, emissions: list[Emission]) -> tuple[list[Sequence], int, float]:
        """3. Admit FCFS while a slot, KV room for the whole prompt, and budget remain; prefix-cache hits are not
        prefilled; a sequence whose adapter does not fit the batch is skipped. The sequences admitted, the tokens of
        their first prefill chunks, and the milliseconds of adapter loads."""
        cfg = self.config
        admitted: list[Sequence] = []
        skipped: list[Sequence] = []
        prefill_tokens, load_ms = 0, 0.0
        while self.waiting and budget > 0 and len(self.running) < cfg.max_num_seqs:
            seq = self.waiting[0]
            if seq.adapter is not None and not self.loras.fits(seq.adapter):
                skipped.append(self.waiting.popleft())
                continue
            hits = self.kv.hits(seq, seq.context)
            if not self.kv.allocate(seq, seq.context + 1, hits):
                break
            cached = hits * cfg.block_size
            seq.prefill_target = seq.context - cached
            if seq.preemptions == 0:
                seq.cached_tokens = cached
                self.prompt_tokens_total += seq.prompt_tokens
                if self.kv.caching:
                    self.prefix_cache_queries_total += seq.prompt_tokens
                    self.prefix_cache_hits_total += cached
            self.waiting.popleft()
            if seq.adapter is not None and self.loras.acquire(seq.adapter):
                seq.lora_loaded = True
                load_ms += cfg.lora_load_ms
            if cfg.shape_compile_ms and (shape := (seq.prompt_tokens - 1).bit_length()) not in self.shapes_seen:
                self.shapes_seen.add(shape)
                load_ms += cfg.shape_compile_ms
            seq.running = True
            if seq.admitted_at is None:
                seq.admitted_at = start
            self.running.append(seq)
            admitted.append(seq)
            chunk = min(seq.prefill_target, budget)
            budget -= chunk
            prefill_tokens += chunk
            seq.prefilled = chunk
            if seq.prefilled == seq.prefill_target:
                self._prefill_done(seq, emissions)
        self.waiting.extendleft(reversed(skipped))
        return admitted, prefill_tokens, load_ms

    def _duration_ms(self, decode_seqs: int, decode_context: int, prefill_tokens: int) -> float:
        """The iteration's cost in milliseconds, before stalls (the one draw of the jitter's RNG per iteration)."""
        cfg = self.config
        ms = (cfg.iter_base_ms + cfg.iter_per_seq_ms * decode_seqs
              + cfg.iter_per_kv_ktoken_ms * decode_context / 1000
              + cfg.prefill_per_ktoken_ms * prefill_tokens / 1000)
        if cfg.jitter:
            ms *= max(0.1, self._rng.gauss(1.0, cfg.jitter))
        return ms

    def _deliver(self, emissions: list[Emission], end: float) -> None:
        """The iteration's tokens become visible at ``end``: token times, the generation counter, and finished
        sequences leave the batch."""
        finished = False
        for e in emissions:
            if e.tokens:
                if e.seq.first_token_at is None:
                    e.seq.first_token_at = end
                e.seq.last_token_at = end
            self.generation_tokens_total += e.tokens
            if e.finished:
                finished = True
                e.seq.running = False
                self._free(e.seq)
        if finished:
            self.running = [s for s in self.running if s.running]

    # -- engine stalls ----------------------------------------------------------------------
    def _resume_at(self, now: float) -> float:
        """``now``, or the end of the stall ``now`` falls in."""
        every = self.config.engine_stall_every_s
        if not every:
            return now
        k = math.floor((now - self.epoch) / every)
        stall_end = self.epoch + k * every + self.config.engine_stall_s
        return stall_end if k >= 1 and now < stall_end else now

    def _stalled_end(self, start: float, end: float) -> float:
        """``end`` of work begun at ``start``, pushed back by every stall that begins before it is done."""
        every, pause = self.config.engine_stall_every_s, self.config.engine_stall_s
        begins = self.epoch + (max(0, math.floor((start - self.epoch) / every)) + 1) * every
        while begins < end:
            end += pause
            begins += every
        return end

    def _prefill_done(self, seq: Sequence, emissions: list[Emission]) -> None:
        """Prefill complete: its blocks are computed, so cached, and it emits its first token (a prefill-only
        sequence emits no token and is done)."""
        self.kv.cache(seq, seq.context)
        if seq.output_tokens == 0:
            emissions.append(Emission(seq, 0, True))
            return
        seq.generated += 1
        emissions.append(Emission(seq, 1, seq.generated >= seq.output_tokens))

    # -- KV blocks --------------------------------------------------------------------------
    def _free(self, seq: Sequence) -> None:
        """Release ``seq``'s blocks, caching first those it computed: all but the last sampled token once
        prefill is done (that token's KV would be computed next iteration), else the prefill so far."""
        if seq.prefilled >= seq.prefill_target:
            computed = seq.context - 1
        else:
            computed = seq.context - seq.prefill_target + seq.prefilled
        self.kv.cache(seq, computed)
        self.kv.release(seq)
        if seq.adapter is not None:
            self.loras.release(seq.adapter)

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        seq.running = False
        self._free(seq)
        seq.preemptions += 1
        self.preemptions_total += 1
        seq.prefilled = 0
        seq.prefill_target = seq.context  # recompute prompt + generated
        self.waiting.appendleft(seq)
