"""The prefix cache on a fake clock: units and hash chains, hits and their prefill saving, eviction under KV
pressure, shared blocks counted once, preemption, counters, and the cache switched off."""

from __future__ import annotations

import json
import random

import pytest

from harness.sim.engine import Engine, EngineConfig, Sequence
from harness.sim.openai import OutputPolicy, output_words, parse_request, plain_text
from harness.sim.prefix import block_keys, chain_hashes, chat_units, message_hash

CFG = EngineConfig(max_num_seqs=8, kv_cache_tokens=65_536, block_size=16, max_num_batched_tokens=2048,
                   max_model_len=4096, iter_base_ms=5.0, iter_per_seq_ms=0.5, prefill_per_ktoken_ms=20.0)
OFF = EngineConfig(**{**CFG.__dict__, "prefix_cache": "off"})


def words(tag: str, n: int) -> list[str]:
    return [f"{tag}{i}" for i in range(n)]


def seq(i: int, units: list[str], output: int = 4, block_size: int = 16) -> Sequence:
    return Sequence(i, len(units), output, 0.0, block_hashes=block_keys(units, len(units), output_words(output),
                                                                        block_size))


def run(engine: Engine, *seqs: Sequence, now: float = 0.0) -> tuple[float, list[float]]:
    """Add ``seqs`` and step until idle; returns the end time and every iteration's duration."""
    for s in seqs:
        engine.add(s)
    durations = []
    while not engine.idle:
        it = engine.step(now)
        now += it.duration_s
        durations.append(it.duration_s)
        check_blocks(engine)
    return now, durations


def check_blocks(engine: Engine) -> None:
    kv = engine.kv
    assert kv.used + kv.empty + len(kv._evictable) == kv.total == engine.total_blocks
    assert kv.used == sum(s.blocks - s.shared for s in engine.running) + sum(1 for n in kv._refs.values() if n)


# -- units and hashes -----------------------------------------------------------------------------------------

def test_a_turn_and_its_answer_are_a_prefix_of_the_next_turn():
    turn1 = [("system", "you are terse".split()), ("user", "one two three four".split())]
    answer = plain_text(9)
    turn2 = [*turn1, ("assistant", answer.split()), ("user", "and now".split())]
    assert output_words(9) == answer.split() and output_words(300) == plain_text(300).split()
    before = chat_units(turn1) + output_words(9)
    assert chat_units(turn2)[:len(before)] == before
    assert chat_units(turn1)[:3] == ["<|im_start|>", "system", "\n"] and chat_units(turn1)[-3:] == [
        "<|im_start|>", "assistant", "\n"]


def test_chain_hashes_cover_full_blocks_and_their_whole_prefix():
    a = chain_hashes(words("a", 50), 16)
    assert len(a) == 3  # 48 of 50 units: the partial tail is never hashed
    b = chain_hashes(["x", *words("a", 50)[1:]], 16)
    assert all(x != y for x, y in zip(a, b, strict=True))  # a change in block 0 changes every later hash
    c = chain_hashes(words("a", 40) + words("z", 10), 16)
    assert c[:2] == a[:2] and c[2] != a[2]


def test_chat_request_keys_extend_the_previous_turn_and_token_counts_match_units():
    def req(messages: list[dict], max_tokens: int, per_word: float = 1.0):
        body = json.dumps({"model": "m", "messages": messages, "max_tokens": max_tokens, "ignore_eos": True})
        return parse_request("chat", body.encode(), models=["m"], max_model_len=4096,
                             policy=OutputPolicy(tokens_per_word=per_word), rng=random.Random(0), block_size=16)

    history = [{"role": "system", "content": " ".join(words("s", 40))}, {"role": "user", "content": "hello there"}]
    one = req(history, 30)
    assert one.prompt_tokens == 3 + (4 + 40) + (4 + 2) and len(one.block_keys) == (one.prompt_tokens + 30) // 16
    two = req([*history, {"role": "assistant", "content": plain_text(30)}, {"role": "user", "content": "more"}], 5)
    assert two.block_keys[:len(one.block_keys)] == one.block_keys
    assert two.messages[:2] == [("system", history[0]["content"]), ("user", "hello there")]
    assert message_hash("user", "hello there") == message_hash(*two.messages[1]) != message_hash("user", "hello")
    # Units are words at tokens_per_word 1.3: keys are per KV block, proportionally; turn 2 still extends turn 1
    # through the system prompt (its blocks end before the first place the two prompts' ratios differ).
    one, two = req(history, 30, 1.3), req([*history, {"role": "user", "content": "more"}], 5, 1.3)
    assert one.prompt_tokens == 3 + (4 + 52) + (4 + 3)
    assert len(one.block_keys) == 5  # as far as full unit blocks reach: 53 + 30 units make 5 (96 tokens, 6 blocks)
    assert two.block_keys[:2] == one.block_keys[:2]


# -- the engine -----------------------------------------------------------------------------------------------

