"""``kneecap run`` end to end: a master and a worker against the simulator, for real.

The simulator's knee is analytical: with fixed lengths and S slots, TTFT is flat up to S closed-loop
users and jumps beyond (README, "Where the knee is").
"""

from __future__ import annotations

import html
import json
import os
import signal
import time

import pytest

from tests.kit.run import kneecap_run, start_kneecap_run
from tests.kit.scenarios import STAIRS, scenario

pytestmark = pytest.mark.integration


def step_keys(summary: dict) -> set[str]:
    return {k for s in summary["steps"] for k in s}


def curve(summary: dict) -> list:
    """What the knee finder saw, for failure messages."""
    return [(s["users"], s["latency_ms"].get("ttft", {}).get("p99"), s["latency_ms"].get("ttft", {}).get("p99_ci"),
             s["throughput"]["output_tokens_per_s"], s["generator"]) for s in summary["steps"]]


@pytest.mark.parametrize("seed", [1, 2])  # two draws of the same staircase (a third cost CI ~8 s, found nothing new)
def test_knee_at_the_simulators_capacity(tmp_path, seed):
    r = kneecap_run(scenario(tmp_path, STAIRS), "--seed", str(seed), "--sim-arg=--max-num-seqs=8",
                    out=tmp_path / "out")
    code, summary, output = r.code, r.summary, r.output
    assert "started the built-in simulator" in output
    knee = summary["knee"]
    assert knee["found"] and knee["confirmed"], (knee, curve(summary), output)
    assert knee["users"] in (6, 8, 10), knee  # analytical knee: 8 slots, within one step
    assert summary["stop_reason"].startswith("knee confirmed")
    assert code == 0 and f"knee: {knee['users']:g} users" in output
    # each step ended at its 2 s mark once its 60 requests were in (the workers report at the mark), not at
    # Locust's next 3 s report after it (2.5 s of a 1.5 s plan, before)
    # (after the first step, whose users start up in it: 4.4 s with 164 requests in a fresh-clone CI run)
    held = [(s["duration_s"], s["requests"]) for s in summary["steps"][1:] if s["ended"] == "min"]
    on_time = [d for d, n in held if n / d * 2 >= 1.2 * 60]  # at its rate, the 60 were in well before the mark
    assert on_time and max(on_time) < 2.3, held
    # where TTFT goes: past the knee, the server's queue takes a growing share of it (vLLM-style histograms)
    share = [s["ttft_split"]["server"]["queue"]["mean_ms"] / s["ttft_split"]["client"]["ttft"]["mean_ms"]
             for s in summary["steps"] if s.get("ttft_split") and "queue" in s["ttft_split"]["server"]]
    # (a step the confirmed knee cut short after one scrape has no server delta: "not measured in this step")
    assert share[-1] > share[0] + 0.2, share


def test_no_knee_within_range(tmp_path):
    # 40 requests a step, not 60: at 2 users of 10 ms iterations ~10 requests/s, 60 held each step to its 5 s cap
    load = STAIRS.replace("max: 16", "max: 10").replace("min_requests: 60", "min_requests: 40")
    r = kneecap_run(scenario(tmp_path, load), "--sim-arg=--max-num-seqs=64",
                    "--sim-arg=--iter-base-ms=10", out=tmp_path / "out")  # TTFT well above OS scheduling noise
    summary, output = r.summary, r.output
    assert not summary["knee"]["found"], (summary["knee"], curve(summary))
    assert summary["stop_reason"].startswith("plan complete") and "knee: not found" in output


def test_jitter_makes_no_false_knee(tmp_path):
    load = STAIRS.replace("max: 16", "max: 10").replace("min_requests: 60", "min_requests: 40")  # as above
    summary = kneecap_run(scenario(tmp_path, load), "--sim-arg=--max-num-seqs=64", "--sim-arg=--jitter=0.3",
                          "--sim-arg=--iter-base-ms=10", out=tmp_path / "out").summary
    assert not summary["knee"]["confirmed"], (summary["knee"], curve(summary))


CONSTANT = """
load: {mode: constant, users: 4, duration_s: 3, step: {warmup_s: 0.5}}
"""


# The passing run also prices its capacity (docs/cost.md), with a speed floor it holds; the failing one has no cost:
COST = 'cost: {per_hour: 4.2, currency: EUR, input_per_mtok: 0.5, output_per_mtok: 1.5}\n'


