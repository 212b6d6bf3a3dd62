"""A/A for ``verify:``: on a server whose greedy answers never change (the built-in simulator), no answer may read as
changed, whatever the seed. Runs ``kneecap run --seed S`` for seeds 1..N (lognormal prompt and answer lengths,
8 users, half the requests re-asks) and prints each seed's compared and changed answers, then the total.

Not a CI test: 20 runs take ~2 minutes. ``python -m benchmarks.verify_aa [--seeds N]``."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

from benchmarks.common import ROOT, git_rev

SCENARIO = """name: verify-aa
endpoint: {api: chat, model: sim-tiny}
workload:
  input_tokens: {dist: lognormal, median: 200, sigma: 0.8, min: 8, max: 2000}
  output_tokens: {dist: lognormal, median: 40, sigma: 0.6, min: 4, max: 200}
load: {mode: constant, users: 8, duration_s: 3, step: {warmup_s: 0.5}}
verify: {share: 0.5, prompts: 8}
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=20)
    args = ap.parse_args()
    compared = changed = 0
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "aa.yaml")
        with open(path, "w") as f:
            f.write(SCENARIO)
        for seed in range(1, args.seeds + 1):
            out = os.path.join(tmp, f"s{seed}")
            done = subprocess.run([sys.executable, "-m", "harness.cli", "run", path, "--seed", str(seed), "--out", out,
                                   "--no-report"], cwd=ROOT, capture_output=True, text=True, check=False)
            with open(os.path.join(out, "summary.json")) as f:
                v = json.load(f)["steps"][0].get("verify") or {}
            compared, changed = compared + v.get("verified", 0), changed + v.get("changed", 0)
            print(json.dumps({"seed": seed, "exit": done.returncode, "verified": v.get("verified"),
                              "changed": v.get("changed")}))
    print(json.dumps({"name": "verify_aa", "seeds": args.seeds, "verified": compared, "changed": changed,
                      "ok": changed == 0, "git": git_rev()}))


if __name__ == "__main__":
    main()
