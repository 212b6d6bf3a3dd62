"""TTFO, reasoning, tool calls and tokens per chunk in a step's bucket (metrics/aggregate.py, analysis/steps.py)."""

from __future__ import annotations

import pytest

from harness.analysis.steps import StepInfo, step_result
from harness.metrics.aggregate import Bucket
from harness.metrics.record import RequestRecord


def test_exact_tokens_per_chunk_make_per_token_itl_exact():
    b = Bucket()
    # 3 chunks of 1, 4, 4 tokens, 40 ms apart: per-token ITL is 10 ms for each of the 8 later tokens.
    b.add(RequestRecord(start=0, ttft_s=0.02, e2e_s=0.10, output_tokens=9, chunk_times=[0.02, 0.06, 0.10],
                        chunk_tokens=[1, 4, 4], ttfo_s=0.02))
    itl_token = b.sketches["itl_token"]
    assert itl_token.count == 8 and itl_token.quantile(0.5) == pytest.approx(0.010, rel=0.01)
    assert b.sketches["itl"].count == 2 and b.sketches["tokens_per_chunk"].count == 3
    assert b.extra == {"exact_chunks": 1}
    # Without exact counts, 9 tokens in 3 chunks: per-token ITL unknown, said so.
    b.add(RequestRecord(start=0, ttft_s=0.02, e2e_s=0.10, output_tokens=9, chunk_times=[0.02, 0.06, 0.10]))
    assert b.sketches["itl_token"].count == 8 and b.extra["itl_token_unknown"] == 1


def test_reasoning_and_tool_metrics_and_the_step_summary():
    b = Bucket()
    for _ in range(10):
        b.add(RequestRecord(start=0, ttft_s=0.02, ttfo_s=0.52, reasoning_start_s=0.02, e2e_s=1.02, output_tokens=101,
                            reasoning_tokens=50, reasoning_tokens_counted=True, chunk_times=[0.02, 0.52]))
        b.add(RequestRecord(start=0, ttft_s=0.03, tool_call_s=0.03, tool_call_chunks=5, e2e_s=0.2, output_tokens=5,
                            finish_reason="tool_calls", chunk_times=[0.03]))
    lat = step_result(StepInfo(0, 4, 0.0), b, None, now=10.0).latency_ms
    assert lat["ttft"]["count"] == 20 and lat["ttft"]["max"] == pytest.approx(30, rel=0.02)
    assert lat["ttfo"]["count"] == 10 and lat["ttfo"]["p50"] == pytest.approx(520, rel=0.01)
    assert lat["reasoning_time"]["p50"] == pytest.approx(500, rel=0.01)
    assert lat["tpot_content"]["p50"] == pytest.approx(500 / 50, rel=0.01)  # 51 answer tokens over 0.5 s
    assert lat["tool_call"]["count"] == 10 and "p99_slo" in lat["ttfo"] and "p99_slo" in lat["reasoning_time"]
    stream = step_result(StepInfo(0, 4, 0.0), b, None, now=10.0).stream
    assert stream.reasoning_tokens_counted == 10 and stream.exact_chunk_counts == 0


def test_embeddings_inputs_per_second():
    b = Bucket()
    for _ in range(20):
        b.add(RequestRecord(start=0, e2e_s=0.05, prompt_tokens=800, inputs=8))
    r = step_result(StepInfo(0, 2, 0.0), b, None, now=10.0)
    assert r.stream.inputs_per_s == pytest.approx(16.0) and r.throughput.input_tokens_per_s == 1600
