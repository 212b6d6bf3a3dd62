"""The Responses API on plain data: request validation, prompt counting and the typed event stream."""

from __future__ import annotations

import json
import random

import pytest

from harness.sim.openai import ApiError, OutputPolicy
from harness.sim.plan import Behavior
from harness.sim.responses import ResponsesWriter, parse_responses
from tests.kit.sse_events import typed_events, types


def parse(body: dict, behavior: Behavior | None = None, **policy):
    return parse_responses(json.dumps({"model": "m", **body}).encode(), models=["m"], max_model_len=4096,
                           policy=OutputPolicy(**policy), rng=random.Random(0), behavior=behavior)


def stream(writer: ResponsesWriter, sizes: list[int]) -> list[dict]:
    raw, index = writer.opening() + writer.head(0), 0
    for i, n in enumerate(sizes):
        raw += writer.emit(index, n, i == len(sizes) - 1, 3)
        index += n
    events = typed_events(b"".join(raw))
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    return events


def test_prompt_tokens_count_like_chat():
    assert parse({"input": "a b c"}).prompt_tokens == 3 + 4 + 3
    items = [{"role": "user", "content": [{"type": "input_text", "text": "a b"}, {"type": "input_image"}]},
             {"type": "function_call", "name": "f", "arguments": "{}", "call_id": "c"},
             {"type": "function_call_output", "call_id": "c", "output": "x y z"},
             {"type": "reasoning", "summary": []}]
    got = parse({"input": items, "instructions": "be brief"})
    assert got.prompt_tokens == 3 + (4 + 2) + (4 + 2) + (4 + 2) + (4 + 3)
    assert got.messages == [("system", "be brief"), ("user", "a b"), ("assistant", "f {}"), ("tool", "x y z")]


@pytest.mark.parametrize("body,message", [
    ({}, "'input' is required"),
    ({"input": []}, "'input' is required"),
    ({"input": [{"role": "wizard", "content": "x"}]}, "input[0].role must be one of"),
    ({"input": [{"type": "computer_call"}]}, "input[0].type 'computer_call' is not served"),
    ({"input": "x", "previous_response_id": "resp_1"}, "previous_response_id is not supported"),
    ({"input": "x", "max_output_tokens": 0}, "'max_output_tokens' must be an integer >= 1"),
    ({"input": "x", "reasoning": {"summary": "long"}}, "'reasoning.summary' must be one of"),
    ({"input": "x", "tools": [{"type": "function", "function": {"name": "f"}}]}, "tools[0] must be"),
])
def test_bad_requests_name_the_field(body, message):
    with pytest.raises(ApiError) as err:
        parse(body)
    assert message in err.value.message and err.value.status == 400


