"""LoRA adapters (``spec/adapters.py``): the block, and how each pick spreads the requests. Pure."""

from __future__ import annotations

import random
from collections import Counter

import pytest
import yaml

from harness.scenario import ScenarioError, parse_scenario
from harness.spec.adapters import AdapterSpec, adapter_picker


def _parse(endpoint: str, mix: str = ""):
    workload = f"{{mix: [{mix}]}}" if mix else "{input_tokens: 5, output_tokens: 5}"
    return parse_scenario(yaml.safe_load(f"name: x\nendpoint: {endpoint}\nworkload: {workload}\n"))


def test_names_or_a_pattern_and_a_pick():
    ep = _parse("{model: base, adapters: {count: 3, pattern: 'tenant-{i}', pick: zipf, zipf_s: 1.2}}").endpoint
    assert ep.adapters == AdapterSpec(("tenant-0", "tenant-1", "tenant-2"), "zipf", 1.2)
    assert _parse("{adapters: {names: [sql, chat]}}").endpoint.adapters == AdapterSpec(("sql", "chat"))
    s = _parse("{model: base, adapters: {count: 2}}",
               "{name: a, weight: 1, input_tokens: 5, output_tokens: 5}, "
               "{name: b, weight: 1, input_tokens: 5, output_tokens: 5, endpoint: {adapters: {names: [x]}}}, "
               "{name: c, weight: 1, input_tokens: 5, output_tokens: 5, endpoint: {model: other}}")
    a, b, c = (s.class_endpoint(k) for k in s.workload.mix)
    assert a.adapters.names == ("lora-0", "lora-1") and b.adapters.names == ("x",)
    assert c.adapters is None  # another model: the scenario model's adapters are not its


@pytest.mark.parametrize("block, message", [
    ("{}", "endpoint.adapters: give either names: [a, b, ...] or count: N"),
    ("{names: [a], count: 2}", "endpoint.adapters: give either names"),
    ("{names: [a, a]}", "endpoint.adapters.names: each adapter once"),
    ("{names: []}", "endpoint.adapters.names: expected a non-empty list"),
    ("{count: 2, pattern: lora}", "endpoint.adapters.pattern: must hold {i}"),
    ("{count: 0}", "endpoint.adapters.count: must be >= 1"),
    ("{count: 2, pick: skewed}", "endpoint.adapters.pick: must be one of round_robin, uniform, zipf"),
    ("{count: 2, zipf_s: 2}", "endpoint.adapters.zipf_s: goes with pick: zipf"),
    ("{count: 2, picks: zipf}", "endpoint.adapters: unknown key 'picks'; did you mean 'pick'?"),
])
def test_a_malformed_block_names_the_key(block, message):
    with pytest.raises(ScenarioError) as err:
        _parse(f"{{adapters: {block}}}")
    assert message in str(err.value), str(err.value)


def test_round_robin_cycles_and_a_worker_starts_at_its_own_turn():
    names = tuple(f"a{i}" for i in range(5))
    pick = adapter_picker(AdapterSpec(names), random.Random(0), start=2)
    assert [pick() for _ in range(7)] == ["a2", "a3", "a4", "a0", "a1", "a2", "a3"]


@pytest.mark.parametrize("pick, s", [("uniform", 1.0), ("zipf", 1.0), ("zipf", 1.5)])
def test_draws_follow_their_weights(pick, s):
    spec = AdapterSpec(tuple(f"a{i}" for i in range(6)), pick, s)
    draw = adapter_picker(spec, random.Random(7))
    n = 60_000
    counts = Counter(draw() for _ in range(n))
    for name, w in zip(spec.names, spec.weights(), strict=True):  # 5 standard errors: fails ~1 in 2 million
        assert abs(counts[name] / n - w) < 5 * (w * (1 - w) / n) ** 0.5, (name, counts[name] / n, w)
    if pick == "zipf":
        assert spec.weights()[0] / spec.weights()[1] == pytest.approx(2 ** s)
