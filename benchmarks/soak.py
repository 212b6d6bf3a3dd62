"""A soak: ``python -m benchmarks.soak [--minutes 60] [--users 48] [--workers 2] [--every-s 30]``.

Protects (issue 27): over an hour of constant load near the knee, no kneecap process grows. One ``kneecap run``
of constant load (``--users`` on the built-in simulator, preset small: 64 slots, so 48 users sit below its knee
with a queue now and then), 2 workers, the InfluxDB sink on (VictoriaMetrics on loopback, as the tests run it:
the v2 write API), ``--no-report``. Every ``--every-s`` each kneecap process appends its own health to
``soak.jsonl`` (``harness/load/soak.py``: RSS, open descriptors, live greenlets, threads, tracked objects; the
master the request rows it holds, bounded by ``metrics.aggregate.ROWS_CAP``), and this script samples every process
of the run from outside (RSS, descriptors; the simulator too).

Goals, each printed with its figure: every process's RSS grows < 5% from minute 10 to the end (``rss_growth``);
descriptors, greenlets and threads do not grow (last sample against minute 10's, ``fds_growth``, ``greenlets_growth``:
the loop's, ``threads_growth``: those outside gevent's pool, which grows to its size when its work overlaps);
the workers' loop-lag p99 (from the database's ``kneecap_generator`` windows) is flat: the last 5 minutes' median
within 1 ms of minutes 10-15's; and the last 5 minutes' TTFT/TPOT p50 (``kneecap_latency`` windows) equal minutes
5-10's within 10% (what a 5-minute run would have said). One JSON line per process, one for the lag, one for the
figures, one verdict. Not in CI: an hour. ``--minutes 5`` is the short form.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

import psutil

from benchmarks.common import ROOT, git_rev, stop_procs
from harness.procs import free_port

SCENARIO = """name: soak
endpoint: {{api: chat, model: sim-small}}
workload: {{input_tokens: {{dist: lognormal, median: 256, sigma: 0.5}}, output_tokens: {{dist: lognormal, median: 128,
  sigma: 0.5}}}}
load: {{mode: constant, users: {users}, duration_s: {seconds}, step: {{warmup_s: 10}}}}
sinks: {{influxdb: {{url: "{url}", org: kneecap, bucket: kneecap, window_s: 5}}}}
"""


def _victoria(data: str) -> tuple[subprocess.Popen, str]:
    binary = shutil.which("victoria-metrics")
    if binary is None:
        sys.exit("benchmarks.soak: victoria-metrics is not installed (apt-get install victoria-metrics)")
    port = free_port()
    proc = subprocess.Popen([binary, f"-storageDataPath={data}", f"-httpListenAddr=127.0.0.1:{port}",
                             "-retentionPeriod=100y"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            urllib.request.urlopen(url + "/health", timeout=1).read()
            return proc, url
        except OSError:
            time.sleep(0.1)
    stop_procs(proc)
    sys.exit("benchmarks.soak: victoria-metrics did not start")


def _series(url: str, metric: str) -> dict[str, list[tuple[float, float]]]:
    """{label set: [(t, value)]} of one metric."""
    urllib.request.urlopen(url + "/internal/force_flush", timeout=30).read()
    q = urllib.parse.urlencode({"match[]": metric})
    out: dict[str, list[tuple[float, float]]] = {}
    with urllib.request.urlopen(f"{url}/api/v1/export?{q}", timeout=60) as resp:
        for line in resp.read().decode().splitlines():
            d = json.loads(line)
            key = ",".join(f"{k}={v}" for k, v in sorted(d["metric"].items()) if k != "__name__")
            out[key] = sorted(zip((t / 1000 for t in d["timestamps"]), d["values"], strict=True))
    return out


def _between(points: list[tuple[float, float]], a: float, b: float) -> list[float]:
    return [v for t, v in points if a <= t < b]


def _processes(root: psutil.Process, samples: dict[str, list[tuple[float, float, int]]], t: float) -> None:
    for p in root.children(recursive=True):
        try:
            name = " ".join(p.cmdline()[2:6])
            samples.setdefault(f"{p.pid} {name}", []).append((t, p.memory_info().rss / 2**20, p.num_fds()))
        except psutil.Error:
            pass


def _growth(first: float, last: float) -> float:
    return round(100 * (last - first) / first, 2) if first else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=60.0)
    ap.add_argument("--users", type=int, default=48)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--every-s", type=float, default=30.0)
    ap.add_argument("--keep", metavar="FILE", help="copy every process's samples (soak.jsonl) to FILE")
    ap.add_argument("--trace", action="store_true", help="the master traces its allocations from minute 10 "
                    "(slower): its samples name the sites that grew (with --keep)")
    args = ap.parse_args()
    seconds, rev = round(args.minutes * 60), git_rev()
    with tempfile.TemporaryDirectory(prefix="kneecap-soak-") as tmp:
        db, url = _victoria(os.path.join(tmp, "vm"))
        try:
            path = os.path.join(tmp, "soak.yaml")
            with open(path, "w") as f:
                f.write(SCENARIO.format(users=args.users, seconds=seconds, url=url))
            env = {**os.environ, "KNEECAP_SOAK_FILE": os.path.join(tmp, "soak.jsonl"),
                   "KNEECAP_SOAK_EVERY_S": str(args.every_s),
                   **({"KNEECAP_SOAK_TRACE": str(min(600.0, args.minutes * 10))} if args.trace else {})}
            out = os.path.join(tmp, "out")
            started = time.time()
            # the console to a file, read at the end: a pipe nobody reads fills (64 KB) within the hour and the
            # run then blocks writing its status line (found: a 60-minute soak hung at its end)
            console_file = open(os.path.join(tmp, "console.txt"), "w+")  # noqa: SIM115 (closed below)
            run = subprocess.Popen([sys.executable, "-m", "harness.cli", "run", path, "--workers", str(args.workers),
                                    "--out", out, "--no-report"], cwd=ROOT, env=env, stdout=console_file,
                                   stderr=subprocess.STDOUT, text=True)
            outside: dict[str, list[tuple[float, float, int]]] = {}
            me = psutil.Process(run.pid)
            while run.poll() is None:
                _processes(me, outside, time.time() - started)
                time.sleep(args.every_s)
            console_file.seek(0)
            console = console_file.read()
            console_file.close()
            _report(args, rev, started, tmp, outside, url, run.returncode, console)
        finally:
            stop_procs(db)


def _others(sample: dict) -> int:
    """Native threads besides gevent's pool, which grows when its work overlaps, up to its size (0: not sampled)."""
    return sample.get("threads", 0) - sample.get("pool_threads", 0)


