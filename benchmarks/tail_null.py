"""Tail attribution on a null, end to end: ``python -m benchmarks.tail_null [--runs 20] [--keep DIR]``.

Protects: ``analysis/why/attribute.py`` names no cause when there is none. ``tests/load/test_tail_run.py`` checks
that an injected cause is named; this checks the other side over ``--runs`` real ``kneecap run``s with nothing injected,
and counts the (metric, quantile) attributions whose verdict is "cause" or "time" (false causes by design).

The null, and why it is one. The simulator (preset small, ``--jitter 0.1``: the iteration time's only variation,
its own ``--seed`` per run) is set so that no request feature can change a latency:

- ``--prefill-per-ktoken-ms 0`` and ``--max-num-batched-tokens 65536``: a prompt costs nothing to prefill and is
  never split over iterations, so the prompt lengths can be lognormal (median 200, sigma 0.4; the workload's seed
  differs per run) and ``prompt_tokens`` is really tested, yet is truly no cause. With a real prefill cost a
  longer prompt DOES take longer to its first token: "prompt_tokens" on TTFT would be a true cause, not a false one;
- ``--iter-per-seq-ms 0``, ``--iter-per-kv-ktoken-ms 0``: an iteration costs the same whatever the batch and its
  contexts, so ``in_flight``/``server_waiting`` change nothing;
- the output length is fixed (32 tokens, ``ignore_eos``): ``output_tokens`` is a constant (with lognormal outputs
  a longer answer really makes a longer E2E);
- 64 slots for 8 users: no queue; no stalls, faults or closes; one worker, so ``worker`` is not tested.

One constant step of 8 users, 9 s after a 1 s warm-up (~300 requests, so p99 tails have ~3 requests: "too few";
the p95 tails ~15). The family-wise α of each (metric, quantile) is 0.01 (Holm) and a step has 8 such pairs,
so chance alone names a false cause in at most ~8% of runs (fewer: a cause must also be material).

What cannot be designed away: the machine. The simulator and ``kneecap run`` share its cores, so a hiccup (a
process descheduled, another job on the box) really slows some requests. Such a tail is not a false alarm when
it says so, so each named attribution is checked against the truth, the simulator's trace (``--trace-file``,
server-side times matched to the client's records by response id):

- ``server_hiccups``: iterations that took over 1.6× ``--iter-base-ms`` (6σ of the jitter) while streams ran,
  i.e. the simulator itself was held up (outside noise: a "time" verdict then has something to point at), and
  ``longest_iter_ms``;
- per named attribution, the medians of the tail and of the rest, measured (``tail_ms``, ``rest_ms``) and their
  client part, client latency − server latency (``tail_client_ms``, ``rest_client_ms``); and the same for the
  tail requests each client flag marks (``late_first_client_ms``, ``late_stamps_client_ms``, with their counts).
  A client cause is true (``client_made``) when the requests it names were made late by the client: a flag's own
  tail requests, or for ``send_ms``/``loop_lag_ms`` the whole tail, with a client part ≥ 4× the rest's and ≥ 1 ms.
  On a busy 2-core machine a late read does make a few requests late by an ITL or more (2-13 ms against the rest's
  0.2): judging by the whole tail's median, as this script first did, called those causes false;
  ``client_false`` lists the ones that are.

Per run one JSON line: the named attributions (metric, quantile, verdict, causes, line, tail/rest client_ms,
``client_false``), the step's loop lag and reliability, the server's hiccups. Then one total line: runs with any
named attribution, runs with a request feature named (always false here), runs with a client feature or time named,
runs with a false client cause and those causes, the features by count. Figures, not pass/fail: ``git`` is the
revision; each line is printed as its run ends (~17 s a run).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from itertools import pairwise

from benchmarks.common import ROOT, git_rev

ITER_BASE_MS = 8.0  # preset small's --iter-base-ms (harness/sim/presets.py)
HICCUP = 1.6  # an iteration this many times its base cost: 6 sigma of a 10% jitter, the simulator was held up
SCENARIO = """name: tail-null
endpoint: {{api: chat, model: sim-small}}
workload:
  input_tokens: {{dist: lognormal, median: 200, sigma: 0.4, min: 32, max: 1000}}
  output_tokens: 32
