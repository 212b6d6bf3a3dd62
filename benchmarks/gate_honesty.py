"""Is the regression gate honest on the simulator? ``python -m benchmarks.gate_honesty [--keep DIR | --reuse DIR]``.

Protects (issue 25): 10 A/A pairs (the same configuration, other seeds) -> 0 called regressed at the default
thresholds; 10 A/B pairs with decode 20% slower per token -> all called regressed on TPOT; and says the smallest
slowdown (of ``--slowdowns``) the gate calls in 3 of 3 repeats. It also measures what ``gate.NOISE_WIDEN`` is
for: the design effect of a closed loop's requests (how much more two A/A runs differ than independent requests
would make them: mean z² of the log-ratio over the intervals' widths, 1 for independent requests).

Every run is a real ``kneecap run`` against the built-in simulator (``sim-tiny``: 8 slots, a knee at 8 users) on
a staircase of 4, 8, 12 users, a few seconds a step, one worker; the simulator's iteration time jitters 5%, its
seed and the workload's differ per run. "Slower per token" scales ``--iter-base-ms`` and ``--iter-per-seq-ms``
(the decode iteration) and leaves prefill alone. ``--keep DIR`` keeps the run folders, ``--reuse DIR`` judges
kept ones again without running (after a change of the gate).

Prints one JSON line per run, per pair and per figure, each with the git revision.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks.common import ROOT, busy_jiffies, git_rev
from harness.capacity.gate import NOISE_WIDEN, gate
from harness.report.validate import as_summary
from harness.spec.gate import DEFAULTS, GateSpec, parse_threshold

BASE_MS, PER_SEQ_MS = 2.0, 0.25  # sim-tiny's decode iteration (harness/sim/presets.py)
SCENARIO = """name: gate-honesty
endpoint: {api: chat, model: sim-tiny}
workload:
  input_tokens: {dist: lognormal, median: 200, sigma: 0.5, min: 16, max: 1000}
  output_tokens: {dist: lognormal, median: 40, sigma: 0.5, min: 8, max: 200}
load:
  mode: staircase
  users: {start: 4, step: 4, max: 12}
  step: {warmup_s: 1, min_duration_s: 4, min_requests: 400, max_duration_s: 10}
"""


def _emit(**fields: object) -> None:
    print(json.dumps({"rev": git_rev(), **fields}), flush=True)


def _run(folder: str, scenario: str, name: str, seed: int, slowdown: float) -> dict:
    out = os.path.join(folder, name)
    if not os.path.exists(os.path.join(out, "summary.json")):
        t, busy0 = time.perf_counter(), busy_jiffies()
        proc = subprocess.run([sys.executable, "-m", "harness.cli", "run", scenario, "--workers", "1", "--out", out,
                               "--seed", str(seed), f"--sim-arg=--seed={seed}", "--sim-arg=--jitter=0.05",
                               f"--sim-arg=--iter-base-ms={BASE_MS * (1 + slowdown):g}",
                               f"--sim-arg=--iter-per-seq-ms={PER_SEQ_MS * (1 + slowdown):g}"],
                              cwd=ROOT, capture_output=True, text=True, check=False)
        busy1 = busy_jiffies()
        cores = (busy1[0] - busy0[0]) / max(1, busy1[1] - busy0[1]) * (os.cpu_count() or 1)
        _emit(name="gate_honesty.run", run=name, seed=seed, slowdown=slowdown, exit_code=proc.returncode,
              wall_s=round(time.perf_counter() - t, 1), machine_busy_cores=round(cores, 2))
        if not os.path.exists(os.path.join(out, "summary.json")):
            raise SystemExit(f"{name}: no summary (exit {proc.returncode})\n{proc.stdout[-1500:]}{proc.stderr[-1500:]}")
    with open(os.path.join(out, "summary.json"), encoding="utf-8") as f:
        return json.load(f)


def _z2(base: dict, new: dict) -> dict[str, list[float]]:
    """Per kind (percentile, rate), z² of each check's log-ratio over its raw intervals (widen 1): mean 1 when
    the intervals' independence assumption holds."""
    out: dict[str, list[float]] = {"percentile": [], "rate": []}
    for c in gate(as_summary(base), as_summary(new), DEFAULTS, widen=1.0).checks:
        b, n = c.base_ci, c.new_ci
        if b is None or n is None or b.hi is None or n.hi is None or min(b.lo, n.lo, b.value, n.value) <= 0 \
                or c.metric == "error_rate":
            continue
        sb, sn = (math.log(b.hi / b.lo) / 3.92, math.log(n.hi / n.lo) / 3.92)
        if sb + sn > 0:
            out["percentile" if c.stat else "rate"].append(math.log(n.value / b.value) ** 2 / (sb * sb + sn * sn))
    return out