def test_an_identical_prompt_hits_and_its_prefill_costs_less():
    engine = Engine(CFG)
    units = words("p", 1000)
    _, first = run(engine, seq(1, units))
    again = seq(2, units)
    _, second = run(engine, again)
    assert again.cached_tokens == 992  # 62 of 62 full blocks; (1000 - 1) // 16 = 62
    assert first[0] == pytest.approx((5.0 + 20.0 * 1000 / 1000) / 1000)
    assert second[0] == pytest.approx((5.0 + 20.0 * 8 / 1000) / 1000)  # only the last 8 tokens prefilled
    # All hit: the last block is recomputed anyway (whole blocks, at least the last token, as vLLM v1).
    exact = words("e", 64)
    run(engine, seq(3, exact))
    full = seq(4, exact)
    run(engine, full)
    assert full.cached_tokens == 48


def test_a_different_prefix_misses_and_a_shared_system_prompt_hits_its_blocks():
    engine = Engine(CFG)
    system = words("sys", 100)
    run(engine, seq(1, system + words("u", 30)))
    other = seq(2, words("other", 130))
    shared = seq(3, system + words("v", 30))
    run(engine, other, shared)
    assert other.cached_tokens == 0
    assert shared.cached_tokens == 96  # the 6 blocks wholly inside the system prompt


def test_output_blocks_are_cached_when_the_request_finishes():
    engine = Engine(CFG)
    prompt = words("q", 40)
    run(engine, seq(1, prompt, output=50))
    follow = prompt + output_words(50) + words("next", 20)
    nxt = seq(2, follow)
    run(engine, nxt)
    assert nxt.cached_tokens == 80  # (40 + 50 - 1) // 16 = 5 blocks computed; the last sampled token was not


def test_eviction_under_kv_pressure_is_lru_and_only_when_room_is_needed():
    cfg = EngineConfig(**{**CFG.__dict__, "kv_cache_tokens": 4096, "max_model_len": 1024})  # 256 blocks
    engine = Engine(cfg)
    first = words("first", 500)
    run(engine, seq(0, first))
    assert engine.used_blocks == 0 and engine.kv_usage == 0 and engine.kv.cached == 31  # cached but free
    for i in range(1, 7):  # 7 × 32 blocks fit in 256: nothing evicted yet
        run(engine, seq(i, words(f"d{i}", 500)))
    assert engine.kv.evictions == 0
    early = seq(7, first)
    run(engine, early)
    assert early.cached_tokens == 496
    for i in range(8, 20):  # many distinct prompts: the least recently used go
        run(engine, seq(i, words(f"d{i}", 500)))
    assert engine.kv.evictions > 0 and engine.kv.cached <= engine.total_blocks
    late = seq(20, first)
    run(engine, late)
    assert late.cached_tokens == 0


def test_shared_blocks_are_counted_once_while_running():
    engine = Engine(CFG)
    system = words("sys", 320)  # 20 blocks
    run(engine, seq(1, system + words("a", 10)))
    users = [seq(10 + i, system + words(f"u{i}", 10), output=200) for i in range(4)]
    for s in users:
        engine.add(s)
    engine.step(0.0)
    assert all(s.cached_tokens == 320 and s.shared == 20 for s in users)
    # 4 × 21 blocks each if counted per sequence; the 20 shared ones count once.
    assert engine.used_blocks == 20 + 4 * 1
    check_blocks(engine)


def test_a_prompt_admitted_right_after_an_identical_one_hits_it():
    engine = Engine(CFG)
    units = words("twin", 160)
    a, b = seq(1, units, output=100), seq(2, units, output=100)
    engine.add(a)
    engine.add(b)
    it = engine.step(0.0)  # a is prefilled, so cached, before b is admitted (vLLM v1 caches when it schedules)
    assert (a.cached_tokens, b.cached_tokens) == (0, 144) and it.prefill_tokens == 160 + 16
    assert engine.used_blocks == 11 + 1  # b's first 9 blocks are a's; a's 10th fills once a's prefill is done
    check_blocks(engine)


def test_a_block_computed_twice_is_kept_once():
    engine = Engine(CFG)
    prompt = words("q", 40)
    first = seq(1, prompt, output=50)
    engine.add(first)
    engine.step(0.0)
    # The next turn arrives while the first still decodes (a test can do that): it computes the first's output
    # blocks itself, and caches them first.
    nxt = seq(2, prompt + output_words(50) + words("next", 20), output=200)
    engine.add(nxt)
    engine.step(0.0)
    assert nxt.cached_tokens == 32 and nxt.shared == 110 // 16
    while first.generated < 50:
        engine.step(0.0)
        check_blocks(engine)
    assert first.blocks == 0 and nxt.running
    assert engine.used_blocks == nxt.blocks  # the first's copies of blocks 2-4 went back, not into the cache
    run(engine)
    assert engine.used_blocks == 0


