"""The Responses API tracker, body builder and body parser, on byte-exact streams written from the API reference.

Streams go through the real SSE decoder (``sse.LineDecoder``) at every split point, and through the response
reader when it takes a tracker.
"""

from __future__ import annotations

import ast
import json
import pathlib

import pytest

from harness.client import responses
from harness.client.responses import ResponsesTracker, build_responses_body, parse_responses_body
from harness.client.sse import LineDecoder
from harness.client.stream import StreamProtocolError
from harness.workload.prompts import Prompt

# A reasoning model thinks (summary deltas), says a sentence, then calls a tool: 22 events, 6 of them output.
STREAM = """\
event: response.created
data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_67ccd2bed1ec8190b14f964abc054267","object":"response","created_at":1767225600,"status":"in_progress","error":null,"incomplete_details":null,"model":"gpt-5-mini-2025-08-07","output":[],"usage":null}}

event: response.in_progress
data: {"type":"response.in_progress","sequence_number":1,"response":{"id":"resp_67ccd2bed1ec8190b14f964abc054267","object":"response","created_at":1767225600,"status":"in_progress","error":null,"incomplete_details":null,"model":"gpt-5-mini-2025-08-07","output":[],"usage":null}}

event: response.output_item.added
data: {"type":"response.output_item.added","sequence_number":2,"output_index":0,"item":{"id":"rs_01","type":"reasoning","summary":[]}}

event: response.reasoning_summary_part.added
data: {"type":"response.reasoning_summary_part.added","sequence_number":3,"item_id":"rs_01","output_index":0,"summary_index":0,"part":{"type":"summary_text","text":""}}

event: response.reasoning_summary_text.delta
data: {"type":"response.reasoning_summary_text.delta","sequence_number":4,"item_id":"rs_01","output_index":0,"summary_index":0,"delta":"**Weather lookup**\\n\\nThe user"}

event: response.reasoning_summary_text.delta
data: {"type":"response.reasoning_summary_text.delta","sequence_number":5,"item_id":"rs_01","output_index":0,"summary_index":0,"delta":" wants Paris; call the tool."}

event: response.reasoning_summary_text.done
data: {"type":"response.reasoning_summary_text.done","sequence_number":6,"item_id":"rs_01","output_index":0,"summary_index":0,"text":"**Weather lookup**\\n\\nThe user wants Paris; call the tool."}

event: response.reasoning_summary_part.done
data: {"type":"response.reasoning_summary_part.done","sequence_number":7,"item_id":"rs_01","output_index":0,"summary_index":0,"part":{"type":"summary_text","text":"**Weather lookup**\\n\\nThe user wants Paris; call the tool."}}

event: response.output_item.done
data: {"type":"response.output_item.done","sequence_number":8,"output_index":0,"item":{"id":"rs_01","type":"reasoning","summary":[{"type":"summary_text","text":"**Weather lookup**\\n\\nThe user wants Paris; call the tool."}]}}

event: response.output_item.added
data: {"type":"response.output_item.added","sequence_number":9,"output_index":1,"item":{"id":"msg_01","type":"message","status":"in_progress","content":[],"role":"assistant"}}

event: response.content_part.added
data: {"type":"response.content_part.added","sequence_number":10,"item_id":"msg_01","output_index":1,"content_index":0,"part":{"type":"output_text","annotations":[],"logprobs":[],"text":""}}

event: response.output_text.delta
data: {"type":"response.output_text.delta","sequence_number":11,"item_id":"msg_01","output_index":1,"content_index":0,"delta":"Checking ","logprobs":[]}

event: response.output_text.delta
data: {"type":"response.output_text.delta","sequence_number":12,"item_id":"msg_01","output_index":1,"content_index":0,"delta":"Paris — 18 °C?","logprobs":[]}

event: response.output_text.done
data: {"type":"response.output_text.done","sequence_number":13,"item_id":"msg_01","output_index":1,"content_index":0,"text":"Checking Paris — 18 °C?","logprobs":[]}

event: response.content_part.done
data: {"type":"response.content_part.done","sequence_number":14,"item_id":"msg_01","output_index":1,"content_index":0,"part":{"type":"output_text","annotations":[],"logprobs":[],"text":"Checking Paris — 18 °C?"}}

event: response.output_item.done
data: {"type":"response.output_item.done","sequence_number":15,"output_index":1,"item":{"id":"msg_01","type":"message","status":"completed","content":[{"type":"output_text","annotations":[],"logprobs":[],"text":"Checking Paris — 18 °C?"}],"role":"assistant"}}

event: response.output_item.added
data: {"type":"response.output_item.added","sequence_number":16,"output_index":2,"item":{"id":"fc_01","type":"function_call","status":"in_progress","arguments":"","call_id":"call_01","name":"get_weather"}}

event: response.function_call_arguments.delta
data: {"type":"response.function_call_arguments.delta","sequence_number":17,"item_id":"fc_01","output_index":2,"delta":"{\\"city\\":"}

event: response.function_call_arguments.delta
data: {"type":"response.function_call_arguments.delta","sequence_number":18,"item_id":"fc_01","output_index":2,"delta":"\\"Paris\\"}"}

event: response.function_call_arguments.done
data: {"type":"response.function_call_arguments.done","sequence_number":19,"item_id":"fc_01","output_index":2,"arguments":"{\\"city\\":\\"Paris\\"}"}

event: response.output_item.done
data: {"type":"response.output_item.done","sequence_number":20,"output_index":2,"item":{"id":"fc_01","type":"function_call","status":"completed","arguments":"{\\"city\\":\\"Paris\\"}","call_id":"call_01","name":"get_weather"}}

event: response.completed
data: {"type":"response.completed","sequence_number":21,"response":{"id":"resp_67ccd2bed1ec8190b14f964abc054267","object":"response","created_at":1767225600,"status":"completed","error":null,"incomplete_details":null,"model":"gpt-5-mini-2025-08-07","output":[{"id":"rs_01","type":"reasoning","summary":[{"type":"summary_text","text":"**Weather lookup**\\n\\nThe user wants Paris; call the tool."}]},{"id":"msg_01","type":"message","status":"completed","content":[{"type":"output_text","annotations":[],"logprobs":[],"text":"Checking Paris — 18 °C?"}],"role":"assistant"},{"id":"fc_01","type":"function_call","status":"completed","arguments":"{\\"city\\":\\"Paris\\"}","call_id":"call_01","name":"get_weather"}],"usage":{"input_tokens":1310,"input_tokens_details":{"cached_tokens":1152},"output_tokens":141,"output_tokens_details":{"reasoning_tokens":64},"total_tokens":1451}}}

""".encode()  # noqa: E501  (one data line per event, as servers send them)
OUTPUTS = {4: "reasoning", 5: "reasoning", 11: "content", 12: "content", 17: "tool", 18: "tool"}  # event index

