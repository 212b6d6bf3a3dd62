"""A reasoning model through the real simulator: reasoning deltas before content, usage, and the trace's phase times."""

from __future__ import annotations

import json

import pytest

from tests.kit.sim import start_sim
from tests.kit.sim_http import CHAT, chat, post, read_chunks

pytestmark = pytest.mark.integration


def test_reasoning_then_content_with_trace_times(tmp_path):
    trace = tmp_path / "trace.jsonl"
    with start_sim("--preset", "tiny", "--reasoning-tokens", "4", "--trace-file", str(trace)) as sim:
        _, resp = post(sim, CHAT, chat(7, stream=True, stream_options={"include_usage": True}))
        chunks = read_chunks(resp)
        _, resp = post(sim, CHAT, chat(7))
        full = json.loads(resp.read())
        _, resp = post(sim, "/v1/completions", {"model": "sim-tiny", "prompt": "a b", "max_tokens": 6,
                                                "ignore_eos": True})
        completion = json.loads(resp.read())
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert deltas[1:5] == [{"reasoning_content": w} for w in (" the", " of", " and", " to")]
    assert deltas[5:] == [{"content": w} for w in (" the", " of", " and")]
    assert chunks[-1]["usage"]["completion_tokens"] == 7 and "completion_tokens_details" not in chunks[-1]["usage"]
    message = full["choices"][0]["message"]
    assert message == {"role": "assistant", "content": " the of and", "reasoning_content": " the of and to"}
    assert full["usage"]["completion_tokens"] == 7
    assert completion["choices"][0]["text"] == "<think> of and</think> the of"

    rows = [json.loads(line) for line in trace.read_text().splitlines()]
    for r in rows:
        assert r["reasoning_tokens"] == 4 and r["tool_call"] is False and r["first_tool_call"] is None
        assert r["first_token"] == r["first_reasoning"] == r["token_times"][0]
        assert r["first_content"] == r["token_times"][4] > r["first_reasoning"]


def test_reasoning_field_and_usage_details_flags(tmp_path):
    trace = tmp_path / "trace.jsonl"
    with start_sim("--preset", "tiny", "--reasoning-tokens", "9", "--reasoning-field", "reasoning",
                   "--reasoning-usage", "on", "--trace-file", str(trace)) as sim:
        _, resp = post(sim, CHAT, chat(5, stream=True, stream_options={"include_usage": True}))
        chunks = read_chunks(resp)
    deltas = [c["choices"][0]["delta"] for c in chunks[1:-1]]
    assert all(set(d) == {"reasoning"} for d in deltas) and len(deltas) == 5  # max_tokens cut the reasoning
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["usage"]["completion_tokens_details"] == {"reasoning_tokens": 5}
    row = json.loads(trace.read_text())
    assert row["reasoning_tokens"] == 5 and row["first_content"] is None and row["first_reasoning"] is not None
