"""The response reader and every API tracker against hostile bytes: a seeded corpus of mutated responses
(``tests/kit/fuzz.py``; the benchmark ``benchmarks/fuzz_parsers.py`` runs a million of them), hypothesis
properties over arbitrary bytes and JSON, the defects fuzzing found, and the cost of pathological responses.

The oracle: ``feed`` and ``close`` never raise, the record's error is a known class and its fields have their
declared types, the fast path gives the full parse's record. A failure names its seed: ``tests.kit.fuzz.case(seed)``
rebuilds the bytes.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import subprocess
import sys
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.client.anthropic import MessagesTracker, parse_messages_body
from harness.client.apis import EmbeddingsTracker, parse_embeddings
from harness.client.openai import StreamTracker, parse_body
from harness.client.reader import ResponseReader
from harness.client.responses import ResponsesTracker, parse_responses_body
from harness.client.sse import LineDecoder
from tests.kit.fuzz import APIS, START, Case, case, check_case, dumps, read, record_problem
from tests.kit.fuzz_cost import PATHOLOGICAL
from tests.kit.wire import SSE_HEAD, chunked

SEEDS_PER_BATCH = 250
BATCHES = 10
"""2,500 seeded cases, ~1.5 s on this 2-core machine."""


@pytest.mark.parametrize("batch", range(BATCHES))
def test_the_seeded_corpus_holds_the_oracle(batch):
    failures = [f for s in range(batch * SEEDS_PER_BATCH, (batch + 1) * SEEDS_PER_BATCH)
                if (f := check_case(case(s))) is not None]
    assert failures == []


def test_the_corpus_reaches_every_api_and_outcome():
    """The corpus is not vacuous: every API, successes and most error classes, the fast path engaged."""
    apis, errors, learned = set(), set(), 0
    for s in range(1000):
        c = case(s)
        apis.add(c.api)
        reader = read(c)
        errors.add(reader.record.error)
        learned += getattr(reader.tracker, "_match", None) is not None  # a template: the fast path compared
    assert apis == set(APIS) and learned > 50
    assert {None, "bad_response", "malformed_chunk", "truncated", "http_429", "http_5xx", "not_sse",
            "stream_error"} <= errors


# -- defects the fuzzer found ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [399, 522, 170])  # the first cases that found it: chat, completions, chat_body
def test_fuzz_case_a_non_string_id_never_reaches_the_record(seed):
    """Seeds 399 (chat: "id": 2**63), 522 (completions: [1]), 170 (a non-streaming body: 1.5): the id went to
    ``record.response_id`` (declared ``str | None``) whatever its type. Now a bad_response naming the field."""
    c = case(seed)
    rec = read(c).record
    assert record_problem(read(c)) is None
    assert rec.response_id is None and rec.error == "bad_response"
    assert "id" in rec.error_detail


def test_a_chunk_id_of_the_wrong_type_is_a_bad_response_naming_it():
    chunk = b'data: {"id":7,"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n'
    reader = ResponseReader(START)
    reader.feed(SSE_HEAD + chunked(chunk), START + 0.01)
    assert reader.record.error == "bad_response"
    assert "server chunk's id is 7, expected a string" in reader.record.error_detail
    later = b'data: {"id":null,"choices":[]}\n\ndata: {"id":"c1","choices":[]}\n\ndata: {"id":5,"choices":[]}\n\n'
    reader = ResponseReader(START)
    reader.feed(SSE_HEAD + chunked(later), START + 0.01)  # read until one gives it, then no more
    assert not reader.over and reader.tracker.response_id == "c1"


@pytest.mark.timing
def test_fuzz_case_a_long_line_in_tiny_receives_costs_linear_time():
    """A line without an end, in 1-byte receives: the decoder joined and rescanned the whole held line on every
    receive, O(n^2) (1.3 s of a worker's CPU for 160 kB through the reader). Now ~4x the cost for 4x the line."""
    def cost(n: int) -> float:
        best = float("inf")
        for _ in range(3):
            dec, t0 = LineDecoder(1 << 20), time.perf_counter()
            for _ in range(n):
                dec.feed(b"x", 0.0)
            best = min(best, time.perf_counter() - t0)
        return best
    ratios = []
    while len(ratios) < 3 and min(ratios, default=99) >= 10:  # before the fix: 19 (53 ms, then 994 ms)
        ratios.append(cost(160_000) / cost(40_000))
    assert min(ratios) < 10, ratios


# -- hypothesis: arbitrary bytes and JSON -------------------------------------------------------------------------

FUZZ = settings(derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
TRACKERS = [(lambda: StreamTracker(START), parse_body), (lambda: ResponsesTracker(START), parse_responses_body),
            (lambda: MessagesTracker(START), parse_messages_body), (lambda: EmbeddingsTracker(START, 1),
                                                                    parse_embeddings)]
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(
                        ["id", "type", "choices", "delta", "content", "usage", "response", "message", "index",
                         "error", "text", "data", "finish_reason", "prompt_tokens", "completion_tokens",
                         "input_tokens", "output_tokens", "stop_reason", "content_block", "timings", "status"]),
                        inner, max_size=5), max_leaves=12)


def _read(tracker: int, raw: bytes, cuts: list[int]) -> ResponseReader:
    make, parser = TRACKERS[tracker]
    reader = ResponseReader(START, tracker=make(), body_parser=parser)
    points = sorted({c % (len(raw) + 1) for c in cuts} | {0, len(raw)})
    for i, (a, b) in enumerate(itertools.pairwise(points)):
        reader.feed(raw[a:b], START + 0.001 * (i + 1))
    reader.close(START + 9.0)
    return reader


