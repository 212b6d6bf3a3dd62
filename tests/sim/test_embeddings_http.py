"""Embeddings through the real simulator: the response, usage, and that concurrent requests queue."""

from __future__ import annotations

import json
import threading

import pytest

from tests.kit.sim import start_sim
from tests.kit.sim_http import post, scrape

pytestmark = pytest.mark.integration


def test_embeddings_answer_and_queue_on_the_prefill_budget(tmp_path):
    trace = tmp_path / "trace.jsonl"
    big = " ".join(f"w{i}" for i in range(900))
    with start_sim("--preset", "tiny", "--embedding-dim", "6", "--max-num-batched-tokens", "1000",
                   "--prefill-per-ktoken-ms", "50", "--trace-file", str(trace)) as sim:
        _, resp = post(sim, "/v1/embeddings", {"model": "sim-tiny", "input": ["one two", [1, 2, 3]]})
        out = json.loads(resp.read())
        _, resp = post(sim, "/v1/embeddings", {"model": "sim-tiny"})
        bad = (resp.status, json.loads(resp.read())["error"]["param"])
        threads = [threading.Thread(target=lambda: post(sim, "/v1/embeddings", {"model": "sim-tiny",
                                                                                "input": big})[1].read())
                   for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        metrics = scrape(sim)
    assert resp.status == 400 and bad == (400, "input")
    assert [(d["object"], d["index"], len(d["embedding"])) for d in out["data"]] == [("embedding", 0, 6),
                                                                                   ("embedding", 1, 6)]
    assert out["usage"] == {"prompt_tokens": 5, "total_tokens": 5}
    assert metrics["vllm:prompt_tokens_total"] == 5 + 8 * 900 and metrics["vllm:generation_tokens_total"] == 0

    rows = [json.loads(line) for line in trace.read_text().splitlines()]
    assert rows[0]["kind"] == "embeddings" and rows[0]["output_tokens"] == 0 and rows[0]["first_token"] is None
    # 8 × 900 tokens through a 1000-token budget: ~7 iterations of ~52 ms, so the last waits ~7× the first
    latencies = sorted(r["finished"] - r["arrival"] for r in rows[1:])
    assert len(latencies) == 8 and latencies[-1] > 4 * latencies[0]
