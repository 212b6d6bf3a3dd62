"""The Responses API through the real simulator: SSE framing, the response object, and the trace."""

from __future__ import annotations

import json

import pytest

from tests.kit.sim import start_sim
from tests.kit.sim_http import post
from tests.kit.sse_events import typed_events, types

pytestmark = pytest.mark.integration


def test_streamed_response_with_reasoning_and_trace(tmp_path):
    trace = tmp_path / "trace.jsonl"
    with start_sim("--preset", "tiny", "--reasoning-tokens", "3", "--trace-file", str(trace)) as sim:
        body = {"model": "sim-tiny", "input": "one two", "max_output_tokens": 8, "ignore_eos": True, "stream": True}
        _, resp = post(sim, "/v1/responses", body)
        assert resp.status == 200 and resp.getheader("content-type") == "text/event-stream; charset=utf-8"
        events = typed_events(resp.read())
        _, resp = post(sim, "/v1/responses", {**body, "stream": False})
        full = json.loads(resp.read())
        _, resp = post(sim, "/v1/responses", {"model": "sim-tiny", "input": "x", "stream": "yes"})
        bad = json.loads(resp.read())
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    names = types(events)
    assert names[:2] == ["response.created", "response.in_progress"]
    assert names.count("response.reasoning_text.delta") == 3 and names.count("response.output_text.delta") == 5
    assert names[-1] == "response.incomplete"
    usage = events[-1]["response"]["usage"]
    assert usage == {"input_tokens": 9, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 8,
                     "output_tokens_details": {"reasoning_tokens": 3}, "total_tokens": 17}
    assert full["object"] == "response" and full["usage"] == usage
    assert [item["type"] for item in full["output"]] == ["reasoning", "message"]
    assert resp.status == 400 and "'stream' must be a boolean" in bad["error"]["message"]

    row = json.loads(trace.read_text().splitlines()[0])
    assert row["kind"] == "responses" and row["id"].startswith("resp_")
    assert row["first_reasoning"] == row["token_times"][0] and row["first_content"] == row["token_times"][3]
    assert row["reasoning_tokens"] == 3 and row["output_tokens"] == 8
