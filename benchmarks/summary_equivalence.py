"""A refactor changes no answer: the same ``kneecap run`` at two revisions gives summaries equal on every field
that does not depend on timing.

Usage: ``python -m benchmarks.summary_equivalence [--base REV] [--runs N]`` (default base: the run-model
redesign's starting point, 681365f). It checks the base revision out into a temporary worktree, runs the
same scenario with the same seeds from both trees (one after the other, on this venv's
Python; odd seeds a constant load, even ones a staircase past the knee), and compares:

- the shape of summary.json: every key path (list positions collapsed), so no field appears or goes;
- every value that does not depend on timing: schema, scenario, model, host, mode, workers, the knee's metric,
  the SLO thresholds, exit code, stop reason's kind, fleet events, per step its level, failures' classes,
  and per request what the simulator decides (input and output tokens per request: fixed lengths);
- what does depend on timing (request counts, latencies, throughput) is printed side by side, not compared.

Prints one JSON line per run pair and exits 1 on any difference. Not part of the test run (it takes ~1 min).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap

from benchmarks.common import ROOT, git_rev

BASE = "681365f"
SCENARIO = textwrap.dedent("""
    name: equivalence
    endpoint: {api: chat, model: sim-tiny, timeouts: {ttft_s: 20, idle_s: 10}, extra_body: {ignore_eos: true}}
    workload: {input_tokens: 100, output_tokens: 20}
    load:
      mode: constant
      users: 4
      duration_s: 6
      step: {warmup_s: 1, min_duration_s: 2, min_requests: 10, max_duration_s: 6}
    slo: {ttft: ["p(95)<5000"]}
""")
STAIRS = SCENARIO.split("\nload:")[0] + textwrap.dedent("""
    load:
      users: {start: 2, step: 4, max: 14}
      step: {warmup_s: 0.5, min_duration_s: 2, min_requests: 60, max_duration_s: 4}
    slo: {ttft: ["p(95)<5000"]}
""")
"""A staircase past the simulator's 8 slots (``--max-num-seqs=8``): a knee, its reason, tails and TTFT splits."""
TIMING = {"started_at", "ended_at", "run_id", "latency_ms", "throughput", "tokens_per_s_per_user", "requests", "ok",
          "warmup_requests", "duration_s", "generator", "server", "ttft_split", "tail", "output_tokens_counted",
          "prompt_length_error", "new_connections", "new_connection_share", "stationary", "complete", "knee",
          "processes", "clocks", "prefix_cache", "cost", "at", "observed", "exact_chunk_counts", "count",
          "length_asked", "streams", "receives", "timeline", "chunks_per_receive", "on_time_chunks_per_receive"}
"""Fields whose values depend on timing (counts of requests or samples, latencies, ports, worker ids)."""
TIMED_KEYS = ("steps[].ttft_split.",)
"""Blocks where a ``note`` is there or not by timing: a TTFT part's figure that came out negative says why."""


def key_paths(value: object, prefix: str = "") -> set[str]:
    if isinstance(value, dict):
        out = {prefix} if prefix else set()
        for k, v in value.items():
            name = "WORKER" if prefix == "clocks" else str(k)  # keyed by worker id, new each run
            out |= key_paths(v, f"{prefix}.{name}" if prefix else name)
        return out
    if isinstance(value, list):
        return set().union(*(key_paths(v, prefix + "[]") for v in value)) if value else {prefix + "[]"}
    return set() if prefix.endswith(".note") and prefix.startswith(TIMED_KEYS) else {prefix}


def stable(value: object) -> object:
    """The summary without what depends on timing."""
    if isinstance(value, dict):
        return {k: stable(v) for k, v in value.items() if k not in TIMING}
    if isinstance(value, list):
        return [stable(v) for v in value]
    return value


def run(tree: str, scenario: str, out: str, seed: int) -> dict:
    env = dict(os.environ, PYTHONPATH=tree)
    subprocess.run([sys.executable, "-m", "harness.cli", "run", scenario, "--seed", str(seed), "--out", out,
                    "--workers", "1", "--save-requests", "--sim-arg=--max-num-seqs=8"],
                   cwd=tree, env=env, capture_output=True, text=True, timeout=180, check=False)
    with open(os.path.join(out, "summary.json")) as f:
        summary = json.load(f)
    with open(os.path.join(out, "requests.jsonl")) as f:
        tokens = sorted({(r.get("prompt_tokens"), r.get("output_tokens")) for r in map(json.loads, f) if r.get("ok")})
    summary["_tokens_per_request"] = tokens
    summary["stop_reason"] = (summary.get("stop_reason") or "").split(":")[0]
    summary["host"] = re.sub(r":\d+$", ":PORT", summary["host"])  # the simulator's free port
    return summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", default=BASE)
    ap.add_argument("--runs", type=int, default=2)
    args = ap.parse_args()
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        base = os.path.join(tmp, "base")
        subprocess.run(["git", "worktree", "add", "--detach", base, args.base], cwd=ROOT, check=True,
                       capture_output=True)
        try:
            for seed in range(1, args.runs + 1):
                scenario = os.path.join(tmp, f"s{seed}.yaml")
                with open(scenario, "w") as f:
                    f.write(SCENARIO if seed % 2 else STAIRS)
                a = run(base, scenario, os.path.join(tmp, f"a{seed}"), seed)
                b = run(ROOT, scenario, os.path.join(tmp, f"b{seed}"), seed)
                missing, extra = sorted(key_paths(a) - key_paths(b)), sorted(key_paths(b) - key_paths(a))
                diff = sorted(k for k in set(stable(a)) | set(stable(b)) if stable(a).get(k) != stable(b).get(k))
                ok = not (missing or extra or diff)
                failed |= not ok
                print(json.dumps({"name": "summary_equivalence", "base": args.base, "head": git_rev(), "seed": seed,
                                  "scenario": "constant" if seed % 2 else "staircase", "knee": [a["knee"], b["knee"]],
                                  "equal": ok, "keys_only_in_base": missing, "keys_only_in_head": extra,
                                  "values_differ": {k: [stable(a).get(k), stable(b).get(k)] for k in diff},
                                  "requests": [a["steps"][0]["requests"], b["steps"][0]["requests"]],
                                  "ttft_p50_ms": [a["steps"][0]["latency_ms"]["ttft"]["p50"],
                                                  b["steps"][0]["latency_ms"]["ttft"]["p50"]]}))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", base], cwd=ROOT, check=False, capture_output=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