load: {{mode: constant, users: {users}, duration_s: {seconds:g}, step: {{warmup_s: {warmup:g}}}}}
"""
SIM_ARGS = ["--jitter=0.1", "--prefill-per-ktoken-ms=0", "--iter-per-seq-ms=0", "--iter-per-kv-ktoken-ms=0",
            "--max-num-batched-tokens=65536"]
CLIENT = ("send_ms", "loop_lag_ms", "late_stamps", "late_first")  # the causes "client" (tail_features)
CLIENT_FACTOR = 4.0
METRIC_SERVER = {  # metric: the server's own time of it from a trace line (arrival = the request's first byte)
    "ttft_s": lambda t: t["first_token"] - t["arrival"],
    "ttfo_s": lambda t: t["first_token"] - t["arrival"],
    "e2e_s": lambda t: t["finished"] - t["arrival"],
    "tpot_s": lambda t: (t["token_times"][-1] - t["first_token"]) / max(1, len(t["token_times"]) - 1),
}


def server_hiccups(trace: list[dict]) -> tuple[int, float]:
    """Iterations (gaps between successive emission times of the whole engine) longer than ``HICCUP`` × base while
    some stream was between its first and last token (an idle engine's gaps are not iterations); and the longest
    such iteration, ms."""
    times = sorted({x for t in trace for x in t["token_times"]})
    spans = sorted((t["token_times"][0], t["token_times"][-1]) for t in trace if len(t["token_times"]) > 1)
    n, longest, limit = 0, 0.0, HICCUP * ITER_BASE_MS / 1000
    for a, b in pairwise(times):
        if any(s <= a and b <= e for s, e in spans):
            n += b - a > limit
            longest = max(longest, b - a)
    return n, round(1000 * longest, 1)


def client_parts(recs: list[dict], trace: dict[str, dict], metric: str, q: float) -> dict:
    """Medians (ms) of the metric's tail above its ``q`` quantile and of the rest: the measured value and its client
    part (measured − server)."""
    rows = [(r[metric], r[metric] - METRIC_SERVER[metric](trace[r["response_id"]]), r.get("late_chunks") or ())
            for r in recs if r.get(metric) is not None and r.get("response_id") in trace]
    if not rows:
        return {}
    values = sorted(v for v, _, _ in rows)
    bound = values[int(q * (len(values) - 1))]
    tail = [(c, late) for v, c, late in rows if v > bound]
    rest = [c for v, c, _ in rows if v <= bound]
    def med(xs: list[float]) -> float | None:
        return round(1000 * statistics.median(xs), 3) if xs else None

    # the tail requests a late read flagged (late_stamps: any chunk; late_first: the first): their own client part,
    # so a flag that marks the few requests the client did make late is told from one that only rides along
    flagged = {"late_stamps": [c for c, late in tail if late], "late_first": [c for c, late in tail if 0 in late]}
    return {"tail_ms": med([v for v in values if v > bound]), "rest_ms": med([v for v in values if v <= bound]),
            "tail_client_ms": med([c for c, _ in tail]), "rest_client_ms": med(rest),
            **{f"{k}_n": len(v) for k, v in flagged.items()},
            **{f"{k}_client_ms": med(v) for k, v in flagged.items()}}


def client_made(feature: str, parts: dict) -> bool:
    """Did the client make the tail requests a client cause names? A flag's tail requests (``late_stamps``,
    ``late_first``) when their own client part is at least ``CLIENT_FACTOR`` × the rest's and 1 ms; a number's
    (``send_ms``, ``loop_lag_ms``: no flag to pick them by) when the whole tail's is. On a busy machine a late read
    does make a few requests late by an ITL or more: a cause then, not a false alarm."""
    ours = parts.get(f"{feature}_client_ms") if feature in ("late_stamps", "late_first") else parts.get(
        "tail_client_ms")
    rest = parts.get("rest_client_ms") or 0.0
    return ours is not None and ours >= max(1.0, CLIENT_FACTOR * rest)


def one_run(args: argparse.Namespace, i: int, tmp: str) -> dict:
    seed = args.first_seed + i
    out, trace_path, scenario = (os.path.join(tmp, f"{name}-{seed}") for name in ("run", "trace", "s"))
    with open(scenario, "w") as f:
        f.write(SCENARIO.format(users=args.users, seconds=args.seconds, warmup=args.warmup))
    cmd = [sys.executable, "-m", "harness.cli", "run", scenario, "--out", out, "--workers", "1", "--no-report",
           "--save-requests", "--seed", str(seed),
           *(f"--sim-arg={a}" for a in [*SIM_ARGS, f"--seed={seed}", f"--trace-file={trace_path}"])]
    t0 = time.monotonic()
    run = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=args.seconds + args.warmup + 120)
    if run.returncode not in (0, 1, 4):  # 1: no knee (one step), 4: the step was unreliable (still written)
        raise SystemExit(f"kneecap run exited {run.returncode}:\n{run.stdout}\n{run.stderr}")
    with open(os.path.join(out, "summary.json")) as f:
        step = json.load(f)["steps"][0]
    with open(trace_path) as f:
        trace = {t["id"]: t for t in map(json.loads, f) if t["status"] == "ok"}
    with open(os.path.join(out, "requests.jsonl")) as f:
        recs = [r for r in map(json.loads, f) if r.get("phase") == "measure" and r.get("ok")]
    named = []
    for a in step["tail"]["attributions"]:
        if a["verdict"] in ("cause", "time"):
            parts = client_parts(recs, trace, a["metric"], a["quantile"])
            named.append({"metric": a["metric"], "quantile": a["quantile"], "verdict": a["verdict"],
                          "causes": a["causes"], "line": a["line"], **parts,
                          "client_false": [c for c in a["causes"] if c in CLIENT and not client_made(c, parts)]})
    gen = step.get("generator") or {}
    verdicts = Counter(a["verdict"] for a in step["tail"]["attributions"])
    return {"name": "tail_null", "seed": seed, "requests": step.get("requests"), "seconds": round(time.monotonic()
            - t0, 1), "verdicts": dict(verdicts), "named": named, "n_named": len(named),
            "request_feature_named": any(c not in (*CLIENT, "t_in_step_s") for n in named for c in n["causes"]),
            **dict(zip(("server_hiccups", "longest_iter_ms"), server_hiccups(list(trace.values())), strict=True)),
            "lag_p99_ms": gen.get("lag_p99_ms"),
            "reliable": gen.get("reliable"), "exit": run.returncode, "git": args.git}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--first-seed", type=int, default=1)
    p.add_argument("--users", type=int, default=8)
    p.add_argument("--seconds", type=float, default=9.0)
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--keep", metavar="DIR", help="keep the runs' folders and traces in DIR")
    args = p.parse_args(argv)
    args.git = git_rev()
    lines = []
    with tempfile.TemporaryDirectory() as scratch:
        tmp = args.keep or scratch
        os.makedirs(tmp, exist_ok=True)
        for i in range(args.runs):
            lines.append(one_run(args, i, tmp))
            print(json.dumps(lines[-1], ensure_ascii=False), flush=True)
    features = Counter(c for ln in lines for n in ln["named"] for c in n["causes"])
    print(json.dumps({
        "name": "tail_null_total", "runs": len(lines), "pairs_per_run": 8, "alpha_per_pair": 0.01,
        "expected_runs_by_chance_at_most": round(0.08 * len(lines), 1),
        "runs_with_any_named": sum(ln["n_named"] > 0 for ln in lines),
        "named_attributions": sum(ln["n_named"] for ln in lines),
        "runs_with_request_feature_named": sum(ln["request_feature_named"] for ln in lines),
        "runs_with_client_named": sum(any(c in CLIENT for n in ln["named"] for c in n["causes"]) for ln in lines),
        "runs_with_false_client_cause": sum(any(n["client_false"] for n in ln["named"]) for ln in lines),
        "false_client_causes": dict(Counter(c for ln in lines for n in ln["named"] for c in n["client_false"])),
        "runs_with_time_named": sum(any(n["verdict"] == "time" for n in ln["named"]) for ln in lines),
        "runs_with_server_hiccups": sum(ln["server_hiccups"] > 0 for ln in lines),
        "runs_unreliable": sum(ln["reliable"] is False for ln in lines),
        "features_named": dict(features.most_common()), "git": args.git,
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}), flush=True)


if __name__ == "__main__":
    main()