@pytest.mark.parametrize("budget,code", [("p(95)<5000", 0), ("p(95)<1", 3)])
def test_slo_decides_the_exit_code(tmp_path, budget, code):
    floor = ', tokens_per_s_per_user: "p(5)>1"' if code == 0 else ""
    r = kneecap_run(scenario(tmp_path, CONSTANT, f"slo: {{ttft: \"{budget}\"{floor}}}\n"
                             + (COST if code == 0 else "")), "--label", "env=ci", "--label", f"code={code}",
                    out=tmp_path / "out", report=True)
    got, summary, output = r.code, r.summary, r.output
    assert got == code and summary["exit_code"] == code, output
    assert summary["slo"]["passed"] is (code == 0)
    # the run store: one line, beside the run folder (--out lies outside sinks.results_dir), also in run.json
    lines = (tmp_path / "index.jsonl").read_text().splitlines()
    assert len(lines) == 1 and f"run store: {tmp_path / 'index.jsonl'}" in output, output
    entry, first = json.loads(lines[0]), summary["steps"][0]
    assert entry == json.loads((tmp_path / "out" / "run.json").read_text())
    assert (entry["kind"], entry["run_id"], entry["path"], entry["labels"]) == \
        ("run", summary["run_id"], str(tmp_path / "out"), {"env": "ci", "code": str(code)})
    assert (entry["exit_code"], entry["requests"], entry["max_load_within_slo"]) == \
        (code, first["requests"], summary["slo"]["max_load_within_slo"])
    assert entry["knee"] == {"found": False, "load": None, "unit": "users", "metric": "ttft", "p99_step": 0,
                             "confidence": summary["knee"]["confidence"],
                             "p99_ms": first["latency_ms"]["ttft"]["p99"]}, entry
    assert entry["max_output_tokens_per_s"] == first["throughput"]["output_tokens_per_s"]
    assert len(entry["scenario_hash"]) == 64 and entry["git"] is None and entry["kneecap_version"]
    assert ("SLO PASSED" if code == 0 else "SLO FAILED") in output
    report = (tmp_path / "out" / "report.html").read_text()
    if code == 0:  # the cost view: the console line, the summary's figures, the report's table and plot
        cost, step = summary["cost"], summary["steps"][0]
        assert cost["reference"] == "max_load_within_slo" and cost["currency"] == "EUR", cost
        at = cost["at"]["max_load_within_slo"]
        assert at["floor_held"] is True and at["notes"] == [] and at == {**step["cost"], "index": 0, "level": 4}
        tps = step["throughput"]["output_tokens_per_s"]
        assert at["flat_per_mtok"] == pytest.approx(4.2 / (tps * 3600) * 1e6, rel=1e-4), (at, tps)
        assert at["tokens"]["output"] == step["generator"]["output_tokens"]  # warm-up included, like the CPU's
        assert f"cost at 4 users (largest load within SLO): flat {at['flat_per_mtok']:.3g} EUR" in output, output
        assert "<h2>Cost</h2>" in report and "EUR per 1M output tokens" in report  # the table and the plot
        assert html.escape(cost["line"]) in report
    else:
        assert "cost" not in summary and "cost" not in step_keys(summary) and "<h2>Cost</h2>" not in report
    # the client's own side: connections paid, worker CPU per token, GC pauses, each process's CPU
    (step,) = summary["steps"]
    # the step lasts its plan: the shape meets the time mark, not Locust's next once-a-second tick after it
    assert step["duration_s"] == pytest.approx(3, abs=0.1) and step["ended"] == "max_duration", step["duration_s"]
    gen = step["generator"]
    assert 0 <= step["new_connection_share"] <= 1 and step["new_connections"] <= step["requests"], step
    assert gen["output_tokens"] >= 20 * step["requests"] and 0 < gen["cpu_s"] < 3 * 2, gen  # 3 s, 2 cores at most
    assert 1 < gen["cpu_us_per_token"] < 20_000 and 0 <= gen["gc_pause_max_ms"] < 1000, gen
    procs = json.loads((tmp_path / "out" / "processes.json").read_text())
    assert {"parent", "master", "worker-0", "sim", "report"} <= procs["roles"].keys(), procs
    assert procs["roles"]["worker-0"]["cpu_s"] >= gen["cpu_s"] and procs["output_tokens"] == gen["output_tokens"]
    assert procs["cpu_us_per_token"]["client_tree"] > procs["cpu_us_per_token"]["workers_in_steps"] > 0
    assert "client CPU: " in output and "µs per streamed token (workers, in the steps)" in output
    # why the tail: every measured request reached the master as a row, each metric's p99/p95 is explained
    tails = step["tail"]["attributions"]
    assert {(a["metric"], a["quantile"]) for a in tails} >= {("ttft_s", 0.99), ("e2e_s", 0.95)}, tails
    assert all(a["line"] and a["verdict"] in ("cause", "time", "none", "too_few") for a in tails), tails
    assert max(a["n"] for a in tails) == step["ok"]  # the rows of every successful measured request
    # where TTFT goes: the simulator reports vLLM's stage histograms; queue + prefill sit inside its TTFT, and the
    # client's TTFT is the server's plus a little network and client (loopback). The server's histograms count the
    # requests it finished between two scrapes, not exactly the measured ones: their means differ by a little.
    split = step["ttft_split"]
    server, client = split["server"], split["client"]["ttft"]
    assert server["source"].startswith("per step"), split
    inside = server["queue"]["mean_ms"] + server["prefill"]["mean_ms"]
    assert inside <= 1.1 * server["ttft"]["mean_ms"] + 1 and -1 < server["network_client"]["mean_ms"] < 20, split
    assert abs(client["mean_ms"] - server["ttft"]["mean_ms"] - server["network_client"]["mean_ms"]) < 0.01


def test_bad_scenario_is_a_usage_error(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\nworkload: {input_tokens: -5, output_tokens: 5}\n")
    r = kneecap_run(path, out=None, workers=None, timeout=30)  # as typed: no --workers, no --out
    assert r.code == 2 and "workload.input_tokens.value: must be >= 0" in r.stderr
    assert "Traceback" not in r.stderr


def test_ctrl_c_leaves_a_valid_partial_summary(tmp_path):
    out = tmp_path / "out"
    load = STAIRS.replace("max_duration_s: 5", "max_duration_s: 60").replace("min_requests: 60",
                                                                             "min_requests: 100000")
    proc = start_kneecap_run(scenario(tmp_path, load), out=out)
    # the run under way (its first step begun), not just its folder: a busy machine's master took 4 s to start,
    # and an interrupt before the first step leaves no step to write (a fresh-clone CI run of 2026-12-03)
    log, deadline = out / "master.log", time.monotonic() + 60
    while time.monotonic() < deadline and not (log.exists() and "kneecap: step 0" in log.read_text()):
        time.sleep(0.2)
    time.sleep(3)
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=60)
    summary = json.loads((out / "summary.json").read_text())
    assert "interrupted" in output and summary["steps"] and summary["steps"][0]["requests"] > 0
    assert not [f for f in os.listdir(out) if f.startswith(".tmp-")]
