"""The Locust worker's CPU per streamed event: ``python -m benchmarks.worker_cost`` (issue 14, client cost per token).

What is measured: kneecap's real load path, ``kneecap run SCENARIO --host ... --workers 1`` (a Locust master and ONE
worker process running ``LLMUser``), against the built-in simulator, in two regimes: (a) 8 streams at ~300 tokens/s
each (3.3 ms iterations), (b) 100 streams at 50 tokens/s (20 ms iterations); 100 prompt tokens, 64 output tokens
(fixed, ``ignore_eos``), one token per event. The scenario (written to a temp dir) is a constant load of N users.

How: the simulator is pinned to core 0, ``kneecap run`` and its master to core 0, the worker moved to core 1 as soon
as it appears (``sched_setaffinity``). Once the simulator has sent its first token, a warm-up passes, then over a
window of ``--seconds`` the worker's CPU (utime+stime from /proc/PID/stat) and the tokens the simulator sent
(``/sim/stats`` tokens_sent, cumulative) give µs per event. The whole tree's CPU per token including start-up is
the ``os.wait4`` rusage of ``kneecap run`` (itself, master and worker, each reaped by it) over every token the
simulator sent from launch to exit (report and verdict included). References, same simulator settings and N, on
core 1: client_accuracy.py's raw gevent recv loop that parses nothing (the ceiling) and its aiohttp streaming
loop (vLLM benchmark_serving's, under uvloop), each counting the content events in the same kind of window.

Goals: <= 40 µs per event in both regimes; >= 1.5x aiohttp's events per CPU-second; >= 0.7x the raw loop's.
``--capacity``: streams per worker core at <= 60% CPU: N rises at 50 tokens/s until the worker's CPU share passes
60%; the largest N within it is reported (goal >= 300).

How to read: one JSON line per (stack, regime); the kneecap line carries the ratios (``over_raw``, ``over_aiohttp``:
kneecap's events per CPU-second divided by the reference's) and ``goals_met``. ``continuous_usage`` says whether
kneecap asked usage on every chunk (its default, ``auto``: larger chunks than the references read, which ask usage
only at the end; ``--continuous-usage off`` compares equal bytes). ``other_busy_cores`` is CPU used during the
window by processes other than ours (the simulator, the kneecap tree or the reference): above ~0.2 the line is
noisy (a shared machine), not a regression; it comes from /proc/stat's tick-sampled jiffies, so at light load
it can read a little below zero. ``tree_us_per_token`` depends on the run's length (start-up is
amortised over it): compare it at equal ``--seconds``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

from benchmarks.client_accuracy import _stats
from benchmarks.common import ROOT, busy_jiffies, git_rev, pin
from harness.procs import Child, start_child, stop_child

MODEL = "bench"
REGIMES = {"a": {"streams": 8, "iter_ms": 3.3}, "b": {"streams": 100, "iter_ms": 20.0}}
GOAL_US = 40.0
GOAL_OVER_AIOHTTP = 1.5
GOAL_OVER_RAW = 0.7
CAPACITY_SHARE = 0.6
GOAL_CAPACITY = 300
_TICK = os.sysconf("SC_CLK_TCK")


# -- processes -----------------------------------------------------------------------------------

def proc_cpu(pid: int) -> float | None:
    """utime + stime of a live process (all its threads), seconds; None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _TICK


