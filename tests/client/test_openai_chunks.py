"""The OpenAI chunk tracker on scripted events (fake clock)."""

from __future__ import annotations

import json

import pytest

from harness.client.openai import StreamProtocolError, StreamTracker, build_body
from harness.workload.prompts import Prompt
from tests.kit.bad_chunks import JSON_EDGES, PROTOCOL_ERRORS, WRONG_TYPES


def chunk(delta=None, text=None, finish=None, usage=None, rid="r1"):
    c = {"index": 0, "finish_reason": finish}
    if delta is not None:
        c["delta"] = delta
    if text is not None:
        c["text"] = text
    obj = {"id": rid, "choices": [c] if usage is None else []}
    if usage:
        obj["usage"] = usage
    return json.dumps(obj)


def test_role_chunk_and_empty_deltas_do_not_count_as_first_token():
    t = StreamTracker(start=10.0)
    t.on_event(10.1, chunk({"role": "assistant", "content": ""}))
    t.on_event(10.2, chunk({"content": ""}))
    t.on_event(10.3, chunk({"reasoning_content": "hmm"}))
    t.on_event(10.4, chunk({"content": "A"}))
    t.on_event(10.5, chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{"}}]}, finish="tool_calls"))
    t.on_event(10.6, chunk(usage={"prompt_tokens": 7, "completion_tokens": 3}))
    assert t.on_event(10.7, "[DONE]")  # its time is the record's E2E: tests/client/test_reader.py
    assert t.chunk_times == pytest.approx([0.3, 0.4, 0.5])
    assert (t.finish_reason, t.finish_t) == ("tool_calls", 10.5)
    assert (t.prompt_tokens, t.completion_tokens, t.response_id) == (7, 3, "r1")


def test_completions_text_chunks():
    t = StreamTracker(start=0.0)
    t.on_event(1.0, chunk(text=" a"))
    t.on_event(2.0, chunk(text=""))
    t.on_event(3.0, chunk(text=" b", finish="length"))
    assert t.chunk_times == [1.0, 3.0] and t.finish_reason == "length"


@pytest.mark.parametrize("data,kind", PROTOCOL_ERRORS)
def test_protocol_errors_are_classified(data, kind):
    with pytest.raises(StreamProtocolError) as err:
        StreamTracker(0.0).on_event(1.0, data)
    assert err.value.kind == kind


@pytest.mark.parametrize("obj,problem", WRONG_TYPES)
def test_wrong_types_are_a_bad_response_that_names_the_field(obj, problem):
    data = json.dumps(obj)
    t = StreamTracker(0.0)
    with pytest.raises(StreamProtocolError) as err:
        t.on_event(1.0, data)
    assert err.value.kind == "bad_response"
    assert err.value.detail == f"{problem}: {data[:120]!r}"
    assert (t.prompt_tokens, t.completion_tokens, t.finish_reason) == (None, None, None)  # nothing wrong was kept


def test_null_and_absent_fields_are_not_wrong_types():
    t = StreamTracker(0.0)
    t.on_event(1.0, json.dumps({"id": "r", "choices": [{"delta": None, "text": "a", "finish_reason": None}]}))
    t.on_event(2.0, json.dumps({"choices": None, "usage": {"prompt_tokens": 4, "completion_tokens": None}}))
    t.on_event(3.0, json.dumps({"choices": [], "usage": None}))
    assert t.chunk_times == [1.0] and (t.prompt_tokens, t.completion_tokens) == (4, None)


@pytest.mark.parametrize("data", JSON_EDGES)
def test_the_fast_decode_answers_as_json_loads(data):
    """Around the fast path (one JSON value, nothing else) json.loads decides: same objects, same errors."""
    try:
        want = json.loads(data)
    except ValueError:
        want = None
    t = StreamTracker(0.0)
    if want is None:
        with pytest.raises(StreamProtocolError, match="chunk is not JSON"):
            t.on_event(1.0, data)
    else:
        assert t.on_event(1.0, data) is False and t.response_id == want["id"]


def test_build_body_asks_for_usage_and_exact_lengths():
    p = Prompt(messages=[{"role": "user", "content": "hi"}], text=None, words=1, target_tokens=1)
    body = json.loads(build_body("chat", "m", p, 50, ignore_eos=True, extra={"temperature": 0}))
    assert body == {"model": "m", "stream": True, "stream_options": {"include_usage": True}, "max_tokens": 50,
                    "messages": p.messages, "ignore_eos": True, "min_tokens": 50, "temperature": 0}
    q = Prompt(messages=None, text="hi", words=1, target_tokens=1)
    assert "ignore_eos" not in json.loads(build_body("completions", "m", q, 5, ignore_eos=False))


def test_session_text_and_cached_tokens_from_usage():
    t = StreamTracker(start=0.0, keep_text=True)
    t.on_event(1.0, chunk({"role": "assistant", "content": ""}))
    t.on_event(1.1, chunk({"reasoning_content": "thinking"}))  # reasoning is not part of the answer's content
    t.on_event(1.2, chunk({"content": " Hello"}))
    t.on_event(1.3, chunk({"content": " world"}, finish="stop"))
    t.on_event(1.4, chunk(usage={"prompt_tokens": 90, "completion_tokens": 2,
                                 "prompt_tokens_details": {"cached_tokens": 64}}))
    assert "".join(t.text) == " Hello world"
    assert (t.cached_tokens, t.cached_source) == (64, "usage")
    plain = StreamTracker(start=0.0)
    plain.on_event(1.0, chunk({"content": "x"}))
    assert plain.text is None and plain.cached_tokens is None  # no text kept for single requests


def test_cached_tokens_from_llama_cpp_timings():
    # llama.cpp's /v1/completions: usage and timings ride on the finish_reason chunk (DESIGN.md 5b).
    t = StreamTracker(start=0.0)
    t.on_event(1.0, json.dumps({"id": "c", "choices": [{"index": 0, "text": " a", "finish_reason": "length"}],
                                "usage": {"prompt_tokens": 120, "completion_tokens": 8},
                                "timings": {"prompt_n": 24, "cache_n": 96, "prompt_ms": 3.1}}))
    assert (t.cached_tokens, t.cached_source, t.prompt_tokens) == (96, "timings.cache_n", 120)


@pytest.mark.parametrize("details, words", [
    ('"many"', "usage.prompt_tokens_details is 'many', expected an object"),
    ('{"cached_tokens": "12"}', "usage.prompt_tokens_details.cached_tokens is '12', expected an integer >= 0"),
    ('{"cached_tokens": -1}', "cached_tokens is -1, expected an integer >= 0"),
])
def test_bad_cached_tokens_are_bad_responses(details, words):
    data = '{"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 1, "prompt_tokens_details": ' \
        + details + "}}"
    with pytest.raises(StreamProtocolError) as err:
        StreamTracker(0.0).on_event(1.0, data)
    assert err.value.kind == "bad_response" and words in err.value.detail


@pytest.mark.parametrize("api, ignore_eos, extra, exact", [
    ("chat", True, {}, True),
    ("completions", True, {"temperature": 0}, True),
    ("chat", False, {}, False),                        # natural lengths asked
    ("chat", True, {"ignore_eos": False}, False),      # extra_body goes over the body: it took the ask back
    ("chat", True, {"min_tokens": 1}, False),
    ("responses", True, {}, False),                    # an API without ignore_eos/min_tokens
])
def test_a_request_knows_whether_it_asked_for_an_exact_length(api, ignore_eos, extra, exact):
    from harness.client.apis import exchange
    from harness.endpoint import Endpoint

    ep = Endpoint(api=api, model="m", ignore_eos=ignore_eos, extra_body=extra)
    ex = exchange(ep, [Prompt([{"role": "user", "content": "hi"}], "hi", 1, 1)], 16)
    assert ex.exact_length is exact
    if exact:
        body = json.loads(bytes(ex.body) if isinstance(ex.body, bytes) else b"".join(ex.body.parts))
        assert body["ignore_eos"] is True and body["min_tokens"] == 16