@FUZZ
@given(st.integers(0, 3), st.binary(max_size=300), st.lists(st.integers(0, 400), max_size=8))
def test_any_bytes_after_stream_headers_are_a_classified_record(tracker, body, cuts):
    assert record_problem(_read(tracker, SSE_HEAD + body, cuts)) is None


@FUZZ
@given(st.integers(0, 3), st.lists(JSON, min_size=1, max_size=4), st.sampled_from([b"\n", b"\r\n", b"\r"]),
       st.lists(st.integers(0, 2000), max_size=6))
def test_any_json_events_are_a_classified_record(tracker, objs, nl, cuts):
    events = b"".join(b"event: x" + nl + b"data: " + dumps(o).encode("utf-8", "surrogatepass") + nl + nl
                      for o in objs)
    assert record_problem(_read(tracker, SSE_HEAD + chunked(events) + b"0\r\n\r\n", cuts)) is None


@FUZZ
@given(st.integers(0, 3), JSON)
def test_any_json_answer_is_a_classified_record(tracker, obj):
    body = dumps(obj).encode("utf-8", "surrogatepass")
    raw = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%b" % (len(body), body)
    assert record_problem(_read(tracker, raw, [])) is None


@FUZZ
@given(st.lists(st.sampled_from([b"data: ", b"data:", b"\n", b"\r", b"\r\n", b"[DONE]", b"event: e", b": c",
                                 b'{"id":"c","choices":[{"index":0,"delta":{"content":"a"}}]}', b"\xff", b'"', b"}"]),
                max_size=40), st.lists(st.integers(0, 3000), max_size=10))
def test_mixed_framings_read_the_same_both_ways(pieces, cuts):
    """Chat: the fast path and the full parse agree on any mix of framing pieces, split anywhere."""
    raw = SSE_HEAD + b"".join(pieces)
    points = sorted({c % (len(raw) + 1) for c in cuts} | {0, len(raw)})
    receives = [raw[a:b] for a, b in itertools.pairwise(points)]
    fast, full = (read(Case(0, "chat", receives, False, 256 * 1024), fast=f) for f in (True, False))
    assert dataclasses.asdict(fast.record) == dataclasses.asdict(full.record)
    assert record_problem(fast) is None


# -- cost: linear in the size of the response ---------------------------------------------------------------------

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SIZES = {"line_without_end_1B": 20_000, "stream_in_1B_receives": 10_000, "one_event_many_data_lines": 40_000,
         "cr_line_ends_1B": 10_000, "comment_lines": 40_000, "many_headers": 40_000, "error_body_1B": 10_000,
         "json_body_1B": 10_000, "escaped_content_fast_path": 40_000, "chunked_1B_http_chunks": 10_000}


_RATIOS = """
import json, sys
from tests.kit.fuzz_cost import growth
ratios = []
for _ in range(3):
    small, big = growth(sys.argv[1], int(sys.argv[2]), repeat=2)
    ratios.append(big / max(small, 1e-4))
    if ratios[-1] < 8:
        break
print(json.dumps(ratios))
"""


@pytest.mark.timing
@pytest.mark.integration
@pytest.mark.parametrize("name", sorted(SIZES))
def test_pathological_responses_cost_linear_time(name):
    """4x the size costs ~4x (quadratic: 16x); the best of three tries, as a busy machine only slows a try down.
    In a fresh interpreter: in a test worker hundreds of tests old, the escaped-content case cost 8.6-8.8x three tries
    running (a fresh-clone CI of 2026-12-04; 3.3-4.5x fresh, the same machine, that hour)."""
    assert name in PATHOLOGICAL
    out = subprocess.run([sys.executable, "-c", _RATIOS, name, str(SIZES[name])], capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    ratios = json.loads(out.stdout)
    assert min(ratios) < 8, ratios


def test_fuzz_case_10989762_a_timing_past_the_largest_float_is_a_bad_response():
    """Seed 10989762 of the million-case run (chat): llama.cpp's ``timings.prompt_ms`` as an integer of hundreds of
    digits passed the check (< inf) and ``prompt_ms / 1000`` raised OverflowError out of ``feed``."""
    assert check_case(case(10989762)) is None
    last = b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"stop"}],' \
           b'"timings":{"prompt_ms":1' + b"0" * 400 + b"}}\n\n"
    reader = ResponseReader(START)
    reader.feed(SSE_HEAD + chunked(last), START + 0.01)
    assert reader.record.error == "bad_response" and "timings.prompt_ms" in reader.record.error_detail


@pytest.mark.parametrize("api", ["chat", "responses", "messages", "embeddings"])
def test_a_token_count_of_400_digits_is_a_bad_response_not_a_crash_of_the_metrics(api):
    """An ok record with 10**400 output tokens made ``tpot_s`` and ``tokens_per_s`` raise OverflowError (in the
    worker's metrics, after the reader). Counts past 18 digits (``stream.MAX_COUNT``) are now a bad_response."""
    huge = int("1" + "0" * 400)
    usage = {"chat": {"prompt_tokens": 1, "completion_tokens": huge},
             "responses": {"input_tokens": 1, "output_tokens": huge}, "messages": {"output_tokens": huge},
             "embeddings": {"prompt_tokens": huge}}[api]
    obj = {"chat": {"id": "c", "choices": [{"message": {"content": "a"}, "finish_reason": "stop"}]},
           "responses": {"id": "r", "status": "completed"}, "messages": {"id": "m", "stop_reason": "end_turn"},
           "embeddings": {"data": [[0.1]]}}[api]
    body = json.dumps({**obj, "usage": usage}).encode()
    raw = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%b" % (len(body), body)
    reader = _read({"chat": 0, "responses": 1, "messages": 2, "embeddings": 3}[api], raw, [])
    assert record_problem(reader) is None
    assert reader.record.error == "bad_response" and reader.record.output_tokens is None
