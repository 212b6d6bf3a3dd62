"""The response reader on scripted bytes and a fake clock: every outcome, its error class and its times, exactly."""

from __future__ import annotations

import json

import pytest

from harness.client.reader import MAX_ERROR_BODY
from tests.kit.bad_chunks import BROKEN_EVENTS, WRONG_SHAPES, WRONG_USAGE
from tests.kit.wire import DONE, END, LAST, ROLE, SSE_HEAD, START, STREAM, USAGE, A, B, chunked, event, read, wire


def test_a_clean_stream_one_receive_per_event():
    r = read((0.010, SSE_HEAD), (0.020, chunked(ROLE)), (0.030, chunked(A)), (0.040, chunked(B)),
             (0.050, chunked(LAST)), (0.060, chunked(USAGE) + chunked(DONE)), (0.070, END))
    rec = r.record
    assert r.over and r.done_seen and r.complete and r.reusable and rec.ok
    assert rec.status == 200 and rec.headers_s == pytest.approx(0.010)
    assert rec.chunk_times == pytest.approx([0.030, 0.040, 0.050])  # the role chunk is not content
    assert rec.ttft_s == pytest.approx(0.030)
    assert rec.e2e_s == pytest.approx(0.060)  # [DONE]'s arrival, not the terminator's
    assert (rec.output_tokens, rec.output_tokens_counted, rec.prompt_tokens) == (3, False, 9)
    assert (rec.finish_reason, rec.response_id) == ("length", "chatcmpl-1")
    assert rec.tpot_s == pytest.approx((0.060 - 0.030) / 2)
    assert r.bytes_in == len(wire(*STREAM))


