"""Each injected fault looks to a plain client like the real failure it imitates."""

from __future__ import annotations

import http.client
import itertools
import json
import time

import pytest

from harness.sim.faults import FaultConfig, parse_fault_spec
from tests.kit.sim import start_sim
from tests.kit.sim_http import CHAT, chat, post

pytestmark = pytest.mark.integration


def stream_with_fault(sim, kind: str, tokens: int = 10) -> tuple[bytes, list[tuple[float, bytes]], Exception | None]:
    """Read a stream with fault ``kind``; returns the bytes, (arrival time, piece) list and the error raised."""
    _, resp = post(sim, CHAT, chat(tokens, stream=True), {"x-kneecap-fault": kind})
    pieces, error = [], None
    try:
        while True:
            piece = resp.read1(1 << 20)
            if not piece:
                break
            pieces.append((time.monotonic(), piece))
    except (http.client.HTTPException, OSError) as exc:
        error = exc
    return b"".join(p for _, p in pieces), pieces, error


@pytest.mark.parametrize("kind,status", [("429", 429), ("500", 500), ("503", 503)])
def test_http_faults_answer_before_any_token(sim, kind, status):
    _, resp = post(sim, CHAT, chat(5, stream=True), {"x-kneecap-fault": kind})
    body = json.loads(resp.read())
    assert resp.status == status and "injected fault" in body["error"]["message"]
    assert (resp.getheader("retry-after") == "1") == (status == 429)


def test_reset_mid_stream(sim):
    raw, _, error = stream_with_fault(sim, "reset")
    assert isinstance(error, (ConnectionResetError, http.client.IncompleteRead))
    assert b"[DONE]" not in raw


def test_no_done_closes_cleanly_halfway(sim):
    raw, _, error = stream_with_fault(sim, "no_done")
    assert error is None
    assert raw.count(b'"content":" ') == 5 and b"finish_reason\":\"length" not in raw and b"[DONE]" not in raw


def test_malformed_chunk_then_the_stream_goes_on(sim):
    raw, _, error = stream_with_fault(sim, "malformed")
    assert error is None and raw.endswith(b"data: [DONE]\n\n")
    bad = [e for e in raw.split(b"\n\n") if e.startswith(b"data: {")]
    undecodable = []
    for e in bad:
        try:
            json.loads(e[6:])
        except ValueError:
            undecodable.append(e)
    assert len(undecodable) == 1


def test_long_line(sim):
    raw, _, error = stream_with_fault(sim, "long_line")
    assert error is None and raw.endswith(b"data: [DONE]\n\n")
    assert max(len(line) for line in raw.split(b"\n")) > 70_000


def test_stall_pauses_the_stream_for_stall_s(sim):
    raw, pieces, error = stream_with_fault(sim, "stall", tokens=20)
    assert error is None and raw.endswith(b"data: [DONE]\n\n") and raw.count(b'"content":" ') == 20
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(pieces)]
    assert max(gaps) >= 0.45  # the fixture's --stall-s 0.5


def test_unknown_fault_header_is_a_400(sim):
    _, resp = post(sim, CHAT, chat(5), {"x-kneecap-fault": "meteor"})
    assert resp.status == 400 and "unknown fault" in json.loads(resp.read())["error"]["message"]


def test_fault_probabilities_from_flags_and_max_waiting_429():
    with start_sim("--preset", "tiny", "--fault", "500=1.0") as sim:
        statuses = {post(sim, CHAT, chat(2))[1].status for _ in range(5)}
    assert statuses == {500}
    with start_sim("--preset", "tiny", "--max-num-seqs", "1", "--max-waiting", "0", "--retry-after-s", "3") as sim:
        _, resp1 = post(sim, CHAT, chat(500, stream=True))
        resp1.read1(10)
        _, resp2 = post(sim, CHAT, chat(5))
        assert resp2.status == 429 and resp2.getheader("retry-after") == "3"
        assert "waiting" in json.loads(resp2.read())["error"]["message"]


def test_fault_draws_are_seeded_and_specs_validated():
    import random

    cfg = FaultConfig({"reset": 0.3, "500": 0.1})
    a = [cfg.pick(random.Random(1)) for _ in range(1)] + [cfg.pick(r) for r in [random.Random(2)] for _ in range(50)]
    b = [cfg.pick(random.Random(1)) for _ in range(1)] + [cfg.pick(r) for r in [random.Random(2)] for _ in range(50)]
    assert a == b and {"reset", "500", None} <= set(a)
    assert parse_fault_spec(["reset=0.5", "429=1"]) == {"reset": 0.5, "429": 1.0}
    for bad in ("reset", "boom=0.1", "reset=x", "reset=2"):
        with pytest.raises(ValueError, match="bad --fault"):
            parse_fault_spec([bad])
