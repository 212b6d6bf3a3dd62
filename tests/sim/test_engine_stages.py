"""The engine's own stage times (vLLM's queue/prefill/decode/inference) and its stalls, on a fake clock."""

from __future__ import annotations

import dataclasses

import pytest

from harness.sim.engine import Engine, EngineConfig, Sequence

FAST = EngineConfig(max_num_seqs=4, kv_cache_tokens=65_536, max_num_batched_tokens=2048, max_model_len=4096,
                    iter_base_ms=5.0, iter_per_seq_ms=0.5, prefill_per_ktoken_ms=20.0)


def drive(engine: Engine, arrivals: list[tuple[float, Sequence]], until: float = 1e9):
    """Step on a fake clock, adding each sequence at its arrival; returns {id: (first emission time, last)}."""
    now, seen = 0.0, {}
    pending = sorted(arrivals, key=lambda a: a[0])
    while (pending or not engine.idle) and now < until:
        while pending and pending[0][0] <= now:
            engine.add(pending.pop(0)[1])
        if engine.idle:
            now = pending[0][0]
            continue
        it = engine.step(now)
        now += it.duration_s
        for e in it.emissions:
            first, _ = seen.get(e.seq.id, (now, now))
            seen[e.seq.id] = (first, now)
    return seen


def test_stage_times_add_up_and_match_the_clock():
    engine = Engine(FAST)
    seqs = [Sequence(i, prompt_tokens=300 + 50 * i, output_tokens=20 + i, arrival=0.001 * i) for i in range(10)]
    seen = drive(engine, [(s.arrival, s) for s in seqs])
    queued = 0
    for s in seqs:
        st = s.stages()
        first, last = seen[s.id]
        assert s.first_token_at == first and s.last_token_at == last  # visible at the iteration's end
        assert st.queue_s + st.prefill_s == pytest.approx(first - s.arrival)  # = the engine's TTFT
        assert st.prefill_s + st.decode_s == pytest.approx(st.inference_s)
        assert st.decode_s == pytest.approx(last - first)
        assert st.queue_s >= 0 and st.prefill_s > 0 and st.decode_s > 0
        queued += st.queue_s > 0.05
    assert queued >= 6  # 10 requests on 4 slots: most waited for a slot


def test_preemption_keeps_the_first_scheduled_time():
    cfg = EngineConfig(max_num_seqs=8, kv_cache_tokens=2048, block_size=16, max_model_len=2048,
                       iter_base_ms=1.0, iter_per_seq_ms=0.1, prefill_per_ktoken_ms=1.0)
    engine = Engine(cfg)
    seqs = [Sequence(i, prompt_tokens=200, output_tokens=600, arrival=0.0) for i in range(4)]
    drive(engine, [(0.0, s) for s in seqs])
    assert any(s.preemptions for s in seqs)
    for s in seqs:
        st = s.stages()
        assert s.admitted_at == 0.0 and st.queue_s == 0.0  # all admitted at once, before any preemption
        assert st.prefill_s + st.decode_s == pytest.approx(st.inference_s)


def test_prefill_only_has_no_stage_times():
    engine = Engine(FAST)
    seq = Sequence(1, prompt_tokens=100, output_tokens=0, arrival=0.0)
    drive(engine, [(0.0, seq)])
    assert seq.first_token_at is None and seq.stages() is None


STALLS = dataclasses.replace(FAST, iter_base_ms=10.0, iter_per_seq_ms=0.0, prefill_per_ktoken_ms=0.0,
                             engine_stall_every_s=1.0, engine_stall_s=0.3)


def test_a_stall_pushes_back_the_iteration_it_begins_in():
    engine = Engine(STALLS, epoch=0.0)
    engine.add(Sequence(1, prompt_tokens=10, output_tokens=1000, arrival=0.0))
    now, spans = 0.0, []
    while now < 2.5:
        it = engine.step(now)
        spans.append((now, it.duration_s))
        now += it.duration_s
    long = [(t, d) for t, d in spans if d > 0.011]
    assert [round(t) for t, _ in long] == [1, 2]  # one per stall, at 1 s and 2 s
    assert all(d == pytest.approx(0.31) for _, d in long)
    assert all(d == pytest.approx(0.010) for t, d in spans if (t, d) not in long)


def test_a_request_arriving_during_a_stall_is_scheduled_when_it_ends():
    engine = Engine(STALLS, epoch=100.0)
    seq = Sequence(1, prompt_tokens=10, output_tokens=3, arrival=101.1)
    engine.add(seq)
    it = engine.step(101.1)
    assert seq.admitted_at == pytest.approx(101.3) and it.duration_s == pytest.approx(0.2 + 0.010)
    assert seq.first_token_at == pytest.approx(101.31)
    now = 101.1 + it.duration_s
    while not engine.idle:
        now += engine.step(now).duration_s
    assert seq.stages().queue_s == pytest.approx(0.2)


@pytest.mark.parametrize(("every", "pause", "says"), [
    (1.0, 1.0, "must be shorter than engine_stall_every_s"),
    (0.0, 0.5, "needs engine_stall_every_s > 0"),
    (-1.0, 0.0, "engine_stall_every_s must be >= 0"),
])
def test_bad_stall_settings_are_named(every, pause, says):
    problems = dataclasses.replace(FAST, engine_stall_every_s=every, engine_stall_s=pause).problems()
    assert any(says in p for p in problems), problems


def test_a_request_stepped_on_a_planned_clock_behind_its_arrival_has_no_negative_stage():
    """The server's loop plans iterations on a clock that can run behind the real one (it catches up): a request
    that arrived after the planned start must not read as queued for a negative time (the report showed a server
    queue mean of -0.211 ms)."""
    engine = Engine(FAST)
    seq = Sequence(1, prompt_tokens=10, output_tokens=3, arrival=5.0)
    engine.add(seq)
    now = 4.9  # planned 100 ms behind the arrival: the first iteration even ends before it
    while not engine.idle:
        now += engine.step(now).duration_s
    st = seq.stages()
    assert seq.admitted_at == 4.9 and st.queue_s == 0.0 and st.prefill_s >= 0 and st.decode_s >= 0
    assert st.prefill_s + st.decode_s == pytest.approx(st.inference_s)
