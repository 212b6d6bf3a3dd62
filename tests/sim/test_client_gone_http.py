"""A client that hangs up mid-stream: the simulator aborts its request at once, freeing the engine's slot and KV
blocks, and the trace says ``client_gone`` with ``finished`` the moment the client closed. Real HTTP, raw socket."""

from __future__ import annotations

import json
import socket
import time

import pytest

from tests.kit.sim import start_sim
from tests.kit.sim_http import CHAT, chat, scrape

pytestmark = pytest.mark.integration


def stats(sim) -> dict:
    with socket.create_connection((sim.host, sim.port), timeout=5) as s:
        s.sendall(b"GET /sim/stats HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        raw = b""
        while chunk := s.recv(65536):
            raw += chunk
    return json.loads(raw.split(b"\r\n\r\n", 1)[1])


def wait_for(sim, running: int, timeout: float = 2.0) -> float:
    """Seconds until /sim/stats says ``running`` requests are in the batch."""
    start = time.monotonic()
    while stats(sim)["running"] != running:
        assert time.monotonic() - start < timeout, f"running never reached {running}: {stats(sim)}"
        time.sleep(0.005)
    return time.monotonic() - start


@pytest.mark.timing
def test_a_hang_up_frees_the_slot_and_the_trace_ends_at_the_hang_up(tmp_path):
    trace = tmp_path / "trace.jsonl"
    with start_sim("--preset", "tiny", "--iter-base-ms", "5", "--trace-file", str(trace)) as sim:
        body = json.dumps(chat(2000, stream=True)).encode()  # ~10 s of tokens at 5 ms each
        client = socket.create_connection((sim.host, sim.port), timeout=5)
        client.sendall(b"POST " + CHAT.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        got = b""
        while got.count(b"data: ") < 6:  # streaming: it holds a slot now (the role chunk, then 5 tokens seen)
            got += client.recv(65536)
        assert stats(sim)["running"] == 1 and scrape(sim)["vllm:kv_cache_usage_perc"] > 0
        closed_at = time.time()
        client.close()
        assert wait_for(sim, 0) < 0.5
        assert scrape(sim)["vllm:kv_cache_usage_perc"] == 0  # its blocks went back too
    (row,) = [json.loads(line) for line in trace.read_text().splitlines()]
    assert row["status"] == "client_gone" and 5 <= row["output_tokens"] < 2000
    assert -0.002 <= row["finished_wall"] - closed_at < 0.02, row["finished_wall"] - closed_at
    assert row["token_times"][-1] <= row["finished"]
