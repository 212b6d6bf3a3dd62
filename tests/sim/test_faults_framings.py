"""Mid-stream faults in the Responses and Anthropic framings, and ``stream_error`` in each framing's own words."""

from __future__ import annotations

import http.client
import itertools
import json
import time

import pytest

from tests.kit.sim_http import CHAT, chat, post
from tests.kit.sse_events import types

pytestmark = pytest.mark.integration

RESPONSES = ("/v1/responses", {"model": "sim-tiny", "input": "hi", "max_output_tokens": 10, "ignore_eos": True,
                               "stream": True}, {})
MESSAGES = ("/v1/messages", {"model": "sim-tiny", "max_tokens": 10, "ignore_eos": True, "stream": True,
                             "messages": [{"role": "user", "content": "hi"}]}, {"anthropic-version": "2023-06-01"})
FINAL = {"/v1/responses": "response.incomplete", "/v1/messages": "message_stop"}
DELTA = {"/v1/responses": "response.output_text.delta", "/v1/messages": "content_block_delta"}


def read(sim, framing, kind: str):
    path, body, headers = framing
    _, resp = post(sim, path, body, {**headers, "x-kneecap-fault": kind})
    pieces, error = [], None
    try:
        while piece := resp.read1(1 << 20):
            pieces.append((time.monotonic(), piece))
    except (http.client.HTTPException, OSError) as exc:
        error = exc
    return b"".join(p for _, p in pieces), pieces, error


def blocks(raw: bytes) -> list[tuple[str, dict | None]]:
    """(event type, data or None when the data is not JSON) per event."""
    out = []
    for block in raw.split(b"\n\n"):
        if not block:
            continue
        head, _, data = block.partition(b"\n")
        try:
            body = json.loads(data[6:])
        except ValueError:
            body = None
        out.append((head[7:].decode(), body))
    return out


@pytest.mark.parametrize("framing", [RESPONSES, MESSAGES], ids=["responses", "messages"])
def test_mid_stream_faults(sim, framing):
    path = framing[0]
    raw, _, error = read(sim, framing, "reset")
    assert error is not None and FINAL[path].encode() not in raw

    raw, _, error = read(sim, framing, "no_done")
    got = blocks(raw)
    assert error is None and all(body is not None for _, body in got)
    assert [t for t, _ in got].count(DELTA[path]) == 5 and FINAL[path] not in [t for t, _ in got]

    raw, _, error = read(sim, framing, "malformed")
    got = blocks(raw)
    assert error is None and sum(body is None for _, body in got) == 1 and got[-1][0] == FINAL[path]
    assert [t for t, body in got if body is None] == [DELTA[path]]

    raw, pieces, error = read(sim, framing, "stall")
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(pieces)]
    assert error is None and max(gaps) >= 0.45 and blocks(raw)[-1][0] == FINAL[path]

    raw, _, error = read(sim, framing, "long_line")
    assert error is None and max(len(line) for line in raw.split(b"\n")) > 70_000 and blocks(raw)[-1][0] == FINAL[path]

    raw, _, error = read(sim, framing, "stream_error")
    got = [body for _, body in blocks(raw)]
    assert error is None and all(got)
    if path == "/v1/responses":
        assert types(got)[-2:] == ["error", "response.failed"] and got[-1]["response"]["status"] == "failed"
        assert [e["sequence_number"] for e in got] == list(range(len(got)))
    else:
        assert got[-1] == {"type": "error", "error": {"type": "overloaded_error",
                                                      "message": "injected fault stream_error"}}


def test_stream_error_in_chat_is_vllms_error_chunk_then_done(sim):
    _, resp = post(sim, CHAT, chat(10, stream=True), {"x-kneecap-fault": "stream_error"})
    got = resp.read().split(b"\n\n")
    assert got[-2:] == [b"data: [DONE]", b""]
    assert json.loads(got[-3][6:]) == {"error": {"message": "injected fault stream_error",
                                                 "type": "InternalServerError", "param": None, "code": 500}}
    assert sum(b'"content":" ' in e for e in got) == 5
    _, resp = post(sim, "/v1/messages", MESSAGES[1] | {"stream": False}, {**MESSAGES[2], "x-kneecap-fault": "503"})
    assert resp.status == 503 and json.loads(resp.read())["error"]["type"] == "overloaded_error"
