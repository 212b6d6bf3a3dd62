"""A weighted mix of two classes end to end: each class its own model on the simulator (its own engine and speed),
the simulator's trace as the truth. Two workers share 1,000+ requests 3:1; each class's TPOT is its model's; each
class's SLO is judged on its requests alone, in the step's verdict and the exit code; one class's requests go to
three LoRA adapters in turn (counted per step); probes at 2/s beside them are reported apart and absent from the
step's metrics; a third class holds 2 of the 16 users (``users: 2``) and runs 3-turn sessions. Each class's own
tail, TTFT split, tokens and cost come from its requests alone."""

from __future__ import annotations

import itertools
import json
import statistics

import pytest

from tests.kit.run import kneecap_run, write_scenario
from tests.kit.sim import start_sim

pytestmark = pytest.mark.integration

SCENARIO = """
    name: two-classes
    endpoint: {api: chat, model: fast, headers: {X-Team: infra}}
    workload:
      seed: 7
      mix:
        - {name: chat, weight: 3, input_tokens: 40, output_tokens: 8, slo: {tpot: ["p(95)<15"]},
           endpoint: {adapters: {names: [a0, a1, a2]}}}
        - name: batch
          weight: 1
          input_tokens: 40
          output_tokens: 8
          endpoint: {model: slow}
          slo: {tpot: ["p(95)<15"], error_rate: "rate<0.01"}
        - name: nightly
          users: 2
          sessions: {turns: 3, first_input_tokens: 60, turn_input_tokens: 10, output_tokens: 8, think_time_s: 0.05}
    load: {mode: constant, users: 16, duration_s: 9, step: {warmup_s: 1}, probes: {rate: 2, input_tokens: 16}}
    cost: {input_per_mtok: 1.0, output_per_mtok: 4.0, currency: EUR}
"""


