"""LoRA adapter slots (``harness/sim/lora.py``) on plain names, and the engine that pays for loads on a fake clock."""

from __future__ import annotations

import pytest

from harness.sim.engine import Engine, EngineConfig, Sequence
from harness.sim.lora import LoraSlots

# --- the slots alone ------------------------------------------------------------------------------------------------


def test_a_resident_adapter_loads_once():
    slots = LoraSlots(max_loras=2)
    assert slots.acquire("a") is True
    assert slots.acquire("a") is False  # in use: no load
    slots.release("a")
    slots.release("a")
    assert slots.acquire("a") is False  # idle but still resident
    assert slots.loads_total == 1 and slots.evictions_total == 0


def test_the_least_recently_used_idle_adapter_is_evicted():
    slots = LoraSlots(max_loras=2)
    for name in ("a", "b", "a"):  # a is now the most recent
        slots.acquire(name)
        slots.release(name)
    assert slots.acquire("c") is True
    assert list(slots.resident) == ["a", "c"]  # b went, not a
    assert slots.acquire("b") is True
    assert list(slots.resident) == ["c", "b"]  # a (least recent, idle) went; c is in use anyway
    assert slots.evictions_total == 2


def test_an_adapter_in_use_is_never_evicted_and_blocks_one_too_many():
    slots = LoraSlots(max_loras=2)
    slots.acquire("a")
    slots.acquire("b")
    assert not slots.fits("c") and slots.fits("a") and slots.fits("b")
    with pytest.raises(ValueError, match="2 adapters in use, max 2"):
        slots.acquire("c")
    slots.release("b")
    assert slots.fits("c") and slots.acquire("c") is True
    assert set(slots.resident) == {"a", "c"} and dict(slots.active) == {"a": 1, "c": 1}


def test_max_loras_must_be_positive():
    with pytest.raises(ValueError, match="max_loras must be >= 1, got 0"):
        LoraSlots(0)
    assert "max_loras must be >= 1, got 0" in EngineConfig(max_loras=0).problems()
    assert "lora_load_ms must be >= 0, got -1" in EngineConfig(lora_load_ms=-1).problems()


# --- the engine -----------------------------------------------------------------------------------------------------

CFG = EngineConfig(max_num_seqs=8, kv_cache_tokens=8192, max_model_len=4096, iter_base_ms=10.0, iter_per_seq_ms=0.0,
                   prefill_per_ktoken_ms=0.0, prefix_cache="off", max_loras=1, lora_load_ms=100.0)


def seq(i: int, adapter: str | None, out: int = 3) -> Sequence:
    return Sequence(i, prompt_tokens=16, output_tokens=out, arrival=0.0, adapter=adapter)


def test_the_iteration_that_loads_an_adapter_costs_the_load_once():
    engine = Engine(CFG)
    first = seq(1, "a")
    engine.add(first)
    it = engine.step(0.0)
    assert it.duration_s == pytest.approx(0.110) and first.lora_loaded
    later = seq(2, "a")
    engine.add(later)
    assert engine.step(it.duration_s).duration_s == pytest.approx(0.010)  # a is resident
    assert later.running and not later.lora_loaded


def test_base_model_sequences_never_pay_or_wait_for_adapters():
    engine = Engine(CFG)
    base = seq(1, None)
    engine.add(base)
    assert engine.step(0.0).duration_s == pytest.approx(0.010) and not base.lora_loaded
    assert engine.loras.loads_total == 0


def test_one_adapter_too_many_is_skipped_not_blocking_the_queue():
    engine = Engine(CFG)
    a, b, base = seq(1, "a", out=3), seq(2, "b", out=2), seq(3, None, out=2)
    for s in (a, b, base):
        engine.add(s)
    it = engine.step(0.0)
    assert [s.id for s in it.admitted] == [1, 3]  # b skipped, base went past it
    assert list(engine.waiting) == [b] and it.duration_s == pytest.approx(0.110)
    now = it.duration_s
    while b.admitted_at is None:
        it = engine.step(now)
        now += it.duration_s
    assert a.generated == 3 and not a.running  # b waited for a to finish
    assert b.lora_loaded and list(engine.loras.resident) == ["b"]
    assert it.duration_s == pytest.approx(0.110)


def test_skipped_sequences_keep_their_order():
    engine = Engine(CFG)
    engine.add(seq(1, "a", out=50))
    engine.step(0.0)
    waiting = [seq(2, "b"), seq(3, "c"), seq(4, "b")]
    for s in waiting:
        engine.add(s)
    engine.step(1.0)
    assert list(engine.waiting) == waiting


def busy_with_a() -> tuple[Engine, Sequence, Sequence]:
    """An engine running a long request of adapter a, with one of adapter b waiting for the only slot."""
    engine = Engine(CFG)
    a, b = seq(1, "a", out=100), seq(2, "b")
    engine.add(a)
    engine.step(0.0)
    engine.add(b)
    return engine, a, b


def test_an_aborted_sequence_frees_its_adapter():
    engine, a, b = busy_with_a()
    assert b not in engine.step(0.5).admitted
    engine.abort(a)
    assert "a" not in engine.loras.active
    it = engine.step(1.0)
    assert b in it.admitted and b.lora_loaded and it.duration_s == pytest.approx(0.110)


def test_a_preempted_sequence_frees_its_adapter_and_comes_back_without_a_load():
    engine, a, b = busy_with_a()
    engine._preempt(a)
    assert "a" not in engine.loras.active and list(engine.waiting) == [a, b]
    it = engine.step(1.0)
    assert it.admitted == [a] and it.duration_s == pytest.approx(0.010)  # a still resident: no second load
    assert list(engine.waiting) == [b] and engine.loras.loads_total == 1