def children(pid: int) -> list[int]:
    """Live direct children of ``pid`` (from /proc/*/stat)."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(name))
            except (OSError, ValueError, IndexError):
                pass
    return out


def cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace").split("\0")
    except OSError:
        return []


def reap(child: Child, timeout: float) -> tuple[int, float] | None:
    """Wait for ``child`` up to ``timeout`` s with ``os.wait4``: (exit code, CPU s of it and every descendant it
    reaped). None on timeout (still running)."""
    end = time.monotonic() + timeout
    while True:
        pid, status, ru = os.wait4(child.proc.pid, os.WNOHANG)
        if pid:
            child.proc.returncode = os.waitstatus_to_exitcode(status)  # Popen must not wait for it again
            return child.proc.returncode, ru.ru_utime + ru.ru_stime
        if time.monotonic() > end:
            return None
        time.sleep(0.05)


def start_sim(n: int, iter_ms: float, tokens: int, prompt: int, log: str) -> tuple[Child, int]:
    """The built-in simulator pinned to core 0: N slots, iterations of ``iter_ms`` whatever the batch, no prefill
    cost, no jitter, no prefix cache; its port."""
    cmd = [*pin(0), sys.executable, "-m", "harness.cli", "sim", "--port", "0", "--model", MODEL, "--max-num-seqs",
           str(n), "--kv-cache-tokens", str(max(131_072, n * (tokens + prompt) * 2)), "--max-num-batched-tokens",
           str(1 << 16), "--iter-base-ms", f"{iter_ms:g}", "--iter-per-seq-ms", "0", "--iter-per-kv-ktoken-ms", "0",
           "--prefill-per-ktoken-ms", "0", "--jitter", "0", "--prefix-cache", "off"]
    sim = start_child("sim", cmd, log, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    m = re.search(r":(\d+)\s*$", sim.proc.stdout.readline().strip())  # type: ignore[union-attr]
    if not m:
        stop_child(sim)
        raise SystemExit(f"simulator did not start (see {log})")
    return sim, int(m.group(1))


def write_scenario(tmp: str, n: int, warmup: float, duration: float, tokens: int, prompt: int,
                   continuous_usage: str, model: str = MODEL) -> str:
    """A constant load of N closed-loop users (all started at once) for warmup + duration seconds."""
    path = os.path.join(tmp, f"worker-cost-{n}.yaml")
    with open(path, "w") as f:
        f.write(f"name: worker-cost-{n}\n"
                f"endpoint: {{api: chat, model: {json.dumps(model)}, continuous_usage: {continuous_usage}}}\n"
                f"workload: {{input_tokens: {prompt}, output_tokens: {tokens}}}\n"
                f"load: {{mode: constant, users: {n}, spawn_rate: {max(100, 10 * n)}, duration_s: {duration:g}, "
                f"step: {{warmup_s: {warmup:g}}}}}\n")
    return path


def start_kneecap(scenario: str, host: str, out: str, workers: int = 1, core: int | None = 0) -> Child:
    """``kneecap run SCENARIO --host HOST --workers N`` (itself and its children pinned to ``core``)."""
    cmd = [*(pin(core) if core is not None else []), sys.executable, "-m", "harness.cli", "run", scenario, "--host",
           host, "--workers", str(workers), "--out", out]
    return start_child("kneecap", cmd, os.path.join(os.path.dirname(out), os.path.basename(out) + ".console.log"),
                       cwd=ROOT)


def find_worker(run: Child, timeout: float = 60.0) -> int:
    """The PID of the run's (only) Locust worker, once it exists."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if run.proc.poll() is not None:
            raise SystemExit(f"kneecap run ended early (exit {run.proc.returncode}), see {run.log}")
        for pid in children(run.proc.pid):
            if "--worker" in cmdline(pid):
                return pid
        time.sleep(0.02)
    raise SystemExit("no Locust worker appeared")


def wait_tokens(port: int, above: int, timeout: float = 60.0) -> None:
    """Until the simulator has sent more than ``above`` tokens (the load began)."""
    end = time.monotonic() + timeout
    while _stats(port)["tokens_sent"] <= above:
        if time.monotonic() > end:
            raise SystemExit(f"the load did not start within {timeout:g} s")
        time.sleep(0.05)


class Window:
    """CPU of some PIDs, the simulator's tokens and CPU, and the machine's busy jiffies, between two edges."""

    def __init__(self, port: int, pids: list[int]) -> None:
        self.port, self.pids = port, pids
        self.edges: list[tuple[float, dict, dict, tuple[int, int]]] = []

    def edge(self) -> None:
        self.edges.append((time.monotonic(), {p: proc_cpu(p) for p in self.pids}, _stats(self.port), busy_jiffies()))

    def result(self, main: int) -> dict:
        (w0, c0, s0, b0), (w1, c1, s1, b1) = self.edges
        wall = w1 - w0
        ours = sum((c1[p] or 0) - (c0[p] or 0) for p in self.pids)
        sim_cpu = s1["cpu_s"] - s0["cpu_s"]
        busy = (b1[0] - b0[0]) / max(1, b1[1] - b0[1]) * (os.cpu_count() or 1)
        return {"wall_s": round(wall, 3), "events": s1["tokens_sent"] - s0["tokens_sent"],
                "cpu_s": round((c1[main] or 0) - (c0[main] or 0), 3), "sim_cpu_share": round(sim_cpu / wall, 3),
                "other_busy_cores": round(busy - (ours + sim_cpu) / wall, 3)}


# -- measurements --------------------------------------------------------------------------------