def test_text_stream_events_and_usage():
    gen = parse({"input": "a", "max_output_tokens": 3}, eos_median=0)
    events = stream(ResponsesWriter(gen, "resp_abc", 5), [1, 1, 1])
    assert types(events) == [
        "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.delta", "response.output_text.delta",
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.incomplete"]
    assert [e["delta"] for e in events if e["type"].endswith(".delta")] == [" the", " of", " and"]
    delta = events[4]
    assert delta == {"type": "response.output_text.delta", "item_id": "msg_abc", "output_index": 0,
                     "content_index": 0, "delta": " the", "logprobs": [], "sequence_number": 4}
    final = events[-1]["response"]
    assert final["status"] == "incomplete" and final["incomplete_details"] == {"reason": "max_output_tokens"}
    assert final["usage"] == {"input_tokens": 8, "input_tokens_details": {"cached_tokens": 3}, "output_tokens": 3,
                              "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 11}
    assert final["output"][0]["content"][0]["text"] == " the of and"


def test_a_model_that_stops_completes():
    gen = parse({"input": "a", "max_output_tokens": 100}, eos_median=4, eos_sigma=0)
    events = stream(ResponsesWriter(gen, "resp_abc", 5), [1, 1, 1, 1])
    assert events[-1]["type"] == "response.completed" and events[-1]["response"]["status"] == "completed"
    assert events[-1]["response"]["output"][0]["status"] == "completed"


@pytest.mark.parametrize("summary", [None, "auto"])
def test_reasoning_item_then_message(summary):
    body = {"input": "a", "max_output_tokens": 4, **({"reasoning": {"summary": summary}} if summary else {})}
    gen = parse(body, Behavior(reasoning_tokens="2"), eos_median=0)
    events = stream(ResponsesWriter(gen, "resp_abc", 5), [1, 2, 1])  # the second emission crosses the boundary
    names = types(events)
    if summary:
        reasoning = ["response.reasoning_summary_part.added", "response.reasoning_summary_text.delta",
                     "response.reasoning_summary_text.delta", "response.reasoning_summary_text.done",
                     "response.reasoning_summary_part.done"]
    else:
        reasoning = ["response.content_part.added", "response.reasoning_text.delta", "response.reasoning_text.delta",
                     "response.reasoning_text.done", "response.content_part.done"]
    assert names[2:9] == ["response.output_item.added", *reasoning, "response.output_item.done"]
    assert names[9:11] == ["response.output_item.added", "response.content_part.added"]
    assert events[2]["item"]["type"] == "reasoning" and events[2]["output_index"] == 0
    assert events[9]["item"]["type"] == "message" and events[9]["output_index"] == 1
    done = events[8]["item"]
    key = "summary" if summary else "content"
    assert done[key] == [{"type": "summary_text" if summary else "reasoning_text", "text": " the of"}]
    assert events[-1]["response"]["usage"]["output_tokens_details"] == {"reasoning_tokens": 2}


def test_function_call_item_streams_arguments():
    tools = [{"type": "function", "name": "lookup", "parameters": {}}]
    gen = parse({"input": "a", "max_output_tokens": 100, "tools": tools, "tool_choice": "required"},
                eos_median=5, eos_sigma=0)
    events = stream(ResponsesWriter(gen, "resp_abc", 5), [1, 1, 1, 1, 1])
    assert types(events)[2:] == ["response.output_item.added"] + ["response.function_call_arguments.delta"] * 4 + [
        "response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    added = events[2]["item"]
    assert added == {"id": "fc_abc", "type": "function_call", "status": "in_progress", "arguments": "",
                     "call_id": "call_abc", "name": "lookup"}
    arguments = "".join(e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta")
    assert json.loads(arguments) == {"input": "the of"} and events[-3]["arguments"] == arguments
    assert events[-2]["item"]["status"] == "completed"
    named = parse({"input": "a", "tools": tools, "tool_choice": {"type": "function", "name": "lookup"}})
    assert named.plan.tool == "lookup"


def test_failure_is_an_error_event_then_response_failed():
    writer = ResponsesWriter(parse({"input": "a", "max_output_tokens": 3}), "resp_abc", 5)
    events = typed_events(b"".join(writer.opening() + writer.failure("boom")))
    assert types(events)[-2:] == ["error", "response.failed"]
    assert events[-2] == {"type": "error", "code": "server_error", "message": "boom", "param": None,
                          "sequence_number": 2}
    assert events[-1]["response"]["status"] == "failed"
    assert events[-1]["response"]["error"] == {"code": "server_error", "message": "boom"}


def test_non_streaming_body_is_the_response_object():
    gen = parse({"input": "a", "max_output_tokens": 2}, eos_median=0)
    body = json.loads(ResponsesWriter(gen, "resp_abc", 5).body(9, None))
    assert body["object"] == "response" and body["status"] == "incomplete"
    assert body["usage"]["input_tokens_details"] == {"cached_tokens": 0}
    assert body["output"] == [{"id": "msg_abc", "type": "message", "status": "incomplete", "role": "assistant",
                               "content": [{"type": "output_text", "annotations": [], "logprobs": [],
                                            "text": " the of"}]}]