# An open model on a Responses server (raw reasoning text, not a summary), cut at max_output_tokens.
INCOMPLETE = b"""\
event: response.created
data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_b7","object":"response","status":"in_progress","output":[],"usage":null}}

event: response.reasoning_text.delta
data: {"type":"response.reasoning_text.delta","sequence_number":1,"item_id":"rs_b7","output_index":0,"content_index":0,"delta":"Count to three"}

event: response.output_text.delta
data: {"type":"response.output_text.delta","sequence_number":2,"item_id":"msg_b7","output_index":1,"content_index":0,"delta":"One, two"}

event: response.incomplete
data: {"type":"response.incomplete","sequence_number":3,"response":{"id":"resp_b7","object":"response","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"output":[],"usage":{"input_tokens":21,"input_tokens_details":{"cached_tokens":0},"output_tokens":16,"output_tokens_details":{"reasoning_tokens":12},"total_tokens":37}}}

"""  # noqa: E501


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


def drive(tracker: ResponsesTracker, receives) -> bool:
    """Feed (t, bytes) receives through the SSE decoder into ``tracker``; True if the final event came."""
    dec, done = LineDecoder(), False
    for t, data in receives:
        for ev in dec.feed(data, t):
            assert not done, "an event after the final one"
            assert json.loads(ev.data)["type"] == ev.event  # the fixture's event: lines agree with the JSON
            done = tracker.on_event(ev.t, ev.data)
    return done