def measure_kneecap(args: argparse.Namespace, n: int, iter_ms: float, tmp: str) -> dict:
    """One kneecap run: the worker's window figures and the whole tree's CPU per token including start-up."""
    sim, port = start_sim(n, iter_ms, args.tokens, args.prompt_tokens, os.path.join(tmp, f"sim-kneecap-{n}.log"))
    run = None
    try:
        scenario = write_scenario(tmp, n, args.warmup, args.seconds + 2, args.tokens, args.prompt_tokens,
                                  args.continuous_usage)
        out = os.path.join(tmp, f"kneecap-{n}-{iter_ms:g}")
        tok0, t_launch = _stats(port)["tokens_sent"], time.monotonic()
        run = start_kneecap(scenario, f"http://127.0.0.1:{port}", out)
        worker = find_worker(run)
        if (os.cpu_count() or 1) > 1:
            os.sched_setaffinity(worker, {1})
        master = next((p for p in children(run.proc.pid) if "--master" in cmdline(p)), None)
        try:
            wait_tokens(port, tok0)
        except SystemExit as exc:
            raise SystemExit(f"{exc} (kneecap run's output: {run.log}; --keep DIR keeps it)") from None
        time.sleep(args.warmup)
        win = Window(port, [worker, run.proc.pid, *([master] if master else [])])
        win.edge()
        time.sleep(args.seconds)
        win.edge()
        res = win.result(worker)
        done = reap(run, args.warmup + args.seconds + 120)
        if done is None:
            raise SystemExit(f"kneecap run did not end by itself, see {run.log}")
        code, tree_cpu = done
        tree_wall, tokens = time.monotonic() - t_launch, _stats(port)["tokens_sent"] - tok0
    finally:
        stop_child(run)
        stop_child(sim)
    res.update({"exit_code": code, "tree_cpu_s": round(tree_cpu, 3), "tree_wall_s": round(tree_wall, 2),
                "tree_tokens": tokens, "tree_us_per_token": round(tree_cpu / tokens * 1e6, 1) if tokens else None})
    try:
        with open(os.path.join(out, "summary.json")) as f:
            step = json.load(f)["steps"][0]
        res.update({"loop_lag_p99_ms": step["generator"]["lag_p99_ms"], "requests": step["requests"],
                    "failures": step["requests"] - step["ok"]})
    except (OSError, ValueError, KeyError, IndexError):
        res["summary"] = "missing"
    return res


def measure_reference(args: argparse.Namespace, stack: str, n: int, iter_ms: float, tmp: str) -> dict:
    """client_accuracy.py's load process (``--load raw|aiohttp``) on core 1 against the same simulator settings."""
    sim, port = start_sim(n, iter_ms, args.tokens, args.prompt_tokens, os.path.join(tmp, f"sim-{stack}-{n}.log"))
    load = None
    out = os.path.join(tmp, f"load-{stack}-{n}-{iter_ms:g}.json")
    try:
        load = start_child(stack, [*pin(1), sys.executable, "-m", "benchmarks.client_accuracy", "--load", stack,
                                   str(port), str(n), str(args.warmup), str(args.seconds), str(args.tokens),
                                   str(args.prompt_tokens), out], stdout=subprocess.PIPE, text=True, cwd=ROOT)
        begin = float(load.proc.stdout.readline().split()[1])  # type: ignore[union-attr]
        win = Window(port, [load.proc.pid])
        time.sleep(max(0.0, begin + args.warmup - time.perf_counter()))
        win.edge()
        time.sleep(max(0.0, begin + args.warmup + args.seconds - time.perf_counter()))
        win.edge()
        load.proc.communicate(timeout=60)
        if load.proc.returncode != 0:
            raise SystemExit(f"load process failed: {stack} {n}")
    finally:
        stop_child(load)
        stop_child(sim)
    with open(out) as f:
        own = json.load(f)
    res = win.result(load.proc.pid)
    res.update({"events": own["events"], "cpu_s": round(own["cpu_s"], 3)})  # its own window, its own count
    return res


def line(args: argparse.Namespace, stack: str, regime: str, n: int, iter_ms: float, res: dict) -> dict:
    per_cpu = res["events"] / res["cpu_s"] if res["cpu_s"] else None
    return {"name": "worker_cost", "stack": stack, "regime": regime, "streams": n, "iter_ms": iter_ms,
            "tokens_per_s_per_stream": round(1000 / iter_ms, 1), "tokens": args.tokens,
            "prompt_tokens": args.prompt_tokens, "seconds": args.seconds, "events": res["events"],
            "cpu_s": res["cpu_s"], "us_per_event": round(res["cpu_s"] / res["events"] * 1e6, 2) if res["events"]
            else None, "events_per_cpu_s": round(per_cpu) if per_cpu else None,
            "cpu_share": round(res["cpu_s"] / res["wall_s"], 3), **{k: v for k, v in res.items()
                                                                    if k not in ("events", "cpu_s")},
            "git": args.git}


