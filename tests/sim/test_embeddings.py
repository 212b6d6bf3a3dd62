"""Embeddings on plain data (validation, vectors, the response) and their cost in the engine: a real knee."""

from __future__ import annotations

import base64
import json
import math
import random
import struct

import pytest

from harness.sim.embeddings import EmbeddingsWriter, parse_embeddings, vector
from harness.sim.engine import Engine, EngineConfig, Sequence
from harness.sim.openai import ApiError, OutputPolicy
from harness.sim.plan import Behavior


def parse(body: dict, dim: int = 8):
    return parse_embeddings(json.dumps({"model": "m", **body}).encode(), models=["m"], max_model_len=100,
                            policy=OutputPolicy(), rng=random.Random(0), behavior=Behavior(embedding_dim=dim))


def test_inputs_count_and_the_response_shape():
    gen = parse({"input": ["a b c", "d", [5, 6, 7, 8]]})
    assert gen.options["inputs"] == [3, 1, 4] and gen.prompt_tokens == 8 and gen.output_tokens == 0
    out = json.loads(EmbeddingsWriter(gen, "embd-x", 0).body(0, None))
    assert out["object"] == "list" and out["model"] == "m"
    assert out["usage"] == {"prompt_tokens": 8, "total_tokens": 8}
    assert [(d["object"], d["index"], len(d["embedding"])) for d in out["data"]] == [("embedding", i, 8)
                                                                                   for i in range(3)]
    assert all(math.isclose(sum(x * x for x in d["embedding"]), 1.0) for d in out["data"])
    assert parse({"input": "a b c"}).options["inputs"] == [3] and parse({"input": [1, 2]}).prompt_tokens == 2


def test_vectors_are_a_function_of_the_input_and_base64_is_float32():
    assert vector('"x"', 4) == vector('"x"', 4) != vector('"y"', 4)
    gen = parse({"input": "x", "encoding_format": "base64", "dimensions": 4})
    packed = json.loads(EmbeddingsWriter(gen, "e", 0).body(0, None))["data"][0]["embedding"]
    assert struct.unpack("<4f", base64.b64decode(packed)) == pytest.approx(vector('"x"', 4), rel=1e-6)


@pytest.mark.parametrize("body,message", [
    ({}, "'input' is required"),
    ({"input": []}, "'input' is required"),
    ({"input": [[]]}, "'input' is required"),
    ({"input": ["a", 3]}, "'input' is required"),
    ({"input": ["w"] * 2049}, "at most 2048"),
    ({"input": "x", "encoding_format": "hex"}, "'encoding_format' must be"),
    ({"input": "x", "dimensions": 9}, "'dimensions' must be <= 8"),
    ({"input": "w " * 101}, "maximum context length is 100"),
])
def test_bad_requests_name_the_field(body, message):
    with pytest.raises(ApiError) as err:
        parse(body)
    assert message in err.value.message and err.value.status == 400


CFG = EngineConfig(max_num_seqs=64, kv_cache_tokens=65_536, max_num_batched_tokens=2048, max_model_len=4096,
                   iter_base_ms=2.0, iter_per_seq_ms=0.25, prefill_per_ktoken_ms=10.0)


def closed_loop(users: int, prompt: int = 500, per_user: int = 20) -> tuple[float, float]:
    """Closed-loop embedding users on a fake clock: (requests/s, mean latency s)."""
    engine, now, next_id, latencies = Engine(CFG), 0.0, 0, []
    left = dict.fromkeys(range(users), per_user)
    owner = {}

    def submit(user: int) -> None:
        nonlocal next_id
        next_id += 1
        owner[next_id] = user
        left[user] -= 1
        engine.add(Sequence(next_id, prompt, 0, now))

    for u in range(users):
        submit(u)
    while not engine.idle:
        it = engine.step(now)
        now += it.duration_s
        for e in it.emissions:
            assert e.tokens == 0 and e.finished
            latencies.append(now - e.seq.arrival)
            if left[owner[e.seq.id]]:
                submit(owner[e.seq.id])
    assert engine.generation_tokens_total == 0 and engine.prompt_tokens_total == users * per_user * prompt
    return users * per_user / now, sum(latencies) / len(latencies)


def test_embeddings_have_a_knee_at_the_token_budget():
    # 2048-token budget / 500-token inputs: about 4 in flight saturate it. A saturated iteration takes
    # 2 + 10 × 2.048 = 22.5 ms for 4.1 inputs: ~182 inputs/s at most.
    curve = {u: closed_loop(u) for u in (1, 2, 4, 8, 16)}
    rates = {u: r for u, (r, _) in curve.items()}
    assert rates[1] < rates[2] < rates[4]
    assert rates[8] == pytest.approx(rates[16], rel=0.05) and rates[16] == pytest.approx(2048 / 500 / 0.0225, rel=0.1)
    # past the knee latency grows with the queue: twice the users, about twice the latency
    assert curve[16][1] / curve[8][1] == pytest.approx(2.0, rel=0.15)
    assert curve[2][1] < 2 * curve[1][1]
