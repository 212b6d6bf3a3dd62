"""llama.cpp's per-request ``timings`` on the finish chunk, read into the record: prefill (``prompt_ms``) and
decode (``predicted_ms``) as seconds; None where the server does not say; a wrong type a ``bad_response``."""

from __future__ import annotations

import json

import pytest

from tests.kit.wire import DONE, ROLE, SSE_HEAD, A, B, chunked, read, wire

# As llama.cpp's server sends it on /v1/chat/completions (usage and timings ride on the finish chunk).
TIMINGS = {"prompt_n": 24, "cache_n": 96, "prompt_ms": 203.378, "prompt_per_token_ms": 8.47, "predicted_n": 3,
           "predicted_ms": 933.63, "predicted_per_token_ms": 311.21}


def finish(timings: object = None, *, text: bool = False, raw: bytes | None = None) -> bytes:
    choice: dict = {"index": 0, "finish_reason": "stop"}
    if text:
        choice["text"] = "!"
    else:
        choice["delta"] = {}
    obj: dict = {"id": "chatcmpl-1", "choices": [choice], "usage": {"prompt_tokens": 120, "completion_tokens": 3}}
    if timings is not None:
        obj["timings"] = timings
    data = json.dumps(obj, separators=(",", ":")).encode()
    if raw is not None:
        data = data[:-1] + b',"timings":' + raw + b"}"
    return b"data: " + data + b"\n\n"


def test_llama_cpp_timings_become_the_server_s_prefill_and_decode() -> None:
    rec = read((0.01, wire(ROLE, A, B, finish(TIMINGS), DONE))).record
    assert rec.error is None
    assert rec.server_prefill_s == pytest.approx(0.203378) and rec.server_decode_s == pytest.approx(0.93363)
    assert (rec.cached_tokens, rec.cached_source) == (96, "timings.cache_n")
    assert rec.to_dict()["server_prefill_s"] == rec.server_prefill_s


def test_completions_and_no_done_after_the_finish_chunk() -> None:
    # /v1/completions, and llama.cpp closing after the finish chunk: the timings are kept either way.
    r = read((0.01, SSE_HEAD + chunked(finish({"prompt_ms": 5, "predicted_ms": 0}, text=True))), close_at=0.02)
    rec = r.record
    assert rec.error is None and (rec.server_prefill_s, rec.server_decode_s) == (0.005, 0.0)
    assert rec.cached_tokens is None  # no cache_n given


def test_servers_that_do_not_say_leave_none() -> None:
    for timings in (None, {}, {"prompt_n": 3}):
        rec = read((0.01, wire(ROLE, A, finish(timings), DONE))).record
        assert rec.error is None and rec.server_prefill_s is None and rec.server_decode_s is None
    partial = read((0.01, wire(ROLE, A, finish({"prompt_ms": 12.5}), DONE))).record
    assert (partial.server_prefill_s, partial.server_decode_s) == (0.0125, None)
    null = read((0.01, wire(ROLE, A, finish(raw=b"null"), DONE))).record  # "timings": null reads as absent
    assert null.error is None and null.server_prefill_s is None


def test_timings_off_the_finish_chunk_are_not_read() -> None:
    # llama.cpp's timings_per_token puts them on every chunk; the request's own are on the finish chunk.
    mid = b'data: {"id":"chatcmpl-1","choices":[{"index":0,"delta":{"content":"x"}}],"timings":{"prompt_ms":1}}\n\n'
    rec = read((0.01, wire(ROLE, mid, finish({"prompt_ms": 7.0, "predicted_ms": 9.0}), DONE))).record
    assert (rec.server_prefill_s, rec.server_decode_s) == (0.007, 0.009)
    rec = read((0.01, wire(ROLE, mid, finish(), DONE))).record
    assert rec.error is None and rec.server_prefill_s is None


@pytest.mark.parametrize("raw, words", [
    (b'{"prompt_ms":"203.4"}', "timings.prompt_ms is '203.4', expected a number of milliseconds >= 0"),
    (b'{"prompt_ms":1,"predicted_ms":-3.0}', "timings.predicted_ms is -3.0, expected a number of milliseconds >= 0"),
    (b'{"predicted_ms":true}', "timings.predicted_ms is true, expected a number of milliseconds >= 0"),
    (b'{"predicted_ms":Infinity}', "timings.predicted_ms is Infinity, expected a number of milliseconds >= 0"),
    (b'{"prompt_ms":NaN}', "timings.prompt_ms is NaN, expected a number of milliseconds >= 0"),
    (b'{"prompt_ms":[1]}', "timings.prompt_ms is an array, expected a number of milliseconds >= 0"),
    (b'{"cache_n":"96"}', "timings.cache_n is '96', expected an integer >= 0"),
    (b'"fast"', "timings is 'fast', expected an object"),
    (b"[203.4]", "timings is an array, expected an object"),
])
def test_a_wrong_type_is_a_bad_response_naming_the_field(raw: bytes, words: str) -> None:
    r = read((0.01, SSE_HEAD + chunked(ROLE) + chunked(A)), (0.02, chunked(finish(raw=raw))), (0.03, chunked(DONE)))
    rec = r.record
    assert rec.error == "bad_response" and rec.error_detail.startswith(f"server chunk's {words}: "), rec.error_detail
    # Nothing of the chunk is kept: no finish reason, no timings, no usage.
    assert rec.finish_reason is None and rec.server_prefill_s is None and rec.server_decode_s is None
    assert rec.prompt_tokens is None and rec.cached_tokens is None
    assert rec.e2e_s == pytest.approx(0.02)