def _report(args: argparse.Namespace, rev: str, started: float, tmp: str,
            outside: dict[str, list[tuple[float, float, int]]], url: str, code: int, console: str) -> None:
    t10, end = started + min(600.0, args.minutes * 60 / 6), started + args.minutes * 60
    ok = code == 0
    inside: dict[str, list[dict]] = {}
    if args.keep:
        shutil.copy(os.path.join(tmp, "soak.jsonl"), args.keep)
    with open(os.path.join(tmp, "soak.jsonl")) as f:
        for line in f:
            d = json.loads(line)
            inside.setdefault(f"{d['role']} {d['pid']}", []).append(d)
    for name, rows in sorted(inside.items()):
        after = [r for r in rows if r["t"] >= t10] or rows[-1:]
        first, last = after[0], after[-1]
        line = {"name": "soak_process", "process": name, "samples": len(rows),
                "rss_mb": [first["rss_mb"], last["rss_mb"]], "rss_growth_pct": _growth(first["rss_mb"], last["rss_mb"]),
                "fds_growth": last["fds"] - first["fds"], "greenlets_growth": last["greenlets"] - first["greenlets"],
                "threads_growth": _others(last) - _others(first),
                "pool_threads": [first.get("pool_threads"), last.get("pool_threads")],
                "objects_growth_pct": _growth(first["objects"], last["objects"]),
                **({"rows": [first["rows"], last["rows"]]} if "rows" in last else {}), "git": rev}
        line["ok"] = (line["rss_growth_pct"] < 5 and line["fds_growth"] <= 0 and line["greenlets_growth"] <= 0
                      and line["threads_growth"] <= 0)
        ok &= line["ok"]
        print(json.dumps(line))
    for name, rows in sorted(outside.items()):
        after = [r for r in rows if r[0] >= t10 - started] or rows[-1:]
        print(json.dumps({"name": "soak_process_outside", "process": name, "rss_mb": [round(after[0][1], 1),
                          round(after[-1][1], 1)], "rss_growth_pct": _growth(after[0][1], after[-1][1]),
                          "fds": [after[0][2], after[-1][2]], "git": rev}))
    lag = _series(url, "kneecap_generator_lag_p99_ms")
    early = [v for pts in lag.values() for v in _between(pts, t10, t10 + 300)]
    late = [v for pts in lag.values() for v in _between(pts, end - 300, end)]
    flat = bool(early and late) and abs(statistics.median(late) - statistics.median(early)) < 1.0
    ok &= flat
    print(json.dumps({"name": "soak_lag", "lag_p99_ms_median": [statistics.median(early) if early else None,
                      statistics.median(late) if late else None], "windows": [len(early), len(late)], "ok": flat,
                      "git": rev}))
    figures = {}
    for metric in ("ttft", "tpot"):
        pts = [p for key, s in _series(url, "kneecap_latency_p50").items() if f"metric={metric}" in key for p in s]
        five = _between(pts, started + 300, started + 600)
        tail = _between(pts, end - 300, end)
        if five and tail:
            a, b = statistics.median(five), statistics.median(tail)
            figures[metric] = {"p50_ms": [round(a, 2), round(b, 2)], "change_pct": _growth(a, b),
                               "ok": abs(_growth(a, b)) < 10}
            ok &= figures[metric]["ok"]
    print(json.dumps({"name": "soak_figures", **figures, "git": rev}))
    print(json.dumps({"name": "soak", "minutes": args.minutes, "users": args.users, "workers": args.workers,
                      "exit_code": code, "ok": ok, "console_tail": console.splitlines()[-6:], "git": rev}))


if __name__ == "__main__":
    main()
