"""The Anthropic Messages tracker, body builder, headers and body parser, on byte-exact streams written from the
API reference.

Streams go through the real SSE decoder (``sse.LineDecoder``) at every split point, and through the response
reader when it takes a tracker.
"""

from __future__ import annotations

import ast
import json
import pathlib

import pytest

from harness.client import anthropic
from harness.client.anthropic import MessagesTracker, build_messages_body, messages_headers, parse_messages_body
from harness.client.sse import LineDecoder
from harness.client.stream import StreamProtocolError
from harness.workload.prompts import Prompt

# Extended thinking, a sentence, then a tool call: 18 events, 6 of them output (an empty partial_json is not).
STREAM = r"""event: message_start
data: {"type":"message_start","message":{"id":"msg_01XFDUDYJgAACzvnptvVoYEL","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":412,"cache_creation_input_tokens":0,"cache_read_input_tokens":2048,"output_tokens":3}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}

event: ping
data: {"type": "ping"}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"The user wants the weather"}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":" in Paris; I'll call get_weather."}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds40ldVP9aPSqQhaL6IuGGAhNaIv2qUSk4tFMbG3YB4wq0TGzYmwZ0HQ2Xm3U"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Let me check "}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Paris — 18 °C?"}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: content_block_start
data: {"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_01T1x1fJ34qAmk2tNTrN7Up6","name":"get_weather","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"city\": \"Pa"}}

event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"ris\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":2}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":89}}

event: message_stop
data: {"type":"message_stop"}

""".encode()  # noqa: E501  (one data line per event, as servers send them)
OUTPUTS = {3: "reasoning", 4: "reasoning", 8: "content", 9: "content", 13: "tool", 14: "tool"}  # event index
FINISH_EVENT = 16  # message_delta


def split_events(raw: bytes) -> list[bytes]:
    parts = raw.split(b"\n\n")
    assert parts[-1] == b""
    return [p + b"\n\n" for p in parts[:-1]]


def event_ends(raw: bytes) -> list[int]:
    """The offset just past each event's blank line: the byte that completes it."""
    out, pos = [], 0
    for e in split_events(raw):
        pos += len(e)
        out.append(pos)
    return out


def drive(tracker: MessagesTracker, receives) -> bool:
    """Feed (t, bytes) receives through the SSE decoder into ``tracker``; True if the final event came."""
    dec, done = LineDecoder(), False
    for t, data in receives:
        for ev in dec.feed(data, t):
            assert not done, "an event after the final one"
            assert json.loads(ev.data)["type"] == ev.event  # the fixture's event: lines agree with the JSON
            done = tracker.on_event(ev.t, ev.data)
    return done


def fields(tr: MessagesTracker) -> tuple:
    """Everything but the times."""
    return (len(tr.chunk_times), tr.reasoning_chunks, tr.tool_chunks, tr.text, tr.prompt_tokens,
            tr.completion_tokens, tr.cached_tokens, tr.cached_source, tr.reasoning_tokens, tr.finish_reason,
            tr.response_id, tr.chunk_tokens, tr.blocks)


WANT = (6, 2, 2, ["Let me check ", "Paris — 18 °C?"], 412 + 0 + 2048, 89, 2048, "usage.cache_read_input_tokens", None,
        "tool_use", "msg_01XFDUDYJgAACzvnptvVoYEL", None, {0: "thinking", 1: "text", 2: "tool_use"})


def test_a_stream_one_receive_per_event_gives_every_time_and_field():
    tr = MessagesTracker(100.0, keep_text=True)
    assert drive(tr, [(100.0 + 0.1 * (i + 1), e) for i, e in enumerate(split_events(STREAM))])
    assert tr.chunk_times == pytest.approx([0.1 * (i + 1) for i in OUTPUTS])
    assert tr.chunk_times[0] == pytest.approx(0.4)  # TTFT: the first thinking delta
    assert (tr.reasoning_t, tr.content_t, tr.tool_t) == pytest.approx((0.4, 0.9, 1.4))
    assert tr.finish_t == pytest.approx(100.0 + 0.1 * (FINISH_EVENT + 1))  # absolute: message_delta's arrival
    assert fields(tr) == WANT


def test_one_byte_per_receive_stamps_each_event_with_its_last_byte():
    ends = event_ends(STREAM)
    tr = MessagesTracker(0.0, keep_text=True)
    assert drive(tr, [(float(i), STREAM[i:i + 1]) for i in range(len(STREAM))])  # splits inside "—" and "°" too
    assert tr.chunk_times == [float(ends[i] - 1) for i in OUTPUTS]
    assert tr.finish_t == float(ends[FINISH_EVENT] - 1)
    assert fields(tr) == WANT


