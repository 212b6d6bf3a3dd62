"""What a request generates (reasoning, answer, tool call) and the chat/completions bytes of it, on plain data."""

from __future__ import annotations

import json
import random

import pytest

from harness.sim.chat_stream import ChatWriter
from harness.sim.openai import GenRequest, OutputPolicy, parse_request
from harness.sim.plan import Behavior, CountSpec, Plan, Segment, plan_output
from harness.sim.text import think_text, tool_arguments


def test_count_specs_parse_and_draw():
    rng = random.Random(1)
    assert CountSpec.parse("0").off and not CountSpec.parse("7").off
    assert CountSpec.parse("7").draw(rng) == 7
    uniform = [CountSpec.parse("3-5").draw(rng) for _ in range(200)]
    assert set(uniform) == {3, 4, 5}
    logn = [CountSpec.parse("lognormal:100:0.5").draw(rng) for _ in range(500)]
    assert 80 < sorted(logn)[250] < 120 and min(logn) >= 0
    for bad in ("x", "5-3", "-1", "lognormal:1", "normal:1:2"):
        with pytest.raises(ValueError, match="--reasoning-tokens"):
            CountSpec.parse(bad)


def test_a_fixed_count_draws_nothing():
    rng = random.Random(3)
    state = rng.getstate()
    CountSpec.parse("12").draw(rng)
    assert rng.getstate() == state


@pytest.mark.parametrize("kw,expected", [
    # ignore_eos: exactly the cap; reasoning first, the answer gets the rest
    ({"cap": 10, "ignore_eos": True, "natural": None, "reasoning": 4}, (10, 4, "length")),
    ({"cap": 10, "ignore_eos": True, "natural": None, "reasoning": 30}, (10, 10, "length")),
    # the model stops by itself after reasoning + natural answer
    ({"cap": 100, "ignore_eos": False, "natural": 20, "reasoning": 30}, (50, 30, "stop")),
    # max_tokens cuts the answer, or the reasoning itself
    ({"cap": 40, "ignore_eos": False, "natural": 20, "reasoning": 30}, (40, 30, "length")),
    ({"cap": 25, "ignore_eos": False, "natural": 20, "reasoning": 30}, (25, 25, "length")),
    # min_tokens lengthens the answer
    ({"cap": 100, "ignore_eos": False, "natural": 5, "reasoning": 10, "min_tokens": 40}, (40, 10, "stop")),
])
def test_reasoning_counts_as_output_and_against_max_tokens(kw, expected):
    plan = plan_output(min_tokens=kw.pop("min_tokens", 0), tool=None, **kw)
    assert (plan.output_tokens, plan.reasoning_tokens, plan.finish) == expected
    assert plan.answer_tokens == plan.output_tokens - plan.reasoning_tokens


def test_segments_cut_at_the_reasoning_boundary():
    plan = Plan(10, 4)
    assert plan.segments(0, 3) == [Segment("reasoning", 0, 3)]
    assert plan.segments(3, 3) == [Segment("reasoning", 3, 1), Segment("content", 0, 2)]
    assert plan.segments(6, 2) == [Segment("content", 2, 2)]
    assert Plan(10, 0, tool="f").segments(0, 1) == [Segment("tool", 0, 1)]


def test_think_text_marks_the_reasoning_in_raw_text():
    assert think_text(0, 4, 4) == "<think> of and</think>"
    assert think_text(0, 1, 1) == "<think></think>"
    assert think_text(1, 2, 4) == " of and"


def gen(kind: str = "chat", **kw) -> GenRequest:
    plan = kw.pop("plan")
    g = GenRequest(kind, "m", True, kw.pop("include_usage", True), 11, plan.output_tokens, plan.finish, plan=plan,
                   **kw)
    return g


def chunks(writer: ChatWriter, sizes: list[int]) -> list[dict]:
    out, index = [], 0
    raw = writer.head(0)
    for i, n in enumerate(sizes):
        raw += writer.emit(index, n, i == len(sizes) - 1, 0)
        index += n
    assert raw[-1] == b"data: [DONE]\n\n"
    for c in raw[:-1]:
        assert c.startswith(b"data: {") and c.endswith(b"}\n\n")
        out.append(json.loads(c[6:]))
    return out