def fields(tr: ResponsesTracker) -> tuple:
    """Everything but the times."""
    return (len(tr.chunk_times), tr.reasoning_chunks, tr.tool_chunks, tr.text, tr.prompt_tokens,
            tr.completion_tokens, tr.cached_tokens, tr.cached_source, tr.reasoning_tokens, tr.finish_reason,
            tr.response_id, tr.chunk_tokens)


WANT = (6, 2, 2, ["Checking ", "Paris — 18 °C?"], 1310, 141, 1152, "usage.input_tokens_details.cached_tokens", 64,
        "stop", "resp_67ccd2bed1ec8190b14f964abc054267", None)


def test_a_stream_one_receive_per_event_gives_every_time_and_field():
    tr = ResponsesTracker(100.0, keep_text=True)
    assert drive(tr, [(100.0 + 0.1 * (i + 1), e) for i, e in enumerate(split_events(STREAM))])
    assert tr.chunk_times == pytest.approx([0.1 * (i + 1) for i in OUTPUTS])
    assert tr.chunk_times[0] == pytest.approx(0.5)  # TTFT: the first reasoning summary delta
    assert (tr.reasoning_t, tr.content_t, tr.tool_t) == pytest.approx((0.5, 1.2, 1.8))
    assert tr.finish_t == pytest.approx(102.2)  # absolute, as the reader takes it
    assert fields(tr) == WANT


def test_one_byte_per_receive_stamps_each_event_with_its_last_byte():
    ends = event_ends(STREAM)
    tr = ResponsesTracker(0.0, keep_text=True)
    assert drive(tr, [(float(i), STREAM[i:i + 1]) for i in range(len(STREAM))])  # splits inside "—" and "°" too
    assert tr.chunk_times == [float(ends[i] - 1) for i in OUTPUTS]
    assert tr.finish_t == float(ends[-1] - 1)
    assert fields(tr) == WANT


def test_every_split_point_gives_the_same_result():
    ends = event_ends(STREAM)
    for k in range(len(STREAM) + 1):
        tr = ResponsesTracker(0.0, keep_text=True)
        assert drive(tr, [(1.0, STREAM[:k]), (2.0, STREAM[k:])]), k
        assert tr.chunk_times == [1.0 if ends[i] <= k else 2.0 for i in OUTPUTS], k
        assert tr.finish_t == (1.0 if ends[-1] <= k else 2.0)
        assert fields(tr) == WANT, k


def test_crlf_line_ends_change_nothing():
    tr = ResponsesTracker(0.0, keep_text=True)
    assert drive(tr, [(1.0, STREAM.replace(b"\n", b"\r\n"))])
    assert fields(tr) == WANT


def test_incomplete_is_a_finished_answer_cut_at_the_cap():
    tr = ResponsesTracker(0.0)
    assert drive(tr, [(float(i + 1), e) for i, e in enumerate(split_events(INCOMPLETE))])
    assert tr.chunk_times == [2.0, 3.0] and (tr.reasoning_t, tr.content_t, tr.tool_t) == (2.0, 3.0, None)
    assert (tr.finish_reason, tr.finish_t) == ("max_output_tokens", 4.0)
    assert (tr.prompt_tokens, tr.completion_tokens, tr.cached_tokens, tr.reasoning_tokens) == (21, 16, 0, 12)
    assert tr.response_id == "resp_b7"


