"""Tool calls through the real simulator: OpenAI's streaming tool_calls chunks, finish_reason and the trace."""

from __future__ import annotations

import json

import pytest

from tests.kit.sim import start_sim
from tests.kit.sim_http import CHAT, post, read_chunks

pytestmark = pytest.mark.integration

TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]


def ask(max_tokens: int = 200, **extra) -> dict:
    return {"model": "sim-tiny", "messages": [{"role": "user", "content": "find it"}], "max_tokens": max_tokens,
            **extra}


def test_a_tool_call_streams_name_then_argument_fragments(tmp_path):
    trace = tmp_path / "trace.jsonl"
    with start_sim("--preset", "tiny", "--tool-call-p", "1", "--reasoning-tokens", "2", "--eos-median", "6",
                   "--trace-file", str(trace)) as sim:
        _, resp = post(sim, CHAT, ask(tools=TOOLS, stream=True, stream_options={"include_usage": True}))
        chunks = read_chunks(resp)
        _, resp = post(sim, CHAT, ask(tools=TOOLS))
        full = json.loads(resp.read())
        _, resp = post(sim, CHAT, ask(stream=True))  # no tools offered: text
        plain = read_chunks(resp)
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    calls = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    assert [set(d) for d in deltas[1:3]] == [{"reasoning_content"}] * 2
    first = calls[0]
    assert first["index"] == 0 and first["type"] == "function" and first["id"].startswith("chatcmpl-tool-")
    assert first["function"] == {"name": "lookup", "arguments": ""}
    arguments = "".join(c["function"]["arguments"] for c in calls)
    assert json.loads(arguments) == {"input": json.loads(arguments)["input"]}
    assert all(set(c) == {"index", "function"} for c in calls[1:])
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[-1]["usage"]["completion_tokens"] == 2 + len(calls)  # one token per chunk
    message = full["choices"][0]["message"]
    assert full["choices"][0]["finish_reason"] == "tool_calls" and message["content"] is None
    assert set(json.loads(message["tool_calls"][0]["function"]["arguments"])) == {"input"}
    assert all("tool_calls" not in c["choices"][0]["delta"] for c in plain[:-1] if c["choices"])

    rows = [json.loads(line) for line in trace.read_text().splitlines()]
    assert [r["tool_call"] for r in rows] == [True, True, False]
    call = rows[0]
    assert call["first_reasoning"] == call["token_times"][0] and call["first_tool_call"] == call["token_times"][2]
    assert call["first_content"] is None and rows[2]["first_tool_call"] is None