def test_every_split_point_gives_the_same_result():
    ends = event_ends(STREAM)
    for k in range(len(STREAM) + 1):
        tr = MessagesTracker(0.0, keep_text=True)
        assert drive(tr, [(1.0, STREAM[:k]), (2.0, STREAM[k:])]), k
        assert tr.chunk_times == [1.0 if ends[i] <= k else 2.0 for i in OUTPUTS], k
        assert tr.finish_t == (1.0 if ends[FINISH_EVENT] <= k else 2.0)
        assert fields(tr) == WANT, k


def test_crlf_line_ends_change_nothing():
    tr = MessagesTracker(0.0, keep_text=True)
    assert drive(tr, [(1.0, STREAM.replace(b"\n", b"\r\n"))])
    assert fields(tr) == WANT


def test_usage_so_far_then_the_cumulative_counts_of_message_delta():
    evs = split_events(STREAM)
    tr = MessagesTracker(0.0)
    assert not drive(tr, [(1.0, evs[0])])
    assert (tr.prompt_tokens, tr.cached_tokens, tr.completion_tokens, tr.response_id) == (2460, 2048, 3, WANT[10])
    # Newer servers repeat the input counts on message_delta, cumulative: they replace the earlier ones.
    tr.on_event(2.0, json.dumps({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                                 "usage": {"input_tokens": 412, "cache_creation_input_tokens": 100,
                                           "cache_read_input_tokens": 2048, "output_tokens": 50}}))
    assert (tr.prompt_tokens, tr.cached_tokens, tr.completion_tokens) == (2560, 2048, 50)
    assert (tr.finish_reason, tr.finish_t) == ("end_turn", 2.0)


def test_thinking_tokens_are_taken_when_the_server_reports_them():
    tr = MessagesTracker(0.0)
    tr.on_event(1.0, json.dumps({"type": "message_delta", "delta": {"stop_reason": "max_tokens"},
                                 "usage": {"output_tokens": 90, "output_tokens_details": {"thinking_tokens": 70}}}))
    assert (tr.reasoning_tokens, tr.completion_tokens, tr.finish_reason) == (70, 90, "max_tokens")


def test_a_redacted_thinking_block_is_one_reasoning_output_and_a_start_with_text_is_content():
    tr = MessagesTracker(0.0, keep_text=True)
    tr.on_event(1.0, json.dumps({"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"}}))
    tr.on_event(2.0, json.dumps({"type": "content_block_start", "index": 1,
                                 "content_block": {"type": "text", "text": "Hi"}}))
    assert tr.chunk_times == [1.0, 2.0] and (tr.reasoning_t, tr.content_t, tr.text) == (1.0, 2.0, ["Hi"])
    assert tr.blocks == {0: "redacted_thinking", 1: "text"}


def test_a_stream_without_message_stop_is_not_done():
    evs = split_events(STREAM)
    tr = MessagesTracker(0.0)
    assert not drive(tr, [(1.0, b"".join(evs[:FINISH_EVENT]))])  # cut before message_delta: no finish
    assert len(tr.chunk_times) == 6 and (tr.finish_reason, tr.finish_t) == (None, None)
    assert tr.completion_tokens == 3  # message_start's count so far
    tr = MessagesTracker(0.0)
    assert not drive(tr, [(1.0, b"".join(evs[:-1]))])  # message_delta came: finished, message_stop lost
    assert (tr.finish_reason, tr.finish_t) == ("tool_use", 1.0)


@pytest.mark.parametrize("obj", [
    {"type": "ping"},
    {"type": "content_block_stop", "index": "whatever"},  # a type not read: its fields are not checked
    {"type": "future_event", "message": 7},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "Eq=="}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "citations_delta", "citation": {}}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "future_delta", "text": 5}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": ""}},  # empty: not output
    {"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t", "name": "f",
                                                                  "input": {}}},
    {"type": "message_delta", "delta": {"stop_reason": None}},  # no stop reason yet
    {"type": "message_start", "message": {"usage": None}},
])
def test_events_that_carry_no_output_or_finish_are_ignored(obj):
    tr = MessagesTracker(0.0)
    assert tr.on_event(1.0, json.dumps(obj)) is False
    assert (tr.chunk_times, tr.response_id, tr.finish_reason, tr.finish_t, tr.completion_tokens) == (
        [], None, None, None, None)