def test_chat_reasoning_deltas_then_content_bytes():
    writer = ChatWriter(gen(plan=Plan(4, 2, "length")), "chatcmpl-abc", 7)
    raw = writer.head(None) + writer.emit(0, 1, False, None) + writer.emit(1, 1, False, None)
    head = b'data: {"id":"chatcmpl-abc","object":"chat.completion.chunk","created":7,"model":"m","choices":'
    tail = b'},"logprobs":null,"finish_reason":null}]}\n\n'
    assert raw[1] == head + b'[{"index":0,"delta":{"reasoning_content":" the"' + tail
    assert raw[2] == head + b'[{"index":0,"delta":{"reasoning_content":" of"' + tail
    last = writer.emit(2, 2, True, None)
    assert last[0] == head + (b'[{"index":0,"delta":{"content":" the of"},"logprobs":null,"finish_reason":"length",'
                              b'"stop_reason":null}]}\n\n')
    assert last[1] == head + b'[],"usage":{"prompt_tokens":11,"total_tokens":15,"completion_tokens":4}}\n\n'


def test_reasoning_field_and_usage_details():
    writer = ChatWriter(gen(plan=Plan(3, 2, "length"), reasoning_field="reasoning", reasoning_usage=True), "chatcmpl-x",
                        1)
    got = chunks(writer, [3])  # one emission across the boundary: two chunks
    assert [c["choices"][0]["delta"] if c["choices"] else None for c in got[1:3]] == [
        {"reasoning": " the of"}, {"content": " the"}]
    assert got[3]["usage"] == {"prompt_tokens": 11, "total_tokens": 14, "completion_tokens": 3,
                               "prompt_tokens_details": {"cached_tokens": 0},
                               "completion_tokens_details": {"reasoning_tokens": 2}}
    body = json.loads(writer.body(5, None))
    assert body["choices"][0]["message"] == {"role": "assistant", "content": " the", "reasoning": " the of"}
    assert body["usage"]["completion_tokens_details"] == {"reasoning_tokens": 2}


def test_completions_reasoning_is_raw_think_text():
    writer = ChatWriter(gen("completions", plan=Plan(5, 3, "length")), "cmpl-x", 1)
    got = chunks(writer, [1, 1, 1, 1, 1])
    assert "".join(c["choices"][0]["text"] for c in got if c["choices"]) == "<think> of</think> the of"
    assert json.loads(writer.body(1, None))["choices"][0]["text"] == "<think> of</think> the of"


def parse(body: dict, behavior: Behavior, seed: int = 0) -> GenRequest:
    return parse_request("chat", json.dumps(body).encode(), models=["m"], max_model_len=4096,
                         policy=OutputPolicy(), rng=random.Random(seed), block_size=16, behavior=behavior)


def test_parse_applies_the_reasoning_draw_and_keys_cover_it():
    body = {"model": "m", "messages": [{"role": "user", "content": "w " * 30}], "max_tokens": 40, "ignore_eos": True}
    plain = parse(body, Behavior())
    reasoning = parse(body, Behavior(reasoning_tokens="10"))
    assert (plain.output_tokens, plain.plan.reasoning_tokens) == (40, 0)
    assert (reasoning.output_tokens, reasoning.plan.reasoning_tokens) == (40, 10)
    # the prompt's blocks are shared; the output's differ (<think> first), so a follow-up without the reasoning
    # can only hit the prompt
    assert plain.block_keys[0] == reasoning.block_keys[0] and plain.block_keys[-1] != reasoning.block_keys[-1]


def test_tool_arguments_are_json_when_complete():
    for planned in range(1, 8):
        assert isinstance(json.loads(tool_arguments(planned, planned)), dict)
    assert tool_arguments(2, 5, 1) == "the of"


TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
         {"type": "function", "function": {"name": "search"}}]


