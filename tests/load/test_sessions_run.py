"""Sessions end to end: real simulator, master and worker processes; the simulator's trace is the ground truth."""

from __future__ import annotations

import itertools
import json
import re
import urllib.request
from statistics import mean

import pytest

from harness.analysis.sessions import NOT_REPORTED
from harness.sim.openai import plain_text
from harness.sim.prefix import message_hash
from tests.kit.run import kneecap_run, write_scenario
from tests.kit.sim import start_sim

pytestmark = pytest.mark.integration

THINK_S = 0.3
SCENARIO = f"""
    name: sessions-test
    endpoint: {{api: chat, model: sim-tiny}}
    workload:
      seed: 5
      sessions:
        turns: 4
        first_input_tokens: 600
        turn_input_tokens: 100
        output_tokens: 20
        think_time_s: {THINK_S}
        max_context_tokens: 900
        compaction: {{keep_tokens: 300}}
    load:
      mode: staircase
      users: {{start: 2, step: 2, max: 2}}
      step: {{warmup_s: 0.5, min_duration_s: 5, min_requests: 1, max_duration_s: 6}}
"""


def _run(tmp_path, *sim_args: str) -> tuple[dict, list[dict], dict[str, dict], str]:
    trace = tmp_path / "trace.jsonl"
    # Prefill at 100 ms per 1k tokens: a 600-token first prompt costs ~60 ms, a cached turn a few.
    with start_sim("--preset", "tiny", "--prefill-per-ktoken-ms", "100", "--trace-file", str(trace),
                   *sim_args) as sim:
        r = kneecap_run(write_scenario(tmp_path, SCENARIO), "--save-requests", host=sim.url, out=tmp_path / "out")
        with urllib.request.urlopen(sim.url + "/metrics", timeout=5) as resp:
            metrics = resp.read().decode()
    assert r.code == 0, r.output
    summary, records = r.summary, r.records
    served = {row["id"]: row for row in map(json.loads, trace.read_text().splitlines())}
    return summary, records, served, metrics


def _sessions(records: list[dict]) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    for r in records:
        out.setdefault(r["session"], []).append(r)
    return {sid: sorted(rs, key=lambda r: r["turn"]) for sid, rs in out.items()}


def _counter(metrics: str, name: str) -> float:
    return sum(float(v) for v in re.findall(rf"^{name}\{{[^}}]*\}} (\S+)$", metrics, re.M))