def test_a_later_message_delta_without_a_stop_reason_keeps_the_finish():
    tr = MessagesTracker(0.0)
    tr.on_event(1.0, json.dumps({"type": "message_delta", "delta": {"stop_reason": "end_turn"}}))
    tr.on_event(2.0, json.dumps({"type": "message_delta", "delta": {"stop_reason": None},
                                 "usage": {"output_tokens": 12}}))
    assert (tr.finish_reason, tr.finish_t, tr.completion_tokens) == ("end_turn", 1.0, 12)


@pytest.mark.parametrize("data,kind", [
    ("{not json", "malformed_chunk"),
    ("", "malformed_chunk"),
    ("[" * 100_000, "malformed_chunk"),
    ('"message_stop"', "bad_response"),
])
def test_not_an_event_is_classified(data, kind):
    with pytest.raises(StreamProtocolError) as err:
        MessagesTracker(0.0).on_event(1.0, data)
    assert err.value.kind == kind


def delta(d):
    return {"type": "content_block_delta", "index": 0, "delta": d}


@pytest.mark.parametrize("obj,problem", [
    ([1, 2], "server event is an array, expected an object"),
    ({"index": 0}, "server event's type is absent or null, expected a string naming the event"),
    ({"type": {"name": "ping"}}, "server event's type is an object, expected a string naming the event"),
    ({"type": "content_block_delta", "index": 0}, "content_block_delta event's delta is absent or null, expected an "
                                                  "object"),
    (delta("hello"), "content_block_delta event's delta is 'hello', expected an object"),
    (delta({"text": "a"}), "content_block_delta event's delta.type is absent or null, expected a string"),
    (delta({"type": "text_delta", "text": 5}), "content_block_delta event's delta.text is 5, expected a string"),
    (delta({"type": "text_delta"}), "content_block_delta event's delta.text is absent or null, expected a string"),
    (delta({"type": "thinking_delta", "thinking": ["x"]}),
     "content_block_delta event's delta.thinking is an array, expected a string"),
    (delta({"type": "input_json_delta", "partial_json": {"city": "Paris"}}),
     "content_block_delta event's delta.partial_json is an object, expected a string"),
    ({"type": "content_block_start", "content_block": {"type": "text"}},
     "content_block_start event's index is absent or null, expected an integer >= 0"),
    ({"type": "content_block_start", "index": "1", "content_block": {"type": "text"}},
     "content_block_start event's index is '1', expected an integer >= 0"),
    ({"type": "content_block_start", "index": 1, "content_block": "text"},
     "content_block_start event's content_block is 'text', expected an object"),
    ({"type": "content_block_start", "index": 1, "content_block": {"text": ""}},
     "content_block_start event's content_block.type is absent or null, expected a string"),
    ({"type": "content_block_start", "index": 1, "content_block": {"type": "thinking", "thinking": 0}},
     "content_block_start event's content_block.thinking is 0, expected a string"),
    ({"type": "message_start"}, "message_start event's message is absent or null, expected an object"),
    ({"type": "message_start", "message": {"id": 1}}, "message_start event's message.id is 1, expected a string"),
    ({"type": "message_start", "message": {"usage": {"input_tokens": "412"}}},
     "message_start event's message.usage.input_tokens is '412', expected an integer >= 0"),
    ({"type": "message_start", "message": {"usage": {"input_tokens": 4, "cache_read_input_tokens": -1}}},
     "message_start event's message.usage.cache_read_input_tokens is -1, expected an integer >= 0"),
    ({"type": "message_start", "message": {"usage": {"input_tokens": 4, "cache_creation_input_tokens": 1.5}}},
     "message_start event's message.usage.cache_creation_input_tokens is 1.5, expected an integer >= 0"),
    ({"type": "message_delta", "delta": "end_turn"}, "message_delta event's delta is 'end_turn', expected an object"),
    ({"type": "message_delta", "delta": {"stop_reason": 1}},
     "message_delta event's delta.stop_reason is 1, expected a string"),
    ({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": "3"}},
     "message_delta event's usage.output_tokens is '3', expected an integer >= 0"),
    ({"type": "message_delta", "usage": {"output_tokens": True}},
     "message_delta event's usage.output_tokens is true, expected an integer >= 0"),
    ({"type": "message_delta", "usage": [89]}, "message_delta event's usage is an array, expected an object"),
    ({"type": "message_delta", "usage": {"output_tokens": 9, "output_tokens_details": {"thinking_tokens": "7"}}},
     "message_delta event's usage.output_tokens_details.thinking_tokens is '7', expected an integer >= 0"),
])
def test_wrong_types_are_a_bad_response_that_names_the_event_and_field(obj, problem):
    data = json.dumps(obj)
    tr = MessagesTracker(0.0)
    with pytest.raises(StreamProtocolError) as err:
        tr.on_event(1.0, data)
    assert err.value.kind == "bad_response"
    assert err.value.detail == f"{problem}: {data[:120]!r}"
    assert fields(tr) == (0, 0, 0, None, None, None, None, None, None, None, None, None, {})  # nothing was kept
    assert tr.finish_t is None


@pytest.mark.parametrize("obj,detail", [
    ({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
     "server error in stream: overloaded_error: Overloaded"),
    ({"type": "error", "error": {"message": "Internal server error"}}, "server error in stream: Internal server error"),
    ({"type": "error"}, "server error in stream: no error details"),
    ({"type": "error", "error": "boom"}, "server error in stream: boom"),
    ({"error": {"type": "api_error", "message": "upstream"}}, "server error in stream: api_error: upstream"),
])
def test_error_events_are_a_stream_error_with_the_server_s_message(obj, detail):
    tr = MessagesTracker(0.0)
    tr.on_event(0.5, json.dumps(delta({"type": "text_delta", "text": "a"})))
    with pytest.raises(StreamProtocolError) as err:
        tr.on_event(1.0, json.dumps(obj))
    assert (err.value.kind, err.value.detail) == ("stream_error", detail)
    assert tr.finish_reason is None and tr.chunk_times == [0.5]


def test_an_error_mid_stream_through_the_decoder():
    evs = split_events(STREAM)
    err = b'event: error\ndata: {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}\n\n'
    tr = MessagesTracker(0.0)
    with pytest.raises(StreamProtocolError, match="overloaded_error: Overloaded"):
        drive(tr, [(1.0, b"".join(evs[:9]) + err)])
    assert len(tr.chunk_times) == 3


# -- request bodies and headers ----------------------------------------------------------------------------

def test_chat_prompt_body_puts_the_system_message_on_top():
    p = Prompt([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Weather?"}], None, 4, 5)
    assert build_messages_body("claude-sonnet-4-5", p, 64) == (
        b'{"model":"claude-sonnet-4-5","max_tokens":64,"stream":true,"system":"Be brief.",'
        b'"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello"},'
        b'{"role":"user","content":"Weather?"}]}')


def test_text_prompt_body_and_extra_keys():
    body = json.loads(build_messages_body("m", Prompt(None, "Once upon a time", 4, 4), 8, stream=False,
                                          extra={"thinking": {"type": "enabled", "budget_tokens": 1024}}))
    assert body == {"model": "m", "max_tokens": 8, "stream": False,
                    "messages": [{"role": "user", "content": "Once upon a time"}],
                    "thinking": {"type": "enabled", "budget_tokens": 1024}}


def test_headers():
    assert messages_headers("sk-ant-x") == {"anthropic-version": "2023-06-01", "x-api-key": "sk-ant-x"}
    assert messages_headers(None) == {"anthropic-version": "2023-06-01"}
    assert messages_headers("", "2024-01-01") == {"anthropic-version": "2024-01-01"}


# -- non-streaming answers ---------------------------------------------------------------------------------

BODY = {"id": "msg_01", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [{"type": "thinking", "thinking": "Paris weather.", "signature": "EqQB"},
                    {"type": "text", "text": "Let me check Paris — 18 °C?"},
                    {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Paris"}}],
        "stop_reason": "tool_use", "stop_sequence": None,
        "usage": {"input_tokens": 412, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 2048,
                  "output_tokens": 89}}


def test_a_non_streaming_answer_fills_the_tracker_without_output_times():
    tr = MessagesTracker(0.0, keep_text=True)
    parse_messages_body(tr, 3.0, BODY)
    assert tr.chunk_times == [] and tr.content_t is None and tr.reasoning_chunks == 0  # nothing streamed: no TTFT
    assert (tr.text, tr.prompt_tokens, tr.completion_tokens, tr.cached_tokens, tr.cached_source) == (
        ["Let me check Paris — 18 °C?"], 2460, 89, 2048, "usage.cache_read_input_tokens")
    assert (tr.reasoning_tokens, tr.finish_reason, tr.finish_t, tr.response_id) == (None, "tool_use", 3.0, "msg_01")


def test_a_non_streaming_answer_without_cache_counts():
    tr = MessagesTracker(0.0)
    parse_messages_body(tr, 1.0, {"content": [], "stop_reason": "end_turn", "usage": {"input_tokens": 5,
                                                                                       "output_tokens": 1}})
    assert (tr.prompt_tokens, tr.cached_tokens, tr.cached_source, tr.completion_tokens) == (5, None, None, 1)


def test_an_error_body_is_a_stream_error():
    with pytest.raises(StreamProtocolError) as err:
        parse_messages_body(MessagesTracker(0.0), 1.0, {"type": "error", "error": {"type": "overloaded_error",
                                                                                    "message": "Overloaded"}})
    assert (err.value.kind, err.value.detail) == ("stream_error", "server error in the response: overloaded_error: "
                                                                  "Overloaded")


@pytest.mark.parametrize("body,problem", [
    ([BODY], "response body is an array, expected a Message object"),
    (None, "response body is null, expected a Message object"),
    ({"usage": {"input_tokens": "x"}}, "response body's usage.input_tokens is 'x', expected an integer >= 0"),
    ({"usage": "x"}, "response body's usage is 'x', expected an object"),
    ({"content": "hello"}, "response body's content is 'hello', expected an array"),
    ({"content": ["hello"]}, "response body's content[0] is 'hello', expected an object"),
    ({"content": [{"type": "text", "text": None}, {"type": "text", "text": 5}]},
     "response body's content[1].text is 5, expected a string"),
    ({"stop_reason": 0}, "response body's stop_reason is 0, expected a string"),
    ({"id": {}}, "response body's id is an object, expected a string"),
])
def test_a_non_streaming_answer_of_the_wrong_shape_is_a_bad_response(body, problem):
    tr = MessagesTracker(0.0, keep_text=True)
    with pytest.raises(StreamProtocolError) as err:
        parse_messages_body(tr, 1.0, body)
    assert err.value.kind == "bad_response"
    assert err.value.detail == f"{problem}: {json.dumps(body)[:160]}"
    assert (tr.finish_reason, tr.prompt_tokens, tr.text) == (None, None, [])


# -- through the response reader ---------------------------------------------------------------------------

def _reader():
    from harness.client.reader import ResponseReader
    return ResponseReader


def http(body_events: list[bytes], end: bytes = b"0\r\n\r\n") -> bytes:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n"
    return head + b"".join(b"%x\r\n%b\r\n" % (len(e), e) for e in body_events) + end


def test_the_reader_makes_a_record_of_the_stream():
    reader_cls = _reader()
    r = reader_cls(100.0, tracker=MessagesTracker(100.0, keep_text=True), keep_text=True)
    wire = http(split_events(STREAM))
    for i in range(0, len(wire), 7):  # 7-byte receives: events split across HTTP chunks and receives
        r.feed(wire[i:i + 7], 100.0 + i / 1000)
    rec = r.record
    assert r.over and rec.error is None, rec.error_detail
    assert rec.ttft_s == rec.reasoning_start_s and rec.ttft_s < rec.ttfo_s < rec.tool_call_s
    assert (rec.output_tokens, rec.prompt_tokens, rec.cached_tokens) == (89, 2460, 2048)
    assert (rec.finish_reason, rec.response_id, rec.tool_call_chunks) == ("tool_use", WANT[10], 2)
    assert rec.content == "Let me check Paris — 18 °C?"
    assert (rec.reasoning_tokens, rec.reasoning_tokens_counted) == (2, True)  # not reported: chunks counted


def test_the_reader_on_a_stream_cut_before_and_after_message_delta():
    reader_cls = _reader()
    evs = split_events(STREAM)
    r = reader_cls(0.0, tracker=MessagesTracker(0.0))
    r.feed(http(evs[:FINISH_EVENT]), 1.0)
    assert r.over and r.record.error == "truncated"
    r = reader_cls(0.0, tracker=MessagesTracker(0.0))
    r.feed(http(evs[:-1]), 1.0)  # the stop reason came: a finished answer whose message_stop was lost
    assert r.over and r.record.error is None and r.record.finish_reason == "tool_use"


def test_the_reader_parses_a_non_streaming_answer():
    reader_cls = _reader()
    body = json.dumps(BODY, ensure_ascii=False).encode()
    r = reader_cls(0.0, tracker=MessagesTracker(0.0), body_parser=parse_messages_body)
    r.feed(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%b" % (len(body), body),
           2.0)
    rec = r.record
    assert r.over and rec.error is None, rec.error_detail
    assert (rec.output_tokens, rec.prompt_tokens, rec.finish_reason, rec.ttft_s, rec.e2e_s) == (89, 2460, "tool_use",
                                                                                               None, 2.0)


def test_the_module_is_pure():
    tree = ast.parse(pathlib.Path(anthropic.__file__).read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported <= {"__future__", "json", "harness.client.stream", "harness.workload.prompts"}
