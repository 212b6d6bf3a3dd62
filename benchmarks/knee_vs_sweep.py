"""Wall time and knee of a knee search, the staircase and a fixed sweep: ``python -m benchmarks.knee_vs_sweep``.

Protects: ``load.mode: search`` finds the knee in at most a quarter of a fixed sweep's wall time, within one
resolution of the sweep's knee, on every configuration, and no worse than the staircase's. Each configuration is a
built-in simulator with a known capacity (``--max-num-seqs``; knees low, middle and high in the range), one whose
server publishes no /metrics (``endpoint.metrics: off``: the search predicts from Little's law only) and one open
loop (requests/s). Every method runs through the same ``kneecap run`` with the same step block:

- **sweep**: every level of the grid, one step each (a staircase that never stops early: ``confirm_steps`` past
  the grid), in one process, so no per-level start-up is counted against it; its knee is the same ``find_knee``;
- **staircase**: kneecap's staircase at ``step = resolution``, stopping once the knee is confirmed;
- **search**: ``mode: search`` (``open_search``) over the same grid.

Prints one JSON line per method and configuration, then one per configuration with the ratios and whether the goal
holds. ``--rounds N`` repeats the search (the sweep and the staircase run once: their plans are fixed, their wall
time is the levels they visit) and gives its spread.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIM = ["--preset", "tiny"]
CONFIGS = {
    # name: (loop, the simulator's slots, endpoint.metrics)
    "low": ("closed", 8, "auto"),
    "middle": ("closed", 40, "auto"),
    "high": ("closed", 100, "auto"),
    "middle-no-metrics": ("closed", 40, "off"),
    "open": ("open", 16, "auto"),
}


def _scenario(folder: str, name: str, load: str, metrics: str) -> str:
    path = os.path.join(folder, f"{name}-{time.monotonic_ns()}.yaml")
    with open(path, "w", encoding="utf-8") as f:
        f.write("name: bench\n"
                f"endpoint: {{api: chat, model: sim-tiny, metrics: {metrics}}}\n"
                "workload: {input_tokens: 200, output_tokens: 40}\n" + load)
    return path


def _load(method: str, loop: str, args: argparse.Namespace) -> str:
    key = "users" if loop == "closed" else "rate"
    lo, hi, res = (args.min, args.max, args.resolution) if loop == "closed" else (args.rate_min, args.rate_max,
                                                                                 args.rate_resolution)
    step = (f"step: {{warmup_s: {args.warmup_s}, min_duration_s: {args.min_duration_s}, "
            f"min_requests: {args.min_requests}, max_duration_s: {args.max_duration_s}}}")
    if method == "search":
        mode = "search" if loop == "closed" else "open_search"
        return f"load: {{mode: {mode}, {key}: {{min: {lo}, max: {hi}, resolution: {res}}}, {step}}}\n"
    mode = "staircase" if loop == "closed" else "open_staircase"
    confirm = 10_000 if method == "sweep" else 1
    return (f"load: {{mode: {mode}, {key}: {{start: {lo}, step: {res}, max: {hi}}}, {step}, "
            f"knee: {{confirm_steps: {confirm}}}}}\n")


def _run(scenario: str, out: str, slots: int, args: argparse.Namespace) -> tuple[float, dict]:
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "run", scenario, "--workers", "1", "--out", out,
                           f"--sim-arg=--max-num-seqs={slots}", f"--sim-arg=--iter-base-ms={args.iter_base_ms}",
                           f"--sim-arg=--iter-per-seq-ms={args.iter_per_seq_ms}"],
                          cwd=ROOT, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t
    path = os.path.join(out, "summary.json")
    if not os.path.exists(path):
        raise SystemExit(f"no summary from {scenario}: exit {proc.returncode}\n{proc.stdout[-2000:]}\n"
                         f"{proc.stderr[-2000:]}")
    with open(path, encoding="utf-8") as f:
        return wall, json.load(f)


def _knee(summary: dict) -> float | None:
    knee = summary["knee"]
    return (knee.get("users") if "users" in knee else knee.get("rate_rps")) if knee["found"] else None


def _sweep_knee(summary: dict) -> float | None:
    """The sweep's knee by the staircase's own judging with one confirming step (its run asked for none)."""
    from harness.analysis.knee import KneeParams, StepPoint, find_knee

    points = []
    for s in summary["steps"]:
        lat = s["latency_ms"].get("ttft", {})
        p99 = lat.get("p99_slo", lat.get("p99"))
        if p99 is None or s["fleet_changed"]:
            continue
        p99 = float("inf") if p99 == "inf" else p99
        ci = lat.get("p99_ci")
        points.append(StepPoint(s["index"], s.get("users", s.get("rate_rps")), p99, tuple(ci) if ci else None,
                                s["throughput"]["output_tokens_per_s"], s["generator"]["reliable"]))
    knee = find_knee(points, KneeParams(confirm_steps=1))
    return knee.load if knee.found else None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated: " + ", ".join(CONFIGS))
    p.add_argument("--min", type=int, default=2)
    p.add_argument("--max", type=int, default=128)
    p.add_argument("--resolution", type=int, default=2)
    p.add_argument("--rate-min", type=float, default=2.0)
    p.add_argument("--rate-max", type=float, default=64.0)
    p.add_argument("--rate-resolution", type=float, default=2.0)
    p.add_argument("--iter-base-ms", type=float, default=10.0, help="the simulator's fixed cost per iteration")
    p.add_argument("--iter-per-seq-ms", type=float, default=0.02,
                   help="its added cost per decoding sequence: small, as memory-bound decode is (below capacity "
                        "throughput grows with the load, as on a real engine)")
    p.add_argument("--warmup-s", type=float, default=1.0)
    p.add_argument("--min-duration-s", type=float, default=5.0)
    p.add_argument("--min-requests", type=int, default=100)
    p.add_argument("--max-duration-s", type=float, default=20.0)
    p.add_argument("--rounds", type=int, default=1, help="searches per configuration")
    p.add_argument("--search-only", action="store_true", help="skip the sweep and the staircase")
    args = p.parse_args()
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                         check=False).stdout.strip()
    for name in args.configs.split(","):
        loop, slots, metrics = CONFIGS[name]
        res = args.resolution if loop == "closed" else args.rate_resolution
        found: dict[str, list[tuple[float, float | None, int]]] = {}
        with tempfile.TemporaryDirectory() as tmp:
            methods = ["search"] * args.rounds + ([] if args.search_only else ["staircase", "sweep"])
            for i, method in enumerate(methods):
                sc = _scenario(tmp, name, _load(method, loop, args), metrics)
                wall, summary = _run(sc, os.path.join(tmp, f"{method}{i}"), slots, args)
                knee = _sweep_knee(summary) if method == "sweep" else _knee(summary)
                found.setdefault(method, []).append((wall, knee, len(summary["steps"])))
                line = {"name": "knee_vs_sweep", "config": name, "method": method, "wall_s": round(wall, 1),
                        "steps": len(summary["steps"]), "knee": knee, "confirmed": summary["knee"]["confirmed"],
                        "stop": summary["stop_reason"], "slots": slots, "git": rev}
                if method == "search":
                    line["path"] = [e["level"] for e in summary.get("search", {}).get("path", [])]
                print(json.dumps(line), flush=True)
        if "sweep" not in found:
            continue
        sweep_s, sweep_knee, _ = found["sweep"][0]
        stair_s, stair_knee, _ = found["staircase"][0]
        ratios = [round(w / sweep_s, 3) for w, _, _ in found["search"]]
        knees = [k for _, k, _ in found["search"]]
        within = [k is not None and sweep_knee is not None and abs(k - sweep_knee) <= res + 1e-9 for k in knees]
        no_worse = [stair_knee is None or sweep_knee is None or (k is not None and
                    abs(k - sweep_knee) <= abs(stair_knee - sweep_knee) + 1e-9) for k in knees]
        print(json.dumps({"name": "knee_vs_sweep", "config": name, "ratio_search_vs_sweep": ratios,
                          "ratio_staircase_vs_sweep": round(stair_s / sweep_s, 3), "knee_sweep": sweep_knee,
                          "knee_staircase": stair_knee, "knee_search": knees, "resolution": res,
                          "goal": "search <= 0.25x the sweep, knee within 1 resolution of the sweep's, no worse "
                                  "than the staircase's",
                          "goal_met": all(r <= 0.25 for r in ratios) and all(within) and all(no_worse),
                          "git": rev}), flush=True)


if __name__ == "__main__":
    main()