def test_sessions_reuse_the_prefix_cache_exactly_as_a_client_would(tmp_path):
    summary, records, served, metrics = _run(tmp_path)
    assert all(r["ok"] for r in records)
    sessions = [rs for rs in _sessions(records).values() if len(rs) == 4]
    assert len(sessions) >= 4
    think = []
    for rs in sessions:
        rows = [served[r["response_id"]] for r in rs]
        # Each turn's prompt is the previous prompt, the answer as the server streamed it, and a new message.
        for k in (0, 1):
            prev, cur = rows[k]["message_hashes"], rows[k + 1]["message_hashes"]
            assert cur[:len(prev)] == prev
            assert cur[len(prev)] == message_hash("assistant", plain_text(rows[k]["output_tokens"]))
            assert len(cur) == len(prev) + 2
        # Turn 4 would pass max_context_tokens: compacted to a fresh ~300-token summary, a cache miss.
        assert rows[3]["message_hashes"][0] != rows[2]["message_hashes"][0]
        assert rows[3]["prompt_tokens"] == pytest.approx(300 + 100, abs=30)
        assert rows[3]["cached_tokens"] < 16 and rows[1]["cached_tokens"] > 500
        # Think time between a response's end and the next turn's start: never shorter; longer only by a wake-up
        # that came late (a fresh-clone CI run with three lanes on two cores once woke one 14.5 ms late).
        for a, b in itertools.pairwise(rs):
            think.append(b["start"] - (a["start"] + a["e2e_s"]))
    assert min(think) >= THINK_S - 0.001 and max(think) < THINK_S + 0.1, think
    # the median wake-up: within 10 ms (5.1 ms late in a full-suite run on this VM at ~25% steal time)
    assert sorted(think)[len(think) // 2] == pytest.approx(THINK_S, abs=0.01), think
    # The client's cached tokens are the server's ground truth, request by request.
    assert all(r["cached_tokens"] == served[r["response_id"]]["cached_tokens"] for r in records)
    step = summary["steps"][0]
    measured = [r for r in records if r["phase"] == "measure"]
    truth = sum(served[r["response_id"]]["cached_tokens"] for r in measured) / \
        sum(served[r["response_id"]]["prompt_tokens"] for r in measured)
    client, server = step["prefix_cache"]["client"], step["prefix_cache"]["server"]
    assert client["cached_share"] == pytest.approx(truth, abs=0.01)
    # The server's counters: exactly the trace's totals at the end (over the requests it admitted: the counters count
    # at first admission, and a request still waiting when the run stopped is in the trace, never looked up; a
    # fresh-clone CI run on a busy machine once had such), the step's scraped share close to the client's.
    admitted = [row for row in served.values() if row["admitted"] is not None]
    assert _counter(metrics, "vllm:prefix_cache_hits_total") == sum(row["cached_tokens"] for row in admitted)
    assert _counter(metrics, "vllm:prefix_cache_queries_total") == sum(row["prompt_tokens"] for row in admitted)
    # The scraped share counts at admission between the step's first and last scrape, the client's by request in the
    # measured part: they differ by the requests at the edges (0.057 in a fresh-clone CI run of 2026-12-02, 3 lanes)
    assert server["hit_rate"] == pytest.approx(truth, abs=0.08)
    # With the cache, later turns start much sooner than the first.
    first = mean(r["ttft_s"] for r in records if r["turn"] == 1)
    later = mean(r["ttft_s"] for r in records if r["turn"] in (2, 3))
    assert later < 0.5 * first, (first, later)
    s = step["sessions"]
    assert s["ended"] >= 4 and s["failed"] == 0 and s["compactions"] >= 4 and s["turns_mean"] == 4
    assert s["duration_ms"]["p50"] >= 3 * THINK_S * 1000


def test_without_a_prefix_cache_later_turns_are_not_faster_and_nothing_is_reported(tmp_path):
    summary, records, _served, _ = _run(tmp_path, "--prefix-cache", "off")
    assert all(r["ok"] and r["cached_tokens"] is None for r in records)
    first = mean(r["ttft_s"] for r in records if r["turn"] == 1)
    later = mean(r["ttft_s"] for r in records if r["turn"] in (2, 3))
    assert later > 0.9 * first, (first, later)  # longer prompts, all prefilled again
    cache = summary["steps"][0]["prefix_cache"]
    assert cache["client"]["note"] == NOT_REPORTED and cache["server"]["note"] == NOT_REPORTED


KV_BOUND = """
    name: kv-bound-sessions
    endpoint: {api: chat, model: sim-tiny}
    workload:
      seed: 2
      sessions:
        turns: 8
        first_input_tokens: 2500
        turn_input_tokens: 100
        output_tokens: 30
        think_time_s: 1.0
    load:
      mode: staircase
      users: {start: 4, step: 4, max: 12}
      step: {warmup_s: 2, min_duration_s: 6, min_requests: 50, max_duration_s: 10}
"""


def test_a_kv_bound_endpoint_breaks_when_its_prefix_cache_stops_holding_the_sessions(tmp_path):
    """64 slots but a KV cache of 32k tokens: ~9 sessions' histories (2.5-3.5k tokens each) fit. Past that, the
    histories of sessions in their think time are evicted, later turns miss and prefill everything again."""
    r = kneecap_run(write_scenario(tmp_path, KV_BOUND, name="kv.yaml"), "--sim-arg=--preset=tiny",
                    "--sim-arg=--max-num-seqs=64", "--sim-arg=--kv-cache-tokens=32768",
                    "--sim-arg=--prefill-per-ktoken-ms=100", out=tmp_path / "out",
                    timeout=240)  # its own bound, longer than the kit's: up to three steps of 12 s
    summary = r.summary
    knee = summary["knee"]
    assert knee["found"], r.output
    assert 7 <= knee["users"] <= 13
    assert "prefix cache hit" in knee["reason"], knee["reason"]
    # Past the knee the cache stops holding the sessions (the step's share collapses: first turns never hit, so it
    # can lag the later turns' misses by a step, which the reason then names by turn).
    shares = {s["users"]: s["prefix_cache"]["client"].get("cached_share") for s in summary["steps"]}
    past = [share for users, share in shares.items() if users > knee["users"] and share is not None]
    assert shares[4] > 0.8 and past and min(past) < shares[4] - 0.2, shares
    assert knee["why"] and knee["why"] in r.stdout and "prefix cache hit" in knee["why"]  # the console says why too


def test_open_loop_rate_is_new_sessions_per_second(tmp_path):
    path = write_scenario(tmp_path, """
        name: sessions-open
        endpoint: {api: chat, model: sim-tiny}
        workload:
          sessions: {turns: 3, first_input_tokens: 300, turn_input_tokens: 30, output_tokens: 10,
                     think_time_s: 0.1, parallel_calls: 2}
        load:
          mode: open_staircase
          rate: {start: 4, step: 4, max: 4}
          arrival: {process: constant}
          step: {warmup_s: 1, min_duration_s: 5, min_requests: 1, max_duration_s: 5}
    """, name="open.yaml")
    r = kneecap_run(path, "--sim-arg=--preset=tiny", workers=2, out=tmp_path / "out")
    step = r.summary["steps"][0]
    # A constant schedule dispatches 4 a second, each of the 2 workers every 0.5 s: over the step's measured time
    # (which the master ends on its own tick, a little past 5 s under load) each worker is at most one arrival off
    assert step["arrivals_per_s"] == pytest.approx(4, abs=2 / step["duration_s"]), r.output
    s = step["sessions"]
    assert s["calls_mean"] == 5  # turn 1, then two turns of two parallel calls
    assert s["ended"] == pytest.approx(4 * step["duration_s"], abs=3)  # each arrival is a session
    assert step["requests"] == pytest.approx(5 * s["ended"], abs=12)