@pytest.mark.parametrize("response,finish", [
    ({"status": "completed"}, "stop"),
    ({}, "stop"),
    ({"status": "incomplete", "incomplete_details": {"reason": "content_filter"}}, "content_filter"),
    ({"status": "cancelled"}, "cancelled"),  # kept as it came
])
def test_the_finish_reason_of_a_completed_event(response, finish):
    tr = ResponsesTracker(0.0)
    assert tr.on_event(1.0, json.dumps({"type": "response.completed", "response": response}))
    assert tr.finish_reason == finish and tr.prompt_tokens is None  # no usage: none kept


def test_incomplete_without_a_reason():
    tr = ResponsesTracker(0.0)
    assert tr.on_event(1.0, json.dumps({"type": "response.incomplete", "response": {"incomplete_details": None}}))
    assert tr.finish_reason == "incomplete"


def test_a_stream_without_its_final_event_is_not_done_and_has_no_finish():
    tr = ResponsesTracker(0.0)
    assert not drive(tr, [(1.0, b"".join(split_events(STREAM)[:-1]))])
    assert len(tr.chunk_times) == 6 and (tr.finish_reason, tr.finish_t) == (None, None)
    assert tr.response_id == "resp_67ccd2bed1ec8190b14f964abc054267" and tr.completion_tokens is None


@pytest.mark.parametrize("obj", [
    {"type": "response.audio.delta", "delta": 12345},  # a type not read: its fields are not checked either
    {"type": "response.future_thing.delta", "response": "x"},
    {"type": "response.output_item.added", "item": "garbage"},
    {"type": "response.queued", "response": {"id": "resp_q"}},
    {"type": "response.output_text.done", "text": 7},
    {"type": "response.output_text.delta", "delta": ""},  # an empty delta is not output
    {"type": "response.created", "response": {"status": "in_progress"}},  # no id yet
])
def test_events_that_carry_nothing_are_ignored(obj):
    tr = ResponsesTracker(0.0)
    assert tr.on_event(1.0, json.dumps(obj)) is False
    assert (tr.chunk_times, tr.response_id, tr.finish_reason) == ([], None, None)


def test_refusals_are_answer_text_and_custom_tool_input_a_tool_call():
    tr = ResponsesTracker(0.0, keep_text=True)
    tr.on_event(1.0, json.dumps({"type": "response.refusal.delta", "delta": "I can't help"}))
    tr.on_event(2.0, json.dumps({"type": "response.custom_tool_call_input.delta", "delta": "ls -la"}))
    assert (tr.content_t, tr.tool_t, tr.text) == (1.0, 2.0, ["I can't help"])


@pytest.mark.parametrize("data,kind", [
    ("{not json", "malformed_chunk"),
    ("", "malformed_chunk"),
    ("[DONE]", "malformed_chunk"),  # a chat/completions terminator is not a Responses event
    ("[" * 100_000, "malformed_chunk"),
    ("[1, 2]", "bad_response"),
])
def test_not_an_event_is_classified(data, kind):
    with pytest.raises(StreamProtocolError) as err:
        ResponsesTracker(0.0).on_event(1.0, data)
    assert err.value.kind == kind


def completed(**usage):
    return {"type": "response.completed", "response": {"id": "r", "status": "completed", "usage": usage}}


