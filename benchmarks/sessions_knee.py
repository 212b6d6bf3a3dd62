"""Sessions against a KV-bound endpoint: the knee as think time grows (`python -m benchmarks.sessions_knee`).

The question behind it (sessions issue): an agent's history survives in the prefix cache only while nothing
evicts it, and a session that thinks longer leaves its blocks free (evictable) longer. Setup: the simulator with
64 slots but a 32k-token KV cache (``--preset tiny --max-num-seqs 64 --kv-cache-tokens 32768``, prefill 100 ms per
1k tokens), 8-turn sessions of 2,500 + 7 × 100 input tokens, 30 output tokens each; a staircase 2, 4, ... 20
users, one worker; the same scenario at each think time. Prints one JSON line per think time: the knee, its
reason, and per step the TTFT p50/p99, the client-side cached share and the agent stall.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

from benchmarks.common import ROOT, git_rev

SCENARIO = """name: kv-knee
endpoint: {{api: chat, model: sim-tiny}}
workload:
  seed: 2
  sessions: {{turns: 8, first_input_tokens: 2500, turn_input_tokens: 100, output_tokens: 30, think_time_s: {think}}}
load:
  mode: staircase
  users: {{start: 2, step: 2, max: 20}}
  step: {{warmup_s: 2, min_duration_s: 10, min_requests: 80, max_duration_s: 20}}
"""
SIM = ["--sim-arg=--preset=tiny", "--sim-arg=--max-num-seqs=64", "--sim-arg=--kv-cache-tokens=32768",
       "--sim-arg=--prefill-per-ktoken-ms=100"]


def run(think: float, tmp: str) -> dict:
    path = os.path.join(tmp, f"k{think}.yaml")
    with open(path, "w") as f:
        f.write(SCENARIO.format(think=think))
    out = os.path.join(tmp, f"out{think}")
    subprocess.run([sys.executable, "-m", "harness.cli", "run", path, "--workers", "1", "--out", out, *SIM],
                   capture_output=True, text=True, timeout=900, cwd=ROOT)
    with open(os.path.join(out, "summary.json")) as f:
        s = json.load(f)
    steps = [{"users": st["users"], "ttft_p50_ms": st["latency_ms"].get("ttft", {}).get("p50"),
              "ttft_p99_ms": st["latency_ms"].get("ttft", {}).get("p99"),
              "cached_share": st["prefix_cache"]["client"].get("cached_share"),
              "agent_stall_s": (st.get("sessions") or {}).get("agent_stall_s")} for st in s["steps"]]
    return {"name": "sessions_knee", "rev": git_rev(), "think_time_s": think, "knee_users": s["knee"].get("users"),
            "knee_reason": s["knee"]["reason"], "steps": steps}


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for think in (0.0, 1.0, 3.0):
            print(json.dumps(run(think, tmp)), flush=True)


if __name__ == "__main__":
    main()
