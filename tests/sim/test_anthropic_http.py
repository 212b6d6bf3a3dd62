"""The Anthropic Messages API through the real simulator: headers, error shape, events, cache reads, the trace."""

from __future__ import annotations

import json

import pytest

from tests.kit.sim import start_sim
from tests.kit.sim_http import post
from tests.kit.sse_events import typed_events, types

pytestmark = pytest.mark.integration

HEADERS = {"anthropic-version": "2023-06-01", "x-api-key": "sk-ant-anything"}
SYSTEM = " ".join(f"rule{i}" for i in range(80))


def ask(**extra) -> dict:
    return {"model": "sim-tiny", "max_tokens": 6, "system": SYSTEM, "ignore_eos": True,
            "messages": [{"role": "user", "content": "hello"}], **extra}


def test_messages_stream_errors_and_cache_reads(tmp_path):
    trace = tmp_path / "trace.jsonl"
    with start_sim("--preset", "tiny", "--iter-base-ms", "0.2", "--reasoning-tokens", "2",
                   "--trace-file", str(trace)) as sim:  # fast iterations: thinking needs max_tokens > 1024
        _, resp = post(sim, "/v1/messages", ask(max_tokens=1100, stream=True,
                                                thinking={"type": "enabled", "budget_tokens": 1024}), HEADERS)
        assert resp.status == 200
        events = typed_events(resp.read())
        _, resp = post(sim, "/v1/messages", ask(), HEADERS)  # the same system prompt: a cache read
        second = json.loads(resp.read())
        _, resp = post(sim, "/v1/messages", ask())
        missing = (resp.status, json.loads(resp.read()))
        _, resp = post(sim, "/v1/messages", ask(), {**HEADERS, "x-kneecap-fault": "429"})
        throttled = (resp.status, resp.getheader("retry-after"), json.loads(resp.read()))
    names = types(events)
    assert names[:3] == ["message_start", "content_block_start", "ping"] and names[-2:] == ["message_delta",
                                                                                          "message_stop"]
    kinds = [e["delta"]["type"] for e in events if e["type"] == "content_block_delta"]
    assert kinds[:3] == ["thinking_delta", "thinking_delta", "signature_delta"]
    assert set(kinds[3:]) == {"text_delta"} and len(kinds) == 3 + 1098
    assert events[-2]["usage"] == {"output_tokens": 1100} and events[-2]["delta"]["stop_reason"] == "max_tokens"
    first_usage = events[0]["message"]["usage"]
    assert first_usage["cache_read_input_tokens"] == 0 and first_usage["input_tokens"] == 3 + 84 + 5

    assert second["type"] == "message" and second["content"] == [{"type": "text", "text": " the of and to in a"}]
    hit = second["usage"]["cache_read_input_tokens"]
    assert hit >= 80 and second["usage"]["input_tokens"] == 92 - hit
    assert missing == (400, {"type": "error", "error": {"type": "invalid_request_error",
                                                       "message": "anthropic-version: header is required"}})
    assert throttled[0] == 429 and throttled[1] == "1" and throttled[2]["error"]["type"] == "rate_limit_error"

    row = json.loads(trace.read_text().splitlines()[0])
    assert row["kind"] == "messages" and row["id"].startswith("msg_") and row["reasoning_tokens"] == 2
    assert row["first_reasoning"] == row["token_times"][0] and row["first_content"] == row["token_times"][2]