@pytest.mark.parametrize("obj,problem", [
    ([1, 2], "server event is an array, expected an object"),
    ({"delta": "x"}, "server event's type is absent or null, expected a string naming the event"),
    ({"type": 7}, "server event's type is 7, expected a string naming the event"),
    ({"type": ["response.output_text.delta"]}, "server event's type is an array, expected a string naming the "
                                               "event"),
    ({"type": "response.output_text.delta", "delta": 7},
     "response.output_text.delta event's delta is 7, expected a string"),
    ({"type": "response.output_text.delta"}, "response.output_text.delta event's delta is absent or null, "
                                             "expected a string"),
    ({"type": "response.function_call_arguments.delta", "delta": {"city": "Paris"}},
     "response.function_call_arguments.delta event's delta is an object, expected a string"),
    ({"type": "response.created", "response": "resp_1"},
     "response.created event's response is 'resp_1', expected an object"),
    ({"type": "response.in_progress", "response": {"id": 5}},
     "response.in_progress event's response.id is 5, expected a string"),
    ({"type": "response.completed"}, "response.completed event's response is absent or null, expected an object"),
    ({"type": "response.completed", "response": {"usage": "all"}},
     "response.completed event's response.usage is 'all', expected an object"),
    (completed(input_tokens="fifty", output_tokens=3),
     "response.completed event's response.usage.input_tokens is 'fifty', expected an integer >= 0"),
    (completed(input_tokens=5, output_tokens=-1),
     "response.completed event's response.usage.output_tokens is -1, expected an integer >= 0"),
    (completed(input_tokens=5, output_tokens=2.5),
     "response.completed event's response.usage.output_tokens is 2.5, expected an integer >= 0"),
    (completed(input_tokens=5, input_tokens_details=[]),
     "response.completed event's response.usage.input_tokens_details is an array, expected an object"),
    (completed(input_tokens=5, input_tokens_details={"cached_tokens": True}),
     "response.completed event's response.usage.input_tokens_details.cached_tokens is true, expected an integer "
     ">= 0"),
    (completed(output_tokens=5, output_tokens_details={"reasoning_tokens": "4"}),
     "response.completed event's response.usage.output_tokens_details.reasoning_tokens is '4', expected an "
     "integer >= 0"),
    ({"type": "response.completed", "response": {"id": ["r"]}},
     "response.completed event's response.id is an array, expected a string"),
    ({"type": "response.completed", "response": {"status": 1}},
     "response.completed event's response.status is 1, expected a string"),
    ({"type": "response.incomplete", "response": {"incomplete_details": "max"}},
     "response.incomplete event's response.incomplete_details is 'max', expected an object"),
    ({"type": "response.incomplete", "response": {"incomplete_details": {"reason": 3}}},
     "response.incomplete event's response.incomplete_details.reason is 3, expected a string"),
])
def test_wrong_types_are_a_bad_response_that_names_the_event_and_field(obj, problem):
    data = json.dumps(obj)
    tr = ResponsesTracker(0.0)
    with pytest.raises(StreamProtocolError) as err:
        tr.on_event(1.0, data)
    assert err.value.kind == "bad_response"
    assert err.value.detail == f"{problem}: {data[:120]!r}"
    assert fields(tr) == (0, 0, 0, None, None, None, None, None, None, None, None, None)  # nothing was kept
    assert tr.finish_t is None


@pytest.mark.parametrize("obj,detail", [
    ({"type": "error", "code": "rate_limit_exceeded", "message": "Slow down", "param": None, "sequence_number": 3},
     "server error in stream (error): rate_limit_exceeded: Slow down"),
    ({"type": "error", "code": None, "message": "The server had an error", "param": None},
     "server error in stream (error): The server had an error"),
    ({"type": "error", "sequence_number": 3},
     'server error in stream (error): {"type": "error", "sequence_number": 3}'),
    ({"type": "response.failed", "response": {"id": "r", "status": "failed",
                                               "error": {"code": "server_error", "message": "The model crashed"}}},
     "server error in stream (response.failed): server_error: The model crashed"),
    ({"type": "response.failed", "response": {"id": "r", "status": "failed", "error": None}},
     "server error in stream (response.failed): no error details"),
    ({"type": "response.failed", "response": "gone"}, "server error in stream (response.failed): gone"),
    ({"error": {"message": "upstream overloaded"}}, "server error in stream: upstream overloaded"),  # a proxy's
])
def test_error_events_are_a_stream_error_with_the_server_s_message(obj, detail):
    tr = ResponsesTracker(0.0)
    tr.on_event(0.5, json.dumps({"type": "response.output_text.delta", "delta": "a"}))
    with pytest.raises(StreamProtocolError) as err:
        tr.on_event(1.0, json.dumps(obj))
    assert (err.value.kind, err.value.detail) == ("stream_error", detail)
    assert tr.finish_reason is None and tr.chunk_times == [0.5]


