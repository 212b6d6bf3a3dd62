"""The Anthropic Messages API on plain data: validation in Anthropic's error shape, counting, the event stream."""

from __future__ import annotations

import json
import random

import pytest

from harness.sim.anthropic import PING_EVERY, AnthropicError, MessagesWriter, parse_messages
from harness.sim.openai import OutputPolicy
from harness.sim.plan import Behavior
from tests.kit.sse_events import typed_events, types

VERSION = {"anthropic-version": "2023-06-01"}


def parse(body: dict, behavior: Behavior | None = None, headers: dict | None = None, **policy):
    full = {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "a b c"}], **body}
    return parse_messages(json.dumps(full).encode(), headers=VERSION if headers is None else headers, models=["m"],
                          max_model_len=8192, policy=OutputPolicy(**policy), rng=random.Random(0), behavior=behavior)


def stream(writer: MessagesWriter, sizes: list[int], cached: int = 0) -> list[dict]:
    raw, index = writer.opening() + writer.head(cached), 0
    for i, n in enumerate(sizes):
        raw += writer.emit(index, n, i == len(sizes) - 1, cached)
        index += n
    return typed_events(b"".join(raw))


def test_prompt_tokens_count_like_chat():
    assert parse({}).prompt_tokens == 3 + 4 + 3
    body = {"system": [{"type": "text", "text": "be kind"}], "messages": [
        {"role": "user", "content": [{"type": "text", "text": "a b"}, {"type": "document", "source": {}}]},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "hidden"},
                                          {"type": "tool_use", "id": "t", "name": "f", "input": {"q": 1}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "x y"}]}]}
    got = parse(body)
    assert got.messages == [("system", "be kind"), ("user", "a b"), ("assistant", 'f {"q": 1}'), ("user", "x y")]
    assert got.prompt_tokens == 3 + (4 + 2) * 2 + (4 + 3) + (4 + 2)


@pytest.mark.parametrize("body,headers,status,message", [
    ({}, {}, 400, "anthropic-version: header is required"),
    ({"max_tokens": None}, None, 400, "max_tokens: Field required"),
    ({"model": "claude"}, None, 404, "does not exist"),
    ({"messages": [{"role": "system", "content": "x"}]}, None, 400, "messages.0.role"),
    ({"messages": [{"role": "user", "content": [{"type": "video"}]}]}, None, 400, "'video' is not served"),
    ({"thinking": {"type": "enabled", "budget_tokens": 100}}, None, 400, "budget_tokens: Input should be an integer"),
    ({"thinking": {"type": "enabled", "budget_tokens": 2000}}, None, 400, "must be greater than"),
    ({"tools": [{"description": "x"}]}, None, 400, "tools.0.name: Field required"),
    ({"tools": [{"name": "f"}], "tool_choice": {"type": "tool", "name": "g"}}, None, 400, "not among the tools"),
])
def test_errors_are_in_anthropics_shape(body, headers, status, message):
    with pytest.raises(AnthropicError) as err:
        parse(body, headers=headers)
    assert err.value.status == status and message in err.value.message
    rendered = json.loads(err.value.render())
    assert rendered["type"] == "error" and set(rendered["error"]) == {"type", "message"}
    assert rendered["error"]["type"] == ("not_found_error" if status == 404 else "invalid_request_error")