def test_preemption_recomputes_from_the_cache_and_everything_completes():
    cfg = EngineConfig(max_num_seqs=16, kv_cache_tokens=4096, block_size=16, max_model_len=2048,
                       iter_base_ms=1.0, iter_per_seq_ms=0.1, prefill_per_ktoken_ms=1.0)
    engine = Engine(cfg)
    system = words("sys", 200)
    seqs = [seq(i, system + words(f"u{i}", 100), output=400) for i in range(12)]
    run(engine, *seqs)
    assert engine.preemptions_total > 0
    assert all(s.generated == 400 for s in seqs) and engine.used_blocks == 0 and engine.idle
    assert engine.prefix_cache_hits_total == sum(s.cached_tokens for s in seqs)


def test_counters_are_the_sums_of_prompt_and_cached_tokens():
    engine = Engine(CFG)
    rng = random.Random(3)
    seqs = []
    for i in range(40):
        units = words(f"sys{rng.randrange(3)}", 64 + 16 * rng.randrange(4)) + words(f"u{i}", rng.randrange(1, 50))
        seqs.append(seq(i, units, output=rng.randrange(1, 30)))
    now = 0.0
    for batch in range(0, 40, 5):
        now, _ = run(engine, *seqs[batch:batch + 5], now=now)
    assert engine.prefix_cache_hits_total == sum(s.cached_tokens for s in seqs) > 0
    assert engine.prefix_cache_queries_total == sum(s.prompt_tokens for s in seqs) == engine.prompt_tokens_total


def test_with_the_cache_off_nothing_is_cached_and_iteration_times_are_unchanged():
    def workload(with_keys: bool) -> list[Sequence]:
        system = words("sys", 300)
        out = [seq(i, system + words(f"u{i % 3}", 50), output=20 + i) for i in range(20)]
        if not with_keys:
            for s in out:
                s.block_hashes = []
        return out

    def times(cfg: EngineConfig, with_keys: bool) -> tuple[list[float], Engine, list[Sequence]]:
        engine, seqs = Engine(cfg), workload(with_keys)
        now = 0.0
        durations = []
        for batch in range(0, 20, 4):
            now, d = run(engine, *seqs[batch:batch + 4], now=now)
            durations += d
        return durations, engine, seqs

    baseline, _, _ = times(OFF, with_keys=False)  # no keys: what the engine did before it had a cache
    off, engine, seqs = times(OFF, with_keys=True)
    assert off == baseline
    assert engine.kv.cached == 0 and all(s.cached_tokens == 0 for s in seqs)
    assert engine.prefix_cache_queries_total == engine.prefix_cache_hits_total == 0
    on, engine, _ = times(CFG, with_keys=True)
    assert sum(on) < sum(off) and engine.prefix_cache_hits_total > 0
    assert times(CFG, with_keys=False)[0] == baseline  # sequences without keys cache nothing


def test_prefix_cache_setting_is_checked():
    with pytest.raises(ValueError, match="prefix_cache must be 'on' or 'off', got 'maybe'"):
        Engine(EngineConfig(prefix_cache="maybe"))


@pytest.mark.parametrize("seed", range(5))
def test_block_accounting_holds_under_random_load_with_preemption_and_aborts(seed):
    """Shared prefixes, multi-turn growth, a small KV cache (preemption, eviction) and random aborts: after every
    iteration used + empty + evictable = total and used = private blocks + referenced cached ones."""
    rng = random.Random(seed)
    cfg = EngineConfig(max_num_seqs=12, kv_cache_tokens=2048, block_size=16, max_num_batched_tokens=512,
                       max_model_len=2048, iter_base_ms=1.0, iter_per_seq_ms=0.1, prefill_per_ktoken_ms=1.0)
    engine = Engine(cfg)
    history = {u: words(f"sys{u % 3}", 64) for u in range(10)}
    live: list[Sequence] = []
    owner: dict[int, int] = {}
    now, next_id = 0.0, 0
    for _ in range(400):
        if len(live) < 20 and rng.random() < 0.7:
            u = rng.randrange(10)
            if len(history[u]) > 1200:
                history[u] = words(f"sys{u % 3}", 64)
            history[u] = history[u] + words(f"t{next_id}-", rng.randrange(1, 40))
            next_id += 1
            s = seq(next_id, history[u], output=rng.randrange(1, 400))
            owner[s.id] = u
            engine.add(s)
            live.append(s)
        if live and rng.random() < 0.05:
            engine.abort(live.pop(rng.randrange(len(live))))
        it = engine.step(now)
        now += it.duration_s
        check_blocks(engine)
        for e in it.emissions:
            if e.finished and e.seq in live:
                live.remove(e.seq)
                history[owner[e.seq.id]] += output_words(e.seq.output_tokens)
    run(engine, now=now)
    assert engine.used_blocks == 0 and engine.prefix_cache_hits_total > 0
    assert engine.preemptions_total > 0 and engine.kv.evictions > 0