def chat_body(**kw) -> dict:
    return {"model": "m", "messages": [{"role": "user", "content": "a b c"}], "max_tokens": 50, **kw}


def test_tool_choice_decides_the_call():
    p1 = Behavior(tool_call_p=1.0)
    assert parse(chat_body(tools=TOOLS), p1).plan.tool == "get_weather"
    assert parse(chat_body(tools=TOOLS, tool_choice="none"), p1).plan.tool is None
    assert parse(chat_body(tools=TOOLS), Behavior()).plan.tool is None
    named = {"type": "function", "function": {"name": "search"}}
    assert parse(chat_body(tools=TOOLS, tool_choice=named), Behavior()).plan.tool == "search"
    assert parse(chat_body(tools=TOOLS, tool_choice="required"), Behavior()).plan.tool == "get_weather"
    half = [parse(chat_body(tools=TOOLS), Behavior(tool_call_p=0.5), seed).plan.tool for seed in range(40)]
    assert 5 < half.count("get_weather") < 35
    calls = parse(chat_body(tools=TOOLS, max_tokens=3000), p1).plan
    assert calls.finish == "tool_calls" and calls.answer_tokens >= 3 and calls.args_planned == calls.answer_tokens - 1


def test_tools_count_as_a_leading_message():
    without = parse(chat_body(), Behavior()).prompt_tokens
    with_tools = parse(chat_body(tools=TOOLS), Behavior())
    assert with_tools.prompt_tokens == without + 4 + len(json.dumps(TOOLS).split())
    assert with_tools.messages == [("user", "a b c")]


@pytest.mark.parametrize("kw,message", [
    ({"tools": {"x": 1}}, "'tools' must be a list"),
    ({"tools": [{"type": "function", "name": "f"}]}, "tools[0] must be"),
    ({"tool_choice": "required"}, "only allowed when 'tools'"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "not among the tools"),
    ({"tools": TOOLS, "tool_choice": "sometimes"}, "'tool_choice' must be"),
])
def test_bad_tools_name_the_field(kw, message):
    from harness.sim.openai import ApiError
    with pytest.raises(ApiError, match=message.replace("[", r"\[").replace("(", r"\(")):
        parse(chat_body(**kw), Behavior())


def test_tool_call_chunks_bytes_and_body():
    plan = Plan(6, 1, "tool_calls", "get_weather", 4)
    writer = ChatWriter(gen(plan=plan, continuous_usage=True), "chatcmpl-" + "ab" * 16, 3)
    got = chunks(writer, [1, 1, 1, 1, 1, 1])
    deltas = [c["choices"][0]["delta"] for c in got if c["choices"]]
    call_id = "chatcmpl-tool-" + "ab" * 16
    assert deltas[1] == {"reasoning_content": " the"}
    assert deltas[2] == {"tool_calls": [{"id": call_id, "type": "function", "index": 0,
                                         "function": {"name": "get_weather", "arguments": ""}}]}
    fragments = [d["tool_calls"][0]["function"]["arguments"] for d in deltas[3:]]
    assert fragments == ['{"input":"', "the", " of", '"}']
    assert [d["tool_calls"][0] for d in deltas[3:]] == [{"index": 0, "function": {"arguments": f}} for f in fragments]
    assert json.loads("".join(fragments)) == {"input": "the of"}
    assert got[-2]["choices"][0]["finish_reason"] == "tool_calls"
    # continuous usage: the role chunk says 0, then every chunk the tokens sent so far
    assert [c["usage"]["completion_tokens"] for c in got[:-1]] == [0, 1, 2, 3, 4, 5, 6]
    # two tokens per emission: the name chunk carries the first fragment too
    two = [c["choices"][0]["delta"] for c in chunks(ChatWriter(gen(plan=plan), "chatcmpl-x", 3), [1, 2, 2, 1])[1:-1]]
    assert two[1]["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"input":"'}
    message = json.loads(writer.body(1, None))["choices"][0]["message"]
    assert message["content"] is None and message["tool_calls"] == [
        {"id": call_id, "type": "function", "function": {"name": "get_weather", "arguments": '{"input":"the of"}'}}]