def test_text_stream_events_and_usage():
    gen = parse({"max_tokens": 3}, eos_median=0)
    events = stream(MessagesWriter(gen, "msg_abc", 1), [1, 1, 1], cached=4)
    assert types(events) == ["message_start", "content_block_start", "ping", "content_block_delta",
                             "content_block_delta", "content_block_delta", "content_block_stop", "message_delta",
                             "message_stop"]
    assert events[0]["message"] == {"id": "msg_abc", "type": "message", "role": "assistant", "model": "m",
                                    "content": [], "stop_reason": None, "stop_sequence": None,
                                    "usage": {"input_tokens": 10 - 4, "cache_creation_input_tokens": 0,
                                              "cache_read_input_tokens": 4, "output_tokens": 1}}
    assert events[1] == {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    assert events[3] == {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": " the"}}
    assert events[-2] == {"type": "message_delta", "delta": {"stop_reason": "max_tokens", "stop_sequence": None},
                          "usage": {"output_tokens": 3}}


def test_thinking_block_ends_with_a_signature_then_text():
    gen = parse({"max_tokens": 2000, "thinking": {"type": "enabled", "budget_tokens": 1024}},
                Behavior(reasoning_tokens="2"), eos_median=3, eos_sigma=0)
    assert (gen.plan.reasoning_tokens, gen.plan.output_tokens) == (2, 5)
    events = stream(MessagesWriter(gen, "msg_abc", 1), [1, 1, 1, 1, 1])
    assert types(events)[1:8] == ["content_block_start", "ping", "content_block_delta", "content_block_delta",
                                  "content_block_delta", "content_block_stop", "content_block_start"]
    assert events[1]["content_block"] == {"type": "thinking", "thinking": ""}
    assert [e["delta"]["type"] for e in events[3:6]] == ["thinking_delta", "thinking_delta", "signature_delta"]
    assert events[7] == {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}
    assert events[-2]["delta"]["stop_reason"] == "end_turn" and events[-2]["usage"]["output_tokens"] == 5
    # without --reasoning-tokens, thinking uses its whole budget
    assert parse({"max_tokens": 2000, "thinking": {"type": "enabled", "budget_tokens": 1024}}).plan.reasoning_tokens \
        == 1024
    assert parse({}, Behavior(reasoning_tokens="50")).plan.reasoning_tokens == 0  # thinking not enabled


def test_tool_use_block_streams_input_json():
    gen = parse({"max_tokens": 500, "tools": [{"name": "get", "input_schema": {}}], "tool_choice": {"type": "any"}},
                eos_median=5, eos_sigma=0)
    events = stream(MessagesWriter(gen, "msg_abc", 1), [1, 1, 1, 1, 1])
    start = events[1]["content_block"]
    assert start == {"type": "tool_use", "id": "toolu_abc", "name": "get", "input": {}}
    partial = [e["delta"]["partial_json"] for e in events if e.get("delta", {}).get("type") == "input_json_delta"]
    assert json.loads("".join(partial)) == {"input": "the of"}
    assert events[-2]["delta"]["stop_reason"] == "tool_use"
    body = json.loads(MessagesWriter(gen, "msg_abc", 1).body(1, None))
    assert body["content"] == [{"type": "tool_use", "id": "toolu_abc", "name": "get", "input": {"input": "the of"}}]
    assert body["stop_reason"] == "tool_use" and body["usage"]["output_tokens"] == 5


def test_pings_now_and_then_and_failure_event():
    gen = parse({"max_tokens": 250}, eos_median=0)
    events = stream(MessagesWriter(gen, "msg_abc", 1), [1] * 250)
    assert types(events).count("ping") == 1 + 250 // PING_EVERY
    failure = typed_events(b"".join(MessagesWriter(gen, "msg_abc", 1).failure("boom")))
    assert failure == [{"type": "error", "error": {"type": "overloaded_error", "message": "boom"}}]


def test_non_streaming_message_object():
    gen = parse({"max_tokens": 2000, "thinking": {"type": "enabled", "budget_tokens": 1500}},
                Behavior(reasoning_tokens="3"), eos_median=2, eos_sigma=0)
    body = json.loads(MessagesWriter(gen, "msg_abc", 1).body(1, 0))
    assert [b["type"] for b in body["content"]] == ["thinking", "text"]
    assert body["content"][0]["thinking"] == " the of and" and body["content"][0]["signature"]
    assert body["usage"] == {"input_tokens": 10, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
                             "output_tokens": 5}