def test_an_error_mid_stream_through_the_decoder():
    evs = split_events(STREAM)
    err = (b'event: error\ndata: {"type":"error","code":"server_error","message":"Internal error",'
           b'"param":null,"sequence_number":13}\n\n')
    tr = ResponsesTracker(0.0)
    with pytest.raises(StreamProtocolError, match="server_error: Internal error"):
        drive(tr, [(1.0, b"".join(evs[:13]) + err)])
    assert len(tr.chunk_times) == 4


# -- request bodies ----------------------------------------------------------------------------------------

def test_chat_prompt_body_puts_the_system_message_in_instructions():
    p = Prompt([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Weather?"}], None, 4, 5)
    assert build_responses_body("gpt-5-mini", p, 64) == (
        b'{"model":"gpt-5-mini","stream":true,"max_output_tokens":64,"store":false,"instructions":"Be brief.",'
        b'"input":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello"},'
        b'{"role":"user","content":"Weather?"}]}')


def test_text_prompt_body_and_extra_keys():
    p = Prompt(None, "Once upon a time", 4, 4)
    body = json.loads(build_responses_body("m", p, 8, stream=False,
                                           extra={"reasoning": {"effort": "low"}, "store": True}))
    assert body == {"model": "m", "stream": False, "max_output_tokens": 8, "store": True, "input": "Once upon a time",
                    "reasoning": {"effort": "low"}}


def test_a_chat_prompt_without_a_system_message_has_no_instructions():
    body = json.loads(build_responses_body("m", Prompt([{"role": "user", "content": "x"}], None, 1, 1), 8))
    assert "instructions" not in body and body["input"] == [{"role": "user", "content": "x"}]


# -- non-streaming answers ---------------------------------------------------------------------------------

BODY = json.loads(split_events(STREAM)[-1].split(b"data: ", 1)[1])["response"]


def test_a_non_streaming_answer_fills_the_tracker_without_output_times():
    tr = ResponsesTracker(0.0, keep_text=True)
    parse_responses_body(tr, 3.0, BODY)
    assert tr.chunk_times == [] and tr.content_t is None  # nothing was streamed: no TTFT
    assert fields(tr) == (0, 0, 0, ["Checking Paris — 18 °C?"], *WANT[4:])
    assert tr.finish_t == 3.0


def test_a_non_streaming_answer_with_refusal_and_incomplete_status():
    body = {"id": "r9", "status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"},
            "output": [{"type": "reasoning", "summary": []},
                       {"type": "message", "content": [{"type": "refusal", "refusal": "No."}]}],
            "usage": {"input_tokens": 3, "output_tokens": 9}}
    tr = ResponsesTracker(0.0, keep_text=True)
    parse_responses_body(tr, 1.0, body)
    assert (tr.finish_reason, tr.text, tr.prompt_tokens, tr.completion_tokens) == ("max_output_tokens", ["No."], 3, 9)
    assert (tr.cached_tokens, tr.reasoning_tokens, tr.response_id) == (None, None, "r9")


@pytest.mark.parametrize("body,detail", [
    ({"id": "r", "status": "failed", "error": {"code": "server_error", "message": "boom"}},
     "server error in the response (status failed): server_error: boom"),
    ({"id": "r", "status": "failed", "error": None}, "server error in the response (status failed): no error details"),
])
def test_a_failed_non_streaming_answer_is_a_stream_error(body, detail):
    with pytest.raises(StreamProtocolError) as err:
        parse_responses_body(ResponsesTracker(0.0), 1.0, body)
    assert (err.value.kind, err.value.detail) == ("stream_error", detail)


@pytest.mark.parametrize("body,problem", [
    ([BODY], "response body is an array, expected a Responses object"),
    ("ok", "response body is 'ok', expected a Responses object"),
    ({"usage": {"input_tokens": "x"}}, "response body's usage.input_tokens is 'x', expected an integer >= 0"),
    ({"usage": [1]}, "response body's usage is an array, expected an object"),
    ({"output": {"type": "message"}}, "response body's output is an object, expected an array"),
    ({"output": ["hi"]}, "response body's output[0] is 'hi', expected an object"),
    ({"output": [{"type": "message", "content": "hi"}]}, "response body's output[0].content is 'hi', expected an "
                                                         "array"),
    ({"output": [{"type": "message", "content": [{"type": "output_text", "text": 5}]}]},
     "response body's output[0].content[0].text is 5, expected a string"),
    ({"status": 200}, "response body's status is 200, expected a string"),
])
def test_a_non_streaming_answer_of_the_wrong_shape_is_a_bad_response(body, problem):
    tr = ResponsesTracker(0.0, keep_text=True)
    with pytest.raises(StreamProtocolError) as err:
        parse_responses_body(tr, 1.0, body)
    assert err.value.kind == "bad_response"
    assert err.value.detail == f"{problem}: {json.dumps(body)[:160]}"
    assert (tr.finish_reason, tr.prompt_tokens, tr.text) == (None, None, [])


# -- through the response reader ---------------------------------------------------------------------------

def _reader():
    from harness.client.reader import ResponseReader
    return ResponseReader


def http(body_events: list[bytes], end: bytes = b"0\r\n\r\n") -> bytes:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    return head + b"".join(b"%x\r\n%b\r\n" % (len(e), e) for e in body_events) + end


def test_the_reader_makes_a_record_of_the_stream():
    reader_cls = _reader()
    r = reader_cls(100.0, tracker=ResponsesTracker(100.0, keep_text=True), keep_text=True)
    wire = http(split_events(STREAM))
    for i in range(0, len(wire), 7):  # 7-byte receives: events split across HTTP chunks and receives
        r.feed(wire[i:i + 7], 100.0 + i / 1000)
    rec = r.record
    assert r.over and rec.error is None, rec.error_detail
    assert rec.ttft_s == rec.reasoning_start_s and rec.ttft_s < rec.ttfo_s < rec.tool_call_s
    assert (rec.output_tokens, rec.prompt_tokens, rec.cached_tokens, rec.reasoning_tokens) == (141, 1310, 1152, 64)
    assert (rec.finish_reason, rec.response_id, rec.tool_call_chunks) == ("stop", WANT[10], 2)
    assert rec.content == "Checking Paris — 18 °C?" and not rec.reasoning_tokens_counted


def test_the_reader_calls_a_stream_without_its_final_event_truncated():
    reader_cls = _reader()
    r = reader_cls(0.0, tracker=ResponsesTracker(0.0))
    r.feed(http(split_events(STREAM)[:-1]), 1.0)
    assert r.over and r.record.error == "truncated" and r.record.finish_reason is None


def test_the_reader_parses_a_non_streaming_answer():
    reader_cls = _reader()
    body = json.dumps(BODY, ensure_ascii=False).encode()
    r = reader_cls(0.0, tracker=ResponsesTracker(0.0), body_parser=parse_responses_body)
    r.feed(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%b" % (len(body), body),
           2.0)
    rec = r.record
    assert r.over and rec.error is None, rec.error_detail
    assert (rec.output_tokens, rec.prompt_tokens, rec.finish_reason, rec.ttft_s, rec.e2e_s) == (141, 1310, "stop",
                                                                                               None, 2.0)


def test_the_module_is_pure():
    tree = ast.parse(pathlib.Path(responses.__file__).read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported <= {"__future__", "json", "harness.client.stream", "harness.workload.prompts"}
