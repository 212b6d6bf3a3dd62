"""Wall time to find the knee with one online staircase vs a fixed sweep: ``python -m benchmarks.knee_vs_sweep``.

Protects: finding the knee online costs at most half of what the usual fixed sweep costs (one
separate run per load level, every level up to the maximum, as AIPerf or vLLM's sweep do) at the
same per-point precision (same warm-up, same minimum duration and requests per level).
Reference measured in the same run: the fixed sweep, through the same ``kneecap run`` in
``constant`` mode, level by level. Both target the built-in simulator with a known capacity
(``--slots``). Prints one JSON line per method and one with the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _scenario(folder: str, load: str) -> str:
    path = os.path.join(folder, f"s{time.monotonic_ns()}.yaml")
    with open(path, "w", encoding="utf-8") as f:
        f.write(textwrap.dedent("""
            name: bench
            endpoint: {api: chat, model: sim-tiny}
            workload: {input_tokens: 200, output_tokens: 40}
        """) + load)
    return path


def _run(scenario: str, out: str, slots: int) -> tuple[float, dict]:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "harness.cli", "run", scenario, "--workers", "1", "--out", out,
                    f"--sim-arg=--max-num-seqs={slots}"], cwd=ROOT, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t
    with open(os.path.join(out, "summary.json"), encoding="utf-8") as f:
        return wall, json.load(f)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--slots", type=int, default=8)
    p.add_argument("--step", type=int, default=2)
    p.add_argument("--max-users", type=int, default=24)
    p.add_argument("--warmup-s", type=float, default=1.0)
    p.add_argument("--min-duration-s", type=float, default=4.0)
    p.add_argument("--min-requests", type=int, default=100)
    args = p.parse_args()
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                         check=False).stdout.strip()
    step = (f"step: {{warmup_s: {args.warmup_s}, min_duration_s: {args.min_duration_s}, "
            f"min_requests: {args.min_requests}, max_duration_s: {args.min_duration_s * 5}}}")
    with tempfile.TemporaryDirectory() as tmp:
        stair = _scenario(tmp, f"load: {{users: {{start: {args.step}, step: {args.step}, max: {args.max_users}}},"
                               f" {step}}}\n")
        online_s, summary = _run(stair, os.path.join(tmp, "stair"), args.slots)
        knee = summary["knee"]
        print(json.dumps({"name": "knee_vs_sweep", "method": "online_staircase", "wall_s": round(online_s, 1),
                          "steps": len(summary["steps"]), "knee_users": knee.get("users"),
                          "confirmed": knee.get("confirmed"), "slots": args.slots, "git": rev}), flush=True)
        sweep_s, p99 = 0.0, {}
        for users in range(args.step, args.max_users + 1, args.step):
            constant = _scenario(tmp, f"load: {{mode: constant, users: {users}, duration_s: {args.min_duration_s}, "
                                      f"{step}}}\n")
            wall, s = _run(constant, os.path.join(tmp, f"c{users}"), args.slots)
            sweep_s += wall
            p99[users] = s["steps"][0]["latency_ms"].get("ttft", {}).get("p99")
        print(json.dumps({"name": "knee_vs_sweep", "method": "fixed_sweep", "wall_s": round(sweep_s, 1),
                          "levels": len(p99), "ttft_p99_ms": p99, "git": rev}), flush=True)
        print(json.dumps({"name": "knee_vs_sweep", "ratio_online_vs_sweep": round(online_s / sweep_s, 3),
                          "goal": "<= 0.5", "git": rev}))


if __name__ == "__main__":
    main()