def test_done_keeps_reading_to_the_end_of_the_message():
    """[DONE] alone does not end the read: the chunked terminator must be consumed to reuse the connection."""
    r = read((0.01, wire(*STREAM, end=b"")))
    assert r.done_seen and not r.over and r.record.e2e_s == pytest.approx(0.01)
    assert r.feed(END, START + 0.5) and r.reusable and r.record.e2e_s == pytest.approx(0.01)


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, 10_000])
def test_split_anywhere_each_event_is_stamped_by_the_receive_that_completed_it(size):
    """Splits land inside 'data:', inside the JSON, inside the UTF-8 'é', inside the chunk-size line and
    between the two newlines; each time is that of the piece holding the event's last byte."""
    raw = wire(*STREAM)
    pieces = [raw[i:i + size] for i in range(0, len(raw), size)]
    r = read(*[(float(i), p) for i, p in enumerate(pieces)])
    ends = []  # offset of the last byte of each event on the wire
    pos = len(SSE_HEAD)
    for ev in STREAM:
        pos += len(b"%x\r\n" % len(ev)) + len(ev)
        ends.append(pos - 1)
        pos += 2
    at = [float(e // size) for e in ends]  # piece i arrives at START + i
    rec = r.record
    assert r.reusable and rec.ok and rec.chunk_times == [at[1], at[2], at[3]]
    assert rec.e2e_s == at[5] and rec.headers_s == float((len(SSE_HEAD) - 1) // size)
    assert rec.output_tokens == 3


@pytest.mark.parametrize("nl", [b"\r\n", b"\r"])
def test_cr_and_crlf_line_ends(nl):
    events = [e.replace(b"\n", nl) for e in (A, LAST, DONE)]
    raw = wire(*events)
    r = read(*[(float(i), raw[i:i + 5]) for i in range(0, len(raw), 5)])
    assert r.reusable and r.record.ok and len(r.record.chunk_times) == 2 and r.record.finish_reason == "length"


def test_completions_text_chunks_without_usage_are_counted():
    r = read((0.1, wire(event(text=" a"), event(text=""), event(text=" b", finish="stop"), DONE)))
    rec = r.record
    assert rec.ok and rec.chunk_times == pytest.approx([0.1, 0.1])
    assert (rec.output_tokens, rec.output_tokens_counted) == (2, True) and rec.itl_tokens() is None


def test_done_missing_but_finish_reason_then_end_of_message_is_complete():
    r = read((0.01, SSE_HEAD), (0.02, chunked(A)), (0.03, chunked(LAST)), (0.04, chunked(USAGE)), (0.05, END))
    assert r.reusable and not r.done_seen and r.record.ok
    assert r.record.e2e_s == pytest.approx(0.03)  # the finish_reason chunk


def test_done_missing_and_no_finish_reason_is_truncated():
    r = read((0.01, SSE_HEAD), (0.02, chunked(A)), (0.05, END))
    rec = r.record
    assert r.over and not r.reusable and rec.error == "truncated" and rec.e2e_s == pytest.approx(0.05)
    assert rec.error_detail == "stream ended without finish_reason or [DONE] after 1 content chunks"
    assert rec.chunk_times == pytest.approx([0.02]) and rec.ttft_s == pytest.approx(0.02)


def test_finish_reason_then_close_is_complete():
    r = read((0.01, SSE_HEAD + chunked(A)), (0.02, chunked(LAST)), close_at=0.09)
    rec = r.record
    assert rec.ok and not r.reusable and rec.e2e_s == pytest.approx(0.02) and rec.finish_reason == "length"
    assert (rec.output_tokens, rec.output_tokens_counted) == (2, True)


def test_close_mid_stream_is_truncated_and_before_headers_a_reset():
    rec = read((0.01, SSE_HEAD + chunked(A)), close_at=0.2).record
    assert (rec.error, rec.e2e_s, rec.chunk_times) == ("truncated", pytest.approx(0.2), pytest.approx([0.01]))
    assert rec.error_detail == ("server closed the connection after 1 content chunks without finish_reason "
                                "or [DONE]")
    for receives in ([], [(0.01, b"HTTP/1.1 200 OK\r\ncontent-")]):
        rec = read(*receives, close_at=0.3).record
        assert (rec.error, rec.e2e_s, rec.status) == ("reset", pytest.approx(0.3), None)


def test_close_without_length_ends_an_error_body_as_truncated():
    """An error reply delimited by the close never completes in httptools: judged as a cut-off stream."""
    rec = read((0.01, b"HTTP/1.1 500 Oops\r\ncontent-type: text/plain\r\n\r\nboom"), close_at=0.02).record
    assert (rec.error, rec.status, rec.e2e_s) == ("truncated", 500, pytest.approx(0.02))


@pytest.mark.parametrize("data,kind,detail", BROKEN_EVENTS)
def test_a_broken_chunk_fails_at_its_arrival_keeping_the_times_reached(data, kind, detail):
    r = read((0.01, SSE_HEAD + chunked(A)), (0.02, chunked(B)), (0.03, chunked(data)), (0.04, chunked(LAST)))
    rec = r.record
    assert r.over and not r.reusable and (rec.error, rec.error_detail) == (kind, detail)
    assert rec.e2e_s == pytest.approx(0.03) and rec.chunk_times == pytest.approx([0.01, 0.02])
    assert rec.output_tokens == 2 and rec.output_tokens_counted


def test_oversized_line_fails_before_its_end():
    r = read((0.01, SSE_HEAD + chunked(A)), (0.02, chunked(b"data: " + b"x" * 200)), max_line_bytes=100)
    rec = r.record
    assert (rec.error, rec.e2e_s, len(rec.chunk_times)) == ("oversized_line", pytest.approx(0.02), 1)
    assert rec.error_detail == "SSE line longer than 100 bytes"
    ok = read((0.01, wire(b"data: " + b'{"choices":[]}'.ljust(90) + b"\n\n", DONE)), max_line_bytes=100)
    assert ok.record.ok


def test_usage_on_the_finish_chunk_and_usage_absent():
    both = event({"content": "z"}, finish="stop")[:-3] + b',"usage":{"prompt_tokens":4,"completion_tokens":7}}\n\n'
    rec = read((0.01, wire(A, both, DONE))).record
    assert (rec.output_tokens, rec.output_tokens_counted, rec.prompt_tokens) == (7, False, 4)
    rec = read((0.01, wire(A, B, LAST, DONE))).record
    assert (rec.output_tokens, rec.output_tokens_counted, rec.prompt_tokens) == (3, True, None)


def reply(status: str, body: bytes, *headers: str) -> bytes:
    extra = "".join(f"{h}\r\n" for h in headers)
    return f"HTTP/1.1 {status}\r\n{extra}content-length: {len(body)}\r\n\r\n".encode() + body


OPENAI_ERROR = b'{"error": {"message": "The model `gpt-nope` does not exist.", "type": "invalid_request_error"}}'


@pytest.mark.parametrize("raw,kind,status,detail", [
    (reply("404 Not Found", OPENAI_ERROR, "content-type: application/json"), "http_4xx", 404,
     "HTTP 404: The model `gpt-nope` does not exist."),
    (reply("429 Too Many Requests", b'{"error": "slow down"}', "retry-after: 1.5"), "http_429", 429,
     "HTTP 429 (Retry-After: 1.5): slow down"),
    (reply("503 Service Unavailable", b"<html>busy</html>"), "http_5xx", 503, "HTTP 503: <html>busy</html>"),
    # vLLM's words for a prompt and answer past the model's context; OpenAI's code without them
    (reply("400 Bad Request", b'{"error": {"message": "This model\'s maximum context length is 4096 tokens. However, '
           b'you requested 5000 tokens.", "code": 400}}'), "context_overflow", 400,
     "HTTP 400: This model's maximum context length is 4096 tokens. However, you requested 5000 tokens."),
    (reply("400 Bad Request", b'{"error": {"message": "too long", "code": "context_length_exceeded"}}'),
     "context_overflow", 400, "HTTP 400: too long"),
    (reply("200 OK", b'{"choices": []}', "content-type: application/json"), "not_sse", 200,
     "HTTP 200 with content-type 'application/json', expected text/event-stream: "),
])
def test_error_replies_are_classified_when_complete(raw, kind, status, detail):
    r = read((0.01, raw[:30]), (0.02, raw[30:]))
    rec = r.record
    assert r.over and not r.reusable and (rec.error, rec.status) == (kind, status), rec.error_detail
    assert rec.error_detail == detail and rec.e2e_s == pytest.approx(0.02) and rec.headers_s == pytest.approx(0.02)
    assert rec.retry_after_s == (1.5 if kind == "http_429" else None)


def test_garbage_instead_of_http_fails_at_its_first_receive():
    r = read((0.01, b"SSH-2.0-OpenSSH_9.2\r\n"), (0.02, b"\r\n"))
    rec = r.record
    assert (rec.error, rec.status, rec.headers_s, rec.e2e_s) == ("bad_response", None, None, pytest.approx(0.01))
    assert rec.error_detail.startswith("response is not valid HTTP: ")


def test_an_error_body_nested_too_deep_is_quoted():
    rec = read((0.01, reply("400 Bad Request", b"[" * 100_000))).record
    assert rec.error == "http_4xx" and rec.error_detail == "HTTP 400: " + "[" * 200


def test_switching_protocols_is_a_bad_response_not_an_exception():
    rec = read((0.01, b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n")).record
    assert (rec.error, rec.status, rec.e2e_s) == ("bad_response", 101, pytest.approx(0.01))
    assert rec.error_detail == "HTTP 101 switches protocols (upgrade: websocket) instead of answering"


def test_429_with_an_http_date_retry_after_counts_from_the_server_s_date():
    raw = reply("429 Too Many Requests", b"", "retry-after: Wed, 21 Oct 2026 07:28:00 GMT",
                "date: Wed, 21 Oct 2026 07:27:48 GMT")
    rec = read((0.01, raw)).record
    assert rec.error == "http_429" and rec.retry_after_s == 12.0 and "Retry-After: Wed" in rec.error_detail


def test_429_with_an_http_date_and_no_date_header_counts_from_the_wall_clock_passed_in():
    wall = 1792567668.0  # Wed, 21 Oct 2026 07:27:48 GMT, when the request started
    raw = reply("429 Too Many Requests", b"", "retry-after: Wed, 21 Oct 2026 07:28:00 GMT")
    assert read((2.0, raw), wall_start=wall).record.retry_after_s == pytest.approx(10.0)  # answered 2 s later
    assert read((2.0, raw)).record.retry_after_s is None  # no clock given: unknown, not guessed
    past = reply("429 Too Many Requests", b"", "retry-after: Wed, 21 Oct 2026 07:00:00 GMT")
    assert read((0.01, past), wall_start=wall).record.retry_after_s == 0.0


@pytest.mark.parametrize("value,seconds", [("0", 0.0), ("120", 120.0), (" 3 ", 3.0), ("nan", None), ("inf", None),
                                           ("-5", None), ("soon", None), ("", None)])
def test_retry_after_seconds_must_be_a_finite_delay(value, seconds):
    rec = read((0.01, reply("429 Too Many Requests", b"", f"retry-after: {value}"))).record
    assert rec.error == "http_429" and rec.retry_after_s == seconds


@pytest.mark.parametrize("usage", WRONG_USAGE)
def test_usage_of_the_wrong_type_is_a_bad_response_and_no_count_is_kept(usage):
    bad = b'data: {"id": "c", "choices": [], ' + usage + b"}\n\n"
    rec = read((0.01, wire(A, LAST, bad, DONE))).record
    assert rec.error == "bad_response" and rec.error_detail.startswith("server chunk's usage")
    assert rec.prompt_tokens is None and rec.output_tokens == 2 and rec.output_tokens_counted


@pytest.mark.parametrize("chunk", WRONG_SHAPES)
def test_chunks_of_the_wrong_shape_are_a_bad_response_at_their_arrival(chunk):
    r = read((0.01, SSE_HEAD + chunked(A)), (0.02, chunked(b"data: " + chunk + b"\n\n")), (0.03, chunked(LAST)))
    rec = r.record
    assert r.over and rec.error == "bad_response" and rec.error_detail.startswith("server chunk")
    assert rec.e2e_s == pytest.approx(0.02) and rec.chunk_times == pytest.approx([0.01])
    assert rec.finish_reason is None


@pytest.mark.parametrize("body,detail", [
    (b'{"error": {"message": 42}}', "HTTP 400: 42"),
    (b'{"error": {"message": null}}', "HTTP 400: "),
    (b'{"error": ["x"]}', "HTTP 400: ['x']"),
    (b'["x"]', 'HTTP 400: ["x"]'),
    (b"7", "HTTP 400: 7"),
])
def test_an_error_body_of_any_json_shape_is_quoted(body, detail):
    rec = read((0.01, reply("400 Bad Request", body, "content-type: application/json"))).record
    assert rec.error == "http_4xx" and rec.error_detail == detail


def test_an_endless_error_body_is_judged_after_64_kb():
    r = read((0.01, b"HTTP/1.1 502 Bad Gateway\r\ntransfer-encoding: chunked\r\n\r\n"))
    t = 0.01
    while not r.over:
        t += 0.01
        r.feed(chunked(b"x" * 8192), START + t)
    rec = r.record
    assert rec.error == "http_5xx" and rec.error_detail == "HTTP 502: " + "x" * 200
    assert rec.e2e_s == pytest.approx(t) and t == pytest.approx(0.01 + 0.01 * (MAX_ERROR_BODY // 8192 + 1))


def test_connection_close_header_makes_it_not_reusable():
    raw = SSE_HEAD.replace(b"\r\n\r\n", b"\r\nconnection: close\r\n\r\n") + b"".join(map(chunked, STREAM)) + END
    r = read((0.01, raw))
    assert r.over and r.record.ok and not r.keep_alive and not r.reusable


def test_the_transport_s_failures_keep_what_arrived_and_the_first_word_wins():
    r = read((0.01, SSE_HEAD + chunked(A)))
    assert r.fail("idle_timeout", "idle timeout after 0.300 s (1 content chunks)", START + 0.3)
    assert r.fail("reset", "late", START + 0.4)  # ignored: already over
    assert r.feed(chunked(B), START + 0.5) and r.close(START + 0.6)
    rec = r.record
    assert (rec.error, rec.e2e_s, rec.chunk_times, rec.ttft_s) == ("idle_timeout", pytest.approx(0.3),
                                                                   pytest.approx([0.01]), pytest.approx(0.01))
    assert rec.error_detail == "idle timeout after 0.300 s (1 content chunks)"


# -- reasoning, tool calls, exact tokens per chunk, non-streaming answers ---------------------------------------

def test_reasoning_then_answer_ttft_ttfo_reasoning_time_and_tokens():
    r = read((0.010, wire(ROLE)[:-len(END)]), (0.020, chunked(event({"reasoning_content": "hm"}))),
             (0.030, chunked(event({"reasoning": " so"}))), (0.050, chunked(A)), (0.060, chunked(LAST)),
             (0.070, chunked(event(usage={"prompt_tokens": 9, "completion_tokens": 4,
                                          "completion_tokens_details": {"reasoning_tokens": 2}})) + chunked(DONE)),
             (0.080, END))
    rec = r.record
    assert rec.ok and rec.ttft_s == pytest.approx(0.020)  # the first token of any kind
    assert rec.ttfo_s == pytest.approx(0.050) and rec.reasoning_s == pytest.approx(0.030)
    assert (rec.reasoning_tokens, rec.reasoning_tokens_counted, rec.output_tokens) == (2, False, 4)
    assert rec.tpot_s == pytest.approx((0.070 - 0.020) / 3)          # over all tokens
    assert rec.tpot_content_s == pytest.approx((0.070 - 0.050) / 1)  # over the 2 answer tokens


def test_reasoning_tokens_counted_from_chunks_when_usage_is_silent():
    r = read((0.0, wire(event({"reasoning_content": "a"}), event({"reasoning_content": "b"}), A, LAST, USAGE,
                        DONE)))
    assert (r.record.reasoning_tokens, r.record.reasoning_tokens_counted) == (2, True)


def test_a_tool_call_is_a_success_with_its_own_time():
    call = {"index": 0, "id": "c1", "type": "function", "function": {"name": "f", "arguments": ""}}
    r = read((0.0, SSE_HEAD), (0.015, chunked(event({"tool_calls": [call]}))),
             (0.025, chunked(event({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]},
                                   finish="tool_calls")) + chunked(USAGE) + chunked(DONE) + END))
    rec = r.record
    assert rec.ok and rec.finish_reason == "tool_calls" and rec.ttft_s == pytest.approx(0.015)
    assert rec.tool_call_s == pytest.approx(0.015) and rec.tool_call_chunks == 2 and rec.ttfo_s is None


def test_continuous_usage_gives_exact_tokens_per_chunk():
    def ev(content, total, finish=None):
        return event({"content": content}, finish=finish) [:-2].replace(
            b'"choices"', b'"usage":{"prompt_tokens":9,"completion_tokens":%d},"choices"' % total, 1) + b"\n\n"
    role = ROLE[:-2].replace(b'"choices"', b'"usage":{"prompt_tokens":9,"completion_tokens":0},"choices"', 1) + b"\n\n"
    r = read((0.0, SSE_HEAD), (0.01, chunked(role)), (0.02, chunked(ev("a", 1))), (0.06, chunked(ev("bcde", 5))),
             (0.10, chunked(ev("fghi", 9, "length")) + chunked(DONE) + END))
    rec = r.record
    assert rec.ok and rec.chunk_tokens == [1, 4, 4] and rec.output_tokens == 9
    assert not rec.one_token_per_chunk


def test_an_empty_chunk_mid_stream_gives_its_token_to_the_next_output_chunk():
    """vLLM sends a token whose text is not yet whole (a byte of a multi-byte character, common on a byte-level
    tokenizer) as a chunk with empty content and its usage count: no output arrived, so the next output chunk's gap
    spans both tokens and carries both (counted as one, ITL per token read ~1.6% high on the real-engine lane)."""
    def ev(content, total, finish=None):
        return event({"content": content}, finish=finish) [:-2].replace(
            b'"choices"', b'"usage":{"prompt_tokens":9,"completion_tokens":%d},"choices"' % total, 1) + b"\n\n"
    role = ROLE[:-2].replace(b'"choices"', b'"usage":{"prompt_tokens":9,"completion_tokens":0},"choices"', 1) + b"\n\n"
    r = read((0.0, SSE_HEAD), (0.01, chunked(role)), (0.02, chunked(ev("a", 1))), (0.03, chunked(ev("", 2))),
             (0.04, chunked(ev("bc", 3))), (0.05, chunked(ev("d", 4, "length")) + chunked(DONE) + END))
    rec = r.record
    assert rec.ok and rec.chunk_times == pytest.approx([0.02, 0.04, 0.05]) and rec.output_tokens == 4
    assert rec.chunk_tokens == [1, 2, 1]


def test_a_non_streaming_answer_gives_e2e_and_usage_but_no_ttft():
    from harness.client.openai import parse_body
    body = json.dumps({"id": "x1", "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                                                "finish_reason": "stop"}],
                       "usage": {"prompt_tokens": 7, "completion_tokens": 2}}).encode()
    raw = reply("200 OK", body, "content-type: application/json")
    r = read((0.005, raw[:40]), (0.050, raw[40:]), body_parser=parse_body)
    rec = r.record
    assert rec.ok and r.reusable and rec.ttft_s is None and rec.e2e_s == pytest.approx(0.050)
    assert (rec.output_tokens, rec.prompt_tokens, rec.finish_reason, rec.response_id) == (2, 7, "stop", "x1")
    bad = read((0.01, reply("200 OK", b'{"choices": "no"}', "content-type: application/json")), body_parser=parse_body)
    assert bad.record.error == "bad_response" and "chat/completions response" in bad.record.error_detail
    garbage = read((0.01, reply("200 OK", b"{nope", "content-type: application/json")), body_parser=parse_body)
    assert garbage.record.error == "bad_response" and "not JSON" in garbage.record.error_detail


def test_bytes_after_the_end_of_the_response_are_not_read_as_another():
    """A 408 (or any stray answer) in the same receive as the end: the response stands, the connection goes."""
    r = read((0.01, wire(*STREAM) + b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\n\r\n"))
    assert r.over and r.record.ok and r.record.status == 200 and r.record.output_tokens == 3
    assert not r.reusable
    r = read((0.01, wire(*STREAM) + b"garbage"))
    assert r.over and r.record.ok and not r.reusable
