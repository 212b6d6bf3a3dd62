"""End to end: a real Locust master and two workers against the simulator, merged numbers checked against
the per-request records."""

from __future__ import annotations

import json
import subprocess
import textwrap

import pytest

from tests.kit.fleet import LOCUST, exact
from tests.kit.procs import free_port
from tests.kit.sim import start_sim

pytestmark = pytest.mark.integration


def test_master_and_two_workers_merge_exactly(tmp_path):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(textwrap.dedent("""
        name: fleet-test
        endpoint: {api: chat, model: sim-tiny}
        workload: {input_tokens: {dist: uniform, min: 50, max: 400}, output_tokens: {dist: uniform, min: 5, max: 60}}
        load: {step: {warmup_s: 1}}
    """))
    results = tmp_path / "out"
    port = free_port()
    with start_sim("--preset", "tiny") as sim:
        common = ["--scenario", str(scenario), "--host", sim.url]
        master = subprocess.Popen(
            [*LOCUST, "--headless", "--master", "--expect-workers", "2", "--master-bind-host", "127.0.0.1",
             "--master-bind-port", str(port), "-u", "12", "-r", "12", "-t", "6s", "--results-dir", str(results),
             "--save-requests", str(results / "requests.jsonl"), *common],
            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        workers = [subprocess.Popen([*LOCUST, "--worker", "--master-host", "127.0.0.1", "--master-port", str(port)],
                                    cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                   for _ in range(2)]
        try:
            out_master, _ = master.communicate(timeout=60)
            outs = [w.communicate(timeout=20)[0] for w in workers]
        finally:
            for p in (master, *workers):
                if p.poll() is None:
                    p.kill()
    logs = out_master + "".join(outs)
    assert "Traceback" not in logs and "Uncaught exception" not in logs, logs[-3000:]
    summary = json.loads((results / "summary.json").read_text())
    records = [json.loads(line) for line in (results / "requests.jsonl").read_text().splitlines()]
    assert summary["workers"] == 2 and {r["worker"] for r in records} == {0, 1}, (summary["workers"], logs[-3000:])
    step = summary["steps"][0]
    # the plan ends as Locust begins to stop (load/locust_waits.end_the_plan_first): the few requests that end
    # between the two are past it, in no step (a request or two a user: 15 of 302 once, beside two other lanes)
    in_step = [r for r in records if r["step"] == 0]
    assert step["requests"] + step["warmup_requests"] == len(in_step) > 100
    assert {r["step"] for r in records} <= {0, 1} and len(records) - len(in_step) <= 24, len(records)
    assert step["failures"] == {} and all(r["ok"] for r in records)

    measured = [r for r in in_step if r["phase"] == "measure"]
    assert len(measured) == step["requests"]
    for metric, key in (("ttft", "ttft_s"), ("tpot", "tpot_s"), ("e2e", "e2e_s")):
        values = [r[key] * 1000 for r in measured if r[key] is not None]
        got = step["latency_ms"][metric]
        assert got["count"] == len(values)
        for q, name in ((0.5, "p50"), (0.95, "p95"), (0.99, "p99")):
            want = exact(values, q)
            assert abs(got[name] - want) <= 0.01 * want + 0.001, (metric, name, got[name], want)
    assert sum(r["output_tokens"] for r in measured) / step["duration_s"] == pytest.approx(
        step["throughput"]["output_tokens_per_s"], rel=0.001)
