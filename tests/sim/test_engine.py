"""The batching model on a fake clock: timing, admission, chunked prefill, preemption, the knee's shape."""

from __future__ import annotations

import statistics

import pytest

from harness.sim.engine import Engine, EngineConfig, Sequence

FAST = EngineConfig(max_num_seqs=8, kv_cache_tokens=65_536, max_num_batched_tokens=2048, max_model_len=4096,
                    iter_base_ms=5.0, iter_per_seq_ms=0.5, prefill_per_ktoken_ms=20.0)


def run_closed_loop(cfg: EngineConfig, users: int, per_user: int, prompt: int = 200, output: int = 40):
    """N closed-loop users on a fake clock; returns (ttfts, e2es, finished count, end time, engine)."""
    engine = Engine(cfg)
    now, next_id, left = 0.0, 0, dict.fromkeys(range(users), per_user)
    owner: dict[int, int] = {}
    ttft, e2e, firsts = [], [], set()

    def submit(user: int) -> None:
        nonlocal next_id
        next_id += 1
        owner[next_id] = user
        left[user] -= 1
        engine.add(Sequence(next_id, prompt, output, now))

    for u in range(users):
        submit(u)
    while not engine.idle:
        it = engine.step(now)
        now += it.duration_s
        assert len(engine.running) <= cfg.max_num_seqs
        for e in it.emissions:
            if e.seq.id not in firsts:
                firsts.add(e.seq.id)
                ttft.append(now - e.seq.arrival)
            if e.finished:
                assert e.seq.generated == output
                e2e.append(now - e.seq.arrival)
                if left[owner[e.seq.id]]:
                    submit(owner[e.seq.id])
    return ttft, e2e, now, engine


def test_iteration_time_follows_the_formula():
    engine = Engine(FAST)
    engine.add(Sequence(1, prompt_tokens=100, output_tokens=3, arrival=0.0))
    first = engine.step(0.0)
    assert first.prefill_tokens == 100 and first.decode_seqs == 0
    assert first.duration_s == pytest.approx((5.0 + 20.0 * 0.1) / 1000)
    assert [(e.tokens, e.finished) for e in first.emissions] == [(1, False)]  # prefill emits the first token
    second = engine.step(first.duration_s)
    assert second.decode_seqs == 1 and second.duration_s == pytest.approx(5.5 / 1000)
    third = engine.step(0.1)
    assert [(e.tokens, e.finished) for e in third.emissions] == [(1, True)]
    assert engine.idle and engine.used_blocks == 0
    assert engine.generation_tokens_total == 3 and engine.prompt_tokens_total == 100


def test_chunked_prefill_spreads_a_long_prompt_over_iterations():
    engine = Engine(FAST)
    engine.add(Sequence(1, prompt_tokens=5000, output_tokens=2, arrival=0.0))
    steps = [engine.step(0.0) for _ in range(3)]
    assert [s.prefill_tokens for s in steps] == [2048, 2048, 904]
    assert [len(s.emissions) for s in steps] == [0, 0, 1]


def test_admission_is_fcfs_and_bounded_by_slots():
    engine = Engine(FAST)
    for i in range(12):
        engine.add(Sequence(i, prompt_tokens=10, output_tokens=100, arrival=0.0))
    it = engine.step(0.0)
    assert [s.id for s in it.admitted] == list(range(8))
    assert len(engine.running) == 8 and [s.id for s in engine.waiting] == [8, 9, 10, 11]


def test_head_of_line_blocks_when_kv_is_short():
    cfg = EngineConfig(max_num_seqs=8, kv_cache_tokens=4096, max_model_len=4096, max_num_batched_tokens=8192)
    engine = Engine(cfg)
    engine.add(Sequence(1, prompt_tokens=3000, output_tokens=5, arrival=0.0))
    engine.add(Sequence(2, prompt_tokens=2000, output_tokens=5, arrival=0.0))
    engine.add(Sequence(3, prompt_tokens=10, output_tokens=5, arrival=0.0))
    engine.step(0.0)
    assert [s.id for s in engine.running] == [1]
    assert [s.id for s in engine.waiting] == [2, 3]  # 3 would fit but does not jump the queue


def test_kv_exhaustion_preempts_newest_and_everything_still_completes():
    cfg = EngineConfig(max_num_seqs=16, kv_cache_tokens=4096, block_size=16, max_model_len=2048,
                       iter_base_ms=1.0, iter_per_seq_ms=0.1, prefill_per_ktoken_ms=1.0)
    _, e2e, _, engine = run_closed_loop(cfg, users=8, per_user=3, prompt=300, output=400)
    assert len(e2e) == 24
    assert engine.preemptions_total > 0
    assert engine.used_blocks == 0 and engine.idle
    assert engine.generation_tokens_total >= 24 * 400


def test_abort_frees_slot_and_blocks():
    engine = Engine(FAST)
    seqs = [Sequence(i, prompt_tokens=50, output_tokens=100, arrival=0.0) for i in range(10)]
    for s in seqs:
        engine.add(s)
    engine.step(0.0)
    engine.abort(seqs[0])
    engine.abort(seqs[9])  # still waiting
    assert len(engine.running) == 7 and [s.id for s in engine.waiting] == [8]
    for s in seqs[1:9]:
        engine.abort(s)
    assert engine.idle and engine.used_blocks == 0
    engine.abort(seqs[0])  # twice: ignored


def test_speculative_chunks_carry_several_tokens():
    engine = Engine(EngineConfig(tokens_per_chunk=3, max_model_len=4096))
    engine.add(Sequence(1, prompt_tokens=10, output_tokens=8, arrival=0.0))
    counts = []
    while not engine.idle:
        counts += [e.tokens for e in engine.step(0.0).emissions]
    assert counts == [1, 3, 3, 1]


def test_jitter_is_seeded():
    cfg = EngineConfig(jitter=0.2, seed=7)

    def durations() -> list[float]:
        engine = Engine(cfg)
        engine.add(Sequence(1, prompt_tokens=10, output_tokens=20, arrival=0.0))
        return [engine.step(0.0).duration_s for _ in range(20)]

    a = durations()
    assert a == durations() and len(set(a)) > 10


def test_ttft_is_flat_up_to_the_slots_then_rises():
    """The knee's shape: users <= max_num_seqs own a slot; one more user waits a whole service time."""
    median_ttft = {}
    throughput = {}
    for users in (1, 2, 4, 8, 12, 16):
        ttft, e2e, end, _ = run_closed_loop(FAST, users, per_user=6, prompt=20)
        median_ttft[users] = statistics.median(ttft)
        throughput[users] = len(e2e) / end
    flat = median_ttft[1]
    for users in (2, 4, 8):
        assert median_ttft[users] < 2.5 * flat, median_ttft
    service = statistics.median(run_closed_loop(FAST, 8, per_user=2, prompt=20)[1])
    assert median_ttft[16] > 0.5 * service > 5 * flat, (median_ttft, service)
    assert median_ttft[16] > median_ttft[12] > median_ttft[8]
    # Throughput grows with users up to the slots, then plateaus.
    assert throughput[8] > 3 * throughput[1]
    assert throughput[16] < 1.15 * throughput[8]


def test_invalid_config_names_every_problem():
    with pytest.raises(ValueError) as err:
        Engine(EngineConfig(max_num_seqs=0, iter_base_ms=-1, kv_cache_tokens=100, max_model_len=200))
    msg = str(err.value)
    assert "max_num_seqs must be >= 1" in msg and "iter_base_ms must be >= 0" in msg and "kv_cache_tokens" in msg