def test_two_classes_keep_their_weights_speeds_and_verdicts(tmp_path):
    trace = tmp_path / "trace.jsonl"
    with start_sim("--preset", "tiny", "--serve-model", "fast:3", "--serve-model", "slow:24", "--lora", "a0@fast",
                   "--lora", "a1@fast", "--lora", "a2@fast", "--max-loras", "3", "--iter-per-seq-ms", "0",
                   "--trace-file", str(trace)) as sim:
        r = kneecap_run(write_scenario(tmp_path, SCENARIO), "--save-requests", host=sim.url, workers=2,
                        out=tmp_path / "out", report=True)
    step = r.summary["steps"][0]
    chat, batch, nightly = step["classes"]
    assert (chat["name"], batch["name"], nightly["name"]) == ("chat", "batch", "nightly")
    assert step["requests"] >= 1000, step["requests"]
    # Weights are shares of the weighted users' requests, dealt in turn on each worker: within 2 points
    assert chat["requests"] + batch["requests"] + nightly["requests"] == step["requests"]
    weighted = 1 - nightly["share"]
    assert abs(chat["share"] - 0.75 * weighted) <= 0.02, (chat["share"], weighted, step["requests"])
    assert chat["weight_share"] == pytest.approx(0.75 * weighted, abs=1e-5), chat
    assert nightly["users"] == 2 and nightly["weight_share"] is None

    # Each class went to its own model: the simulator's trace, request by request
    served = {row["id"]: row for row in map(json.loads, trace.read_text().splitlines())}
    measured = [rec for rec in r.records if rec["phase"] == "measure" and rec["ok"]]
    models = {(rec["class"], rec["model"], served[rec["response_id"]]["model"]) for rec in measured}
    assert models == {("chat", a, a) for a in ("a0", "a1", "a2")} | {("batch", None, "slow"), ("probe", None, "fast"),
                                                                     ("nightly", None, "fast")}
    # The nightly class is 2 of the 16 users whatever the step (one place a worker): never more than 2 requests of it
    # in flight at once, and 2 at once for most of the step
    spans = sorted((rec["start"], rec["start"] + rec["e2e_s"]) for rec in measured if rec["class"] == "nightly")
    edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    in_flight = list(itertools.accumulate(d for _, d in edges))
    assert max(in_flight) == 2 and len(spans) == nightly["requests"] - nightly["failed"], (max(in_flight), nightly)
    # ... and runs sessions: its requests are their turns, the other classes' are single requests
    turns = [rec["turn"] for rec in measured if rec["class"] == "nightly"]
    assert set(turns) == {1, 2, 3} and all(rec["session"] is None for rec in measured if rec["class"] != "nightly")
    assert step["sessions"]["ended"] >= 2 and step["sessions"]["turns_mean"] == 3, step["sessions"]
    # the chat class's LoRA adapters in turn on each worker: within one request per worker of each other
    adapters = step["adapters"]
    assert sum(adapters.values()) == chat["requests"] and max(adapters.values()) - min(adapters.values()) <= 2, adapters

    # Probes at 2/s across both workers, one token each, apart from the step's requests and metrics
    probes = [rec for rec in measured if rec["class"] == "probe"]
    assert step["probes"]["requests"] == len(probes) == pytest.approx(2 * step["duration_s"], abs=2), step["probes"]
    assert all(served[rec["response_id"]]["output_tokens"] == 1 for rec in probes)
    assert step["latency_ms"]["ttft"]["count"] == step["requests"] == len(measured) - len(probes), step["requests"]
    assert step["probes"]["latency_ms"]["ttft"]["p50"] < 50 and step["probes"]["share"] is None
    assert len([rec for rec in measured if rec["class"] == "batch"]) == batch["requests"] - batch["failed"]
    for cls, model in ((chat, {"a0", "a1", "a2"}), (batch, {"slow"})):
        gaps = [b - a for row in served.values() if row["model"] in model and row["status"] == "ok"
                for a, b in itertools.pairwise(row["token_times"])]
        truth_ms = 1000 * statistics.median(gaps)
        assert cls["latency_ms"]["tpot"]["p50"] == pytest.approx(truth_ms, rel=0.15, abs=1.0), (model, cls, truth_ms)

    # Each class's SLO on its own requests: the fast model meets TPOT p95 < 15 ms, the slow one (24 ms) does not
    assert chat["slo_passed"] is True and batch["slo_passed"] is False, (chat["slo"], batch["slo"])
    failed = [c["threshold"] for c in step["slo"] if not c["passed"]]
    assert failed == ["[batch] tpot: p(95)<15"], step["slo"]
    assert r.summary["slo"]["passed"] is False and r.code == 3, r.output
    assert "class batch (step 0):" in r.stdout and "SLO FAILED: tpot: p(95)<15" in r.stdout, r.stdout

    # Each class's own tail attribution, TTFT split, tokens and metered cost, from its requests alone
    for cls in (chat, batch, nightly):
        mine = [rec for rec in measured if rec["class"] == cls["name"]]
        assert {a["metric"] for a in cls["tail"]["attributions"]} >= {"ttft_s", "e2e_s"}, cls["tail"]
        assert cls["ttft_split"]["client"]["ttft"]["n"] == len(mine) == cls["requests"] - cls["failed"]
        assert cls["tokens"]["output"] >= sum(rec["output_tokens"] for rec in mine) > 0, cls["tokens"]
        test = (cls["tokens"]["input"] * 1.0 + cls["tokens"]["cached_input"] * 1.0 + cls["tokens"]["output"] * 4.0)
        assert cls["cost"]["test_cost"] == pytest.approx(test / 1e6, abs=1e-6) and cls["cost"]["currency"] == "EUR"
        assert cls["cancelled"] == 0 and cls["cancelled_share"] is None
    assert sum(c["cost"]["output_share"] for c in step["classes"]) == pytest.approx(1.0, abs=1e-5)
    report = (tmp_path / "out" / "report.html").read_text()
    assert "<h2>Classes</h2>" in report and "<td>batch</td>" in report and "FAILED: [batch]" not in report
    assert "FAILED: tpot: p(95)&lt;15" in report, report[report.index("<h2>Classes</h2>"):][:2000]
