"""Each API end to end: real simulator, master and worker processes, the simulator's trace as ground truth."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.integration


def run(tmp_path, scenario: str, *sim_args: str, save: bool = True) -> tuple[dict, list[dict], str]:
    path = tmp_path / "s.yaml"
    path.write_text(textwrap.dedent(scenario))
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "run", str(path), "--workers", "1", "--out", str(out),
                           *(["--save-requests"] if save else []), *(f"--sim-arg={a}" for a in sim_args)],
                          capture_output=True, text=True, timeout=180)
    summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else {}
    saved = out / "requests.jsonl"
    records = [json.loads(line) for line in saved.read_text().splitlines()] if saved.exists() else []
    return summary, records, proc.stdout + proc.stderr


def test_a_request_response_endpoint_gets_e2e_usage_and_a_knee_on_e2e(tmp_path):
    summary, records, output = run(tmp_path, """
        name: not-streaming
        endpoint: {api: chat, model: sim-tiny, stream: false}
        workload: {input_tokens: 200, output_tokens: 30}
        load:
          mode: staircase
          users: {start: 2, step: 2, max: 4}
          step: {warmup_s: 0.5, min_duration_s: 3, min_requests: 10, max_duration_s: 4}
        slo: {e2e: ["p(95)<5000"]}
    """, "--preset=tiny")
    assert summary["knee"]["metric"] == "e2e", output[-2000:]
    assert records and all(r["ok"] and r["ttft_s"] is None and r["output_tokens"] == 30 for r in records)
    lat = summary["steps"][0]["latency_ms"]
    assert "ttft" not in lat and lat["e2e"]["count"] > 0 and lat["headers"]["count"] > 0
    assert summary["exit_code"] == 0