def regimes(args: argparse.Namespace, tmp: str) -> None:
    for regime in args.regimes:
        n, iter_ms = REGIMES[regime]["streams"], REGIMES[regime]["iter_ms"]
        ref = {}
        for stack in ("raw", "aiohttp"):
            if stack == "aiohttp" and not _have_aiohttp():
                print(json.dumps({"name": "worker_cost", "stack": stack, "regime": regime,
                                  "skipped": "aiohttp not installed: .venv/bin/pip install -e '.[bench]' uvloop"}))
                continue
            ref[stack] = line(args, stack, regime, n, iter_ms, measure_reference(args, stack, n, iter_ms, tmp))
            print(json.dumps(ref[stack]), flush=True)
        out = line(args, "kneecap", regime, n, iter_ms, measure_kneecap(args, n, iter_ms, tmp))
        out["continuous_usage"] = args.continuous_usage
        mine = out["events_per_cpu_s"] or 0
        for stack, r in ref.items():
            out[f"over_{stack}"] = round(mine / r["events_per_cpu_s"], 3) if r["events_per_cpu_s"] else None
        out["goals_met"] = {"us_per_event": (out["us_per_event"] or 1e9) <= GOAL_US,
                            "over_aiohttp": None if "aiohttp" not in ref else (out["over_aiohttp"] or 0)
                            >= GOAL_OVER_AIOHTTP, "over_raw": (out.get("over_raw") or 0) >= GOAL_OVER_RAW}
        print(json.dumps(out), flush=True)


def capacity(args: argparse.Namespace, tmp: str) -> None:
    """Raise N at 50 tokens/s until the worker's CPU share passes 60%; the largest N within it."""
    best, n = None, args.capacity_start
    while n <= args.capacity_max:
        try:
            res = measure_kneecap(args, n, 20.0, tmp)
        except SystemExit as exc:  # a failed step ends the search; what was found so far is still reported
            print(json.dumps({"name": "worker_cost", "stack": "kneecap", "regime": "capacity", "streams": n,
                              "error": str(exc)}), flush=True)
            break
        out = line(args, "kneecap", "capacity", n, 20.0, res)
        out["continuous_usage"] = args.continuous_usage
        out["kept_up"] = out["events"] >= 0.95 * n * 50 * out["wall_s"]  # the worker still reads every event
        print(json.dumps(out), flush=True)
        if out["cpu_share"] > CAPACITY_SHARE or not out["kept_up"]:
            break
        best = n
        n += args.capacity_step
    print(json.dumps({"name": "worker_capacity", "streams_per_worker_core": best, "cpu_share_limit": CAPACITY_SHARE,
                      "tokens_per_s_per_stream": 50, "goal_met": (best or 0) >= GOAL_CAPACITY,
                      "searched_up_to": min(n, args.capacity_max), "git": args.git}), flush=True)


def _have_aiohttp() -> bool:
    try:
        import aiohttp  # noqa: F401
    except ImportError:
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0, help="measured window per configuration")
    parser.add_argument("--warmup", type=float, default=2.0, help="after the first token, before the window")
    parser.add_argument("--tokens", type=int, default=64, help="output tokens per request")
    parser.add_argument("--prompt-tokens", type=int, default=100)
    parser.add_argument("--regimes", nargs="*", choices=sorted(REGIMES), default=sorted(REGIMES))
    parser.add_argument("--continuous-usage", choices=("auto", "on", "off"), default="auto",
                        help="kneecap's endpoint.continuous_usage (auto: its default)")
    parser.add_argument("--capacity", action="store_true", help="also search streams per worker core at <= 60%% CPU")
    parser.add_argument("--capacity-start", type=int, default=100)
    parser.add_argument("--capacity-step", type=int, default=100)
    parser.add_argument("--capacity-max", type=int, default=1000)
    parser.add_argument("--keep", metavar="DIR", help="keep scenarios, logs and kneecap results in DIR")
    args = parser.parse_args()
    args.git = git_rev()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally blocks that stop our processes
    with tempfile.TemporaryDirectory() as scratch:
        tmp = args.keep or scratch
        os.makedirs(tmp, exist_ok=True)
        regimes(args, tmp)
        if args.capacity:
            capacity(args, tmp)


if __name__ == "__main__":
    main()
