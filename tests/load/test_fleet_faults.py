"""Fleet faults with real processes: a worker joins a running staircase, later dies by SIGKILL; the master says so,
marks the steps, re-runs their levels, ends by itself with exit 5 (DEGRADED), and counts exactly what was delivered."""

from __future__ import annotations

import json
import signal
import subprocess
import textwrap

import pytest

from tests.kit.fleet import LOCUST, SHAPE
from tests.kit.procs import Lines, free_port
from tests.kit.sim import start_sim

pytestmark = pytest.mark.integration


def test_a_worker_joins_then_dies_and_the_run_says_so(tmp_path):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(textwrap.dedent("""
        name: fleet-faults
        endpoint: {api: chat, model: sim-tiny}
        workload: {input_tokens: {dist: uniform, min: 20, max: 60}, output_tokens: {dist: uniform, min: 5, max: 20}}
        load:
          users: {start: 2, step: 2, max: 8}
          step: {warmup_s: 1, min_duration_s: 5, min_requests: 20, max_duration_s: 20}
    """))
    results = tmp_path / "out"
    port = free_port()
    with start_sim("--preset", "tiny") as sim:
        master = subprocess.Popen(
            [*LOCUST[:-1], f"{LOCUST[-1]},{SHAPE}", "--headless", "--master", "--expect-workers", "1",
             "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port), "--scenario", str(scenario),
             "--host", sim.url, "--results-dir", str(results), "--save-requests", str(results / "requests.jsonl")],
            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        worker = [*LOCUST, "--worker", "--master-host", "127.0.0.1", "--master-port", str(port)]
        first = subprocess.Popen(worker, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        late = None
        lines = Lines(master.stdout)  # type: ignore[arg-type]
        try:
            lines.wait_for("kneecap: step 1:", timeout=60)
            with open(tmp_path / "late.log", "w") as late_log:
                late = subprocess.Popen(worker, cwd=tmp_path, stdout=late_log, stderr=subprocess.STDOUT)
            lines.wait_for("joined during step", timeout=30)
            lines.wait_for("kneecap: step 3:", timeout=60)
            late.send_signal(signal.SIGKILL)
            lines.wait_for("lost (no heartbeat, or it quit) during step", timeout=30)
            master.wait(timeout=120)
            lines.join()
        finally:
            for p in (master, first, late):
                if p is not None and p.poll() is None:
                    p.kill()
                    p.wait()
    text = lines.text()
    assert "Traceback" not in text, text[-3000:]
    summary = json.loads((results / "summary.json").read_text())
    assert master.returncode == 5 == summary["exit_code"] and summary["degraded"], text[-2000:]
    events = summary["fleet_events"]
    assert len(events) == 2, (events, text[-3000:])  # the late worker joined, then was lost: nothing else
    joined, lost = events
    assert (joined["kind"], lost["kind"]) == ("joined", "lost") and joined["worker"] == lost["worker"]
    steps = summary["steps"]
    for event in (joined, lost):
        hit = [s for s in steps if s["index"] in event["steps"]]
        assert hit and all(s["fleet_changed"] and s["slo_passed"] is None for s in hit)
        assert steps[max(event["steps"]) + 1]["users"] == hit[0]["users"]  # re-run from the earliest level it hit
    assert sorted(s["users"] for s in steps if not s["fleet_changed"]) == [2, 4, 6, 8]  # each level judged once
    assert summary["stop_reason"].startswith("plan complete")
    records = [json.loads(line) for line in (results / "requests.jsonl").read_text().splitlines()]
    in_steps = [r for r in records if r["step"] < len(steps)]
    assert sum(s["requests"] + s["warmup_requests"] for s in steps) == len(in_steps) > 0
    assert len({r["worker"] for r in records}) == 2  # both workers delivered
    # The late worker's first users start as it connects (Locust rebalances at once): their records belong to the
    # step under way, which the join marked, never to step 0 (the step a worker starts in before it is told).
    assert min(r["step"] for r in records if r["worker"] == 1) >= min(joined["steps"]) >= 1
    late_text = (tmp_path / "late.log").read_text()
    assert "Unknown message type" not in late_text and "has not said which step" not in late_text, late_text[-2000:]