def _judge(base: dict, new: dict, spec: GateSpec = DEFAULTS) -> dict:
    result = gate(as_summary(base), as_summary(new), spec)
    tpot = [c for c in result.checks if c.metric == "tpot"]
    return {"verdict": result.verdict, "regressed": [c.name for c in result.regressed],
            "tpot_regressed": sum(c.decision == "regressed" for c in tpot), "tpot_checks": len(tpot),
            "tpot_p50_change": [round(c.change, 3) for c in tpot if c.stat == "p50" and c.change is not None],
            "tpot_p50_detectable": [None if c.detectable is None else round(c.detectable, 3)
                                    for c in tpot if c.stat == "p50"],
            "knee": next(c.why for c in result.checks if c.metric == "knee")}


def _noise_only() -> GateSpec:
    """The defaults with TPOT at +0%: what the noise alone lets the gate call."""
    spec = dict(DEFAULTS.thresholds)
    for stat in ("p50", "p95", "p99"):
        spec["tpot", stat] = parse_threshold("tpot", "+0%", stat)
    return GateSpec(spec)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--slowdowns", default="0.05,0.10,0.15", help="Comma-separated, for the 3-of-3 figure.")
    ap.add_argument("--keep", default=None, help="Keep the run folders here (and reuse any already there).")
    ap.add_argument("--reuse", default=None, help="Judge the run folders kept here; run nothing new.")
    args = ap.parse_args()
    folder = args.reuse or args.keep or tempfile.mkdtemp(prefix="gate-honesty-")
    os.makedirs(folder, exist_ok=True)
    scenario = os.path.join(folder, "scenario.yaml")
    with open(scenario, "w", encoding="utf-8") as f:
        f.write(SCENARIO)
    slowdowns = [float(x) for x in args.slowdowns.split(",")]
    a = [_run(folder, scenario, f"a{i}", 1 + i, 0.0) for i in range(args.pairs)]
    a2 = [_run(folder, scenario, f"a2-{i}", 101 + i, 0.0) for i in range(args.pairs)]
    b20 = [_run(folder, scenario, f"b20-{i}", 201 + i, 0.2) for i in range(args.pairs)]
    z2: dict[str, list[float]] = {"percentile": [], "rate": []}
    aa, aa_back = [], []  # both orders: an A/A "improved" is a regression the other way round
    for i in range(args.pairs):
        aa.append(_judge(a[i], a2[i]))
        aa_back.append(_judge(a2[i], a[i]))
        _emit(name="gate_honesty.aa_pair", pair=i, regressed_reversed=aa_back[-1]["regressed"], **aa[-1])
        for kind, values in _z2(a[i], a2[i]).items():
            z2[kind] += values
    for kind, values in z2.items():
        _emit(name="gate_honesty.design_effect", kind=kind, checks=len(values),
              mean_z2=round(statistics.fmean(values), 2) if values else None,
              median_z2_over_0455=round(statistics.median(values) / 0.455, 2) if values else None,
              share_over_3_84=round(sum(v > 3.84 for v in values) / len(values), 3) if values else None)
    ab = []
    for i in range(args.pairs):
        ab.append(_judge(a[i], b20[i]))
        _emit(name="gate_honesty.ab_pair", pair=i, slowdown=0.2, **ab[-1])
    _emit(name="gate_honesty.summary", widen=NOISE_WIDEN, aa_pairs=args.pairs,
          aa_called_regressed=sum(r["verdict"] == "regressed" for r in aa),
          aa_called_regressed_either_order=sum("regressed" in (r["verdict"], q["verdict"])
                                               for r, q in zip(aa, aa_back, strict=True)), ab_pairs=args.pairs,
          ab_called_regressed_on_tpot=sum(r["tpot_regressed"] > 0 for r in ab),
          aa_tpot_p50_detectable_median=statistics.median(d for r in aa for d in r["tpot_p50_detectable"]
                                                          if d is not None))
    smallest = {"defaults": None, "tpot_at_0pct": None}
    for s in slowdowns:
        runs = [_run(folder, scenario, f"b{round(s * 100)}-{i}", 301 + round(s * 100) * 10 + i, s)
                for i in range(args.repeats)]
        for label, spec in (("defaults", DEFAULTS), ("tpot_at_0pct", _noise_only())):
            judged = [_judge(a[i], runs[i], spec) for i in range(args.repeats)]
            hits = sum(r["tpot_regressed"] > 0 for r in judged)
            _emit(name="gate_honesty.slowdown", slowdown=s, thresholds=label, repeats=args.repeats,
                  called_on_tpot=hits, tpot_p50_change=[r["tpot_p50_change"] for r in judged])
            if hits == args.repeats and smallest[label] is None:
                smallest[label] = s
    _emit(name="gate_honesty.smallest_detected_3_of_3", **smallest, folder=folder)


if __name__ == "__main__":
    main()
