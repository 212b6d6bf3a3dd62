"""The shape warm-up end to end (``load.warmup_shapes``): against a simulator whose engine pays 300 ms the first time
it admits each prompt-length bucket (``--shape-compile-ms``, as an engine compiling a graph per shape), a run with no
warm-up time of its own measures that cost in its TTFT without the shape warm-up, and not with it (on by default).

Measured 2026-12-07 (prompts 40-1500 tokens, 4 users, warm-up 2 s): TTFT p99 436 ms without, 196 ms with."""

from __future__ import annotations

import pytest

from tests.kit.run import kneecap_run, write_scenario

pytestmark = pytest.mark.integration
SCENARIO = """
    name: shapes
    endpoint: {api: chat, model: sim-small}
    workload: {input_tokens: {dist: uniform, min: 40, max: 1500}, output_tokens: 16}
    load: {mode: constant, users: 4, duration_s: 4, step: {warmup_s: 0}}
"""
COMPILE_MS = 300


def test_each_shape_is_warmed_before_the_first_step_measures(tmp_path):
    path = write_scenario(tmp_path, SCENARIO)
    sim = [f"--shape-compile-ms={COMPILE_MS}"]
    cold = kneecap_run(path, "--set", "load.warmup_shapes=false", out=tmp_path / "cold", sim_args=sim)
    warm = kneecap_run(path, out=tmp_path / "warm", sim_args=sim)
    assert cold.code == warm.code == 0, (cold.output, warm.output)
    cold_step, warm_step = cold.summary["steps"][0], warm.summary["steps"][0]
    assert "warmup_shapes" not in cold_step and cold_step["warmup_requests"] == 0, cold_step
    # the first request of each prompt-length bucket was measured: it and its batch paid the compile
    assert cold_step["latency_ms"]["ttft"]["max"] >= COMPILE_MS, cold_step["latency_ms"]["ttft"]
    # ends of the 6 buckets the simulator sees (47-64 ... 1025-1507 with its template's 7 tokens)
    assert warm_step["warmup_shapes"] == warm_step["warmup_requests"] == 12, warm_step
    assert warm_step["latency_ms"]["ttft"]["max"] < COMPILE_MS, warm_step["latency_ms"]["ttft"]
    assert "the shape warm-up (load.warmup_shapes: 12 requests) took" in warm.output, warm.output  # warm-up 0 s
