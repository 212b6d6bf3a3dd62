"""Several models and LoRA adapters over real HTTP: /v1/models, routing, each model's own speed and gauges, adapter
loads in the trace. Tiny preset (8 slots); the trace file is read after its simulator stopped (it is buffered)."""

from __future__ import annotations

import http.client
import json
import statistics
import threading
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.kit.sim import start_sim
from tests.kit.sim_http import CHAT, chat, post

pytestmark = pytest.mark.integration

LOAD_MS = 150.0
FLAGS = ("--preset", "tiny", "--serve-model", "fast:1", "--serve-model", "slow:30", "--lora", "ad-a",
         "--lora", "ad-b@slow", "--lora-count", "1", "--max-loras", "1", "--lora-load-ms", str(LOAD_MS))


@pytest.fixture(scope="module")
def sim():
    with start_sim(*FLAGS) as s:
        yield s


def get(sim, path: str) -> bytes:
    conn = http.client.HTTPConnection(sim.host, sim.port, timeout=10)
    conn.request("GET", path)
    return conn.getresponse().read()


def ask(sim, model: str, n: int = 5) -> dict:
    _, resp = post(sim, CHAT, chat(n, model=model))
    body = json.loads(resp.read())
    assert resp.status == 200, body
    return body


def samples(sim) -> dict[tuple[str, str], float]:
    """Every sample of /metrics by (name, model_name label)."""
    text = get(sim, "/metrics").decode()
    return {(s.name, s.labels.get("model_name", "")): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_v1_models_lists_models_then_adapters_with_their_parent(sim):
    data = json.loads(get(sim, "/v1/models"))["data"]
    assert [(m["id"], m["parent"]) for m in data] == [
        ("fast", None), ("slow", None), ("ad-a", "fast"), ("ad-b", "slow"), ("lora-0", "fast")]


def test_unknown_model_is_404_naming_every_served_one(sim):
    _, resp = post(sim, CHAT, chat(3, model="sim-tiny"))
    err = json.loads(resp.read())["error"]
    assert resp.status == 404 and err["code"] == "model_not_found"
    assert "Served models: fast, slow, ad-a, ad-b, lora-0" in err["message"]


def test_each_model_has_its_own_gauges_and_counters_adapters_count_under_their_base(sim):
    before = samples(sim)
    ask(sim, "fast", 7)
    ask(sim, "ad-a", 4)
    ask(sim, "slow", 3)
    ask(sim, "ad-b", 2)
    after = samples(sim)
    made = {m: after["vllm:generation_tokens_total", m] - before["vllm:generation_tokens_total", m]
            for m in ("fast", "slow")}
    assert made == {"fast": 11, "slow": 5}
    assert after["vllm:e2e_request_latency_seconds_count", "slow"] \
        - before.get(("vllm:e2e_request_latency_seconds_count", "slow"), 0) == 2
    _, resp = post(sim, CHAT, chat(200, model="slow", stream=True))  # ~6 s at 30 ms per token
    time.sleep(0.3)
    running = samples(sim)
    resp.close()
    assert (running["vllm:num_requests_running", "slow"], running["vllm:num_requests_running", "fast"]) == (1, 0)


@pytest.mark.timing
def test_each_model_runs_at_its_own_speed_and_the_trace_names_it(tmp_path):
    trace = tmp_path / "trace.jsonl"
    with start_sim(*FLAGS, "--trace-file", str(trace)) as sim:
        assert ask(sim, "fast", 20)["model"] == "fast"
        assert ask(sim, "slow", 20)["model"] == "slow"
    fast, slow = (json.loads(line) for line in trace.read_text().splitlines())
    assert (fast["model"], slow["model"]) == ("fast", "slow")
    assert fast["lora_loaded"] is False and fast["images"] == []
    gap = {r["model"]: statistics.median(b - a for a, b in zip(r["token_times"], r["token_times"][1:], strict=False))
           for r in (fast, slow)}
    assert gap["slow"] >= 0.029  # 30 ms iterations: the schedule is never early
    assert gap["fast"] < gap["slow"] / 3, gap


def test_adapter_loads_are_paid_once_while_resident_and_again_after_eviction(tmp_path):
    trace = tmp_path / "trace.jsonl"
    order = ["ad-a", "ad-a", "lora-0", "ad-a", "fast", "ad-b"]
    with start_sim(*FLAGS, "--trace-file", str(trace)) as sim:
        for model in order:
            assert ask(sim, model, 3)["model"] == model  # the response names the adapter, as vLLM's does
    got = [json.loads(line) for line in trace.read_text().splitlines()]
    assert [(r["model"], r["lora_loaded"]) for r in got] == [
        ("ad-a", True), ("ad-a", False), ("lora-0", True), ("ad-a", True), ("fast", False), ("ad-b", True)]
    prefill = [r["first_token"] - r["admitted"] for r in got]
    assert all(p >= LOAD_MS / 1000 for p, r in zip(prefill, got, strict=True) if r["lora_loaded"])
    assert prefill[1] < LOAD_MS / 1000 and prefill[4] < LOAD_MS / 1000


def test_one_adapter_too_many_waits_while_the_base_model_goes_past(tmp_path):
    trace = tmp_path / "trace.jsonl"
    with start_sim(*FLAGS, "--trace-file", str(trace)) as sim:
        threads = [threading.Thread(target=ask, args=(sim, "ad-a", 400))]
        threads[0].start()
        time.sleep(0.2)  # ad-a holds the only adapter slot of fast's engine
        for model in ("lora-0", "fast"):  # in this order: FCFS alone would hold fast up behind lora-0
            threads.append(threading.Thread(target=ask, args=(sim, model, 3)))
            threads[-1].start()
            time.sleep(0.05)
        for t in threads:
            t.join(30)
    got = {r["model"]: r for r in (json.loads(line) for line in trace.read_text().splitlines())}
    long_end = got["ad-a"]["token_times"][-1]
    assert got["fast"]["finished"] < long_end - 0.05  # the base model was not held up
    assert got["lora-0"]["admitted"] >= long_end - 0.02 and got["lora-0"]["lora_loaded"]
