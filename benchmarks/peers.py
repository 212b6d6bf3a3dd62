"""CPU per streamed token of whole load-generator process trees: ``python -m benchmarks.peers`` (issue 14).

What is measured: kneecap (``kneecap run`` with one worker by default: itself, a Locust master, the worker), a plain
aiohttp streaming client (client_accuracy.py's vLLM-benchmark-style loop under uvloop, one process) and, when
installed, NVIDIA AIPerf and vLLM's GuideLLM, one after the other against ONE engine for the same workload: N
concurrent closed-loop streams, ~100 prompt tokens, 64 output tokens, T seconds of load. Default engine: the
built-in simulator pinned to core 0 (20 ms iterations: 50 tokens/s per stream); ``--host URL`` for a real one
(e.g. llama.cpp's ``llama-server --metrics``). So users can check the claim "kneecap N µs of CPU per streamed
token, whole tree including start-up".

How: each tool is started in a process group of its own in this session (``harness/procs.py``: a session of its own
is a scheduling group of its own, starved beside a busy engine); this process is a child subreaper
(``PR_SET_CHILD_SUBREAPER``), so every descendant of a tool, even one its parent left behind, is reaped either by
its parent or here; the tool's CPU is the growth of ``getrusage(RUSAGE_CHILDREN)`` (utime+stime of the whole tree,
start-up, tokenizer loading and result writing included) from its start until it and all its leftovers are reaped.
Leftovers still running after the tool's main process exits are stopped (SIGTERM, then SIGKILL). Tokens streamed:
the simulator's ``/sim/stats`` ``tokens_sent``; against ``--host``, the engine's Prometheus counter (vLLM
``vllm:generation_tokens_total``, SGLang ``sglang:generation_tokens_total``, llama.cpp
``llamacpp:tokens_predicted_total``); without one, tokens are unknown and only CPU seconds are printed.

Peer command lines (flags from their docs and ``--help``; GuideLLM's spelling is chosen from its ``--help``):

- AIPerf: ``aiperf profile --model M --url HOST --endpoint-type chat --streaming --concurrency N
  --benchmark-duration T --synthetic-input-tokens-mean 100 --synthetic-input-tokens-stddev 0 --output-tokens-mean 64
  --output-tokens-stddev 0 --extra-inputs ignore_eos:true --extra-inputs min_tokens:64 --tokenizer TOK --ui-type none
  --artifact-dir DIR`` (TOK: ``--aiperf-tokenizer``, default ``builtin``: tiktoken's o200k_base, downloaded once into
  tiktoken's cache, so offline it works only once cached; or a local tokenizer directory: then the line is prefixed
  with ``env -u HF_HUB_OFFLINE -u TRANSFORMERS_OFFLINE``, as AIPerf 0.13 in offline mode looks every tokenizer up in
  the Hugging Face cache and rejects a path as a repo id, while online it loads the directory without the network).
- GuideLLM 0.8 (``guidellm --help`` lists ``run``, no ``benchmark``): ``guidellm run --backend
  kind=openai_http,target=HOST,model=M,extras.body.ignore_eos=true,extras.body.min_tokens=64 --profile
  kind=concurrent,streams=N --constraint kind=max_duration,seconds=T --data
  kind=synthetic_text,prompt_tokens=100,output_tokens=64 --tokenizer kind=hf_auto,model=P --output
  kind=json,path=DIR/guidellm.json --disable-console-interactive`` (it also sends ``max_completion_tokens=64`` and
  ``ignore_eos`` itself for synthetic data with ``output_tokens``).
- Older GuideLLM: ``guidellm benchmark --target HOST --model M --profile concurrent --rate N --max-seconds T
  --data prompt_tokens=100,output_tokens=64 --processor P --output-path DIR/guidellm.json --disable-progress``
  (``--rate-type concurrent`` on versions without ``--profile``). P: ``--guidellm-processor``, default ``gpt2``: a
  Hugging Face tokenizer it downloads once, or a local tokenizer directory (works offline, ``HF_HUB_OFFLINE=1``).

Not installed peers are reported as skipped with their install command (``pip install aiperf``,
``pip install guidellm``); this script never installs them. The aiohttp peer needs aiohttp (``pip install -e
'.[bench]'``) and targets 127.0.0.1 only (client_accuracy's loop), with the model name ``--model``'s default ``bench``
in its bodies (llama.cpp ignores the name; vLLM does not: then it fails and says so).

Goal (issue 14): kneecap's tree spends the least CPU per streamed token of the four. How to read: one JSON line per
tool: ``tree_cpu_s``, ``tokens``, ``us_per_token`` (whole tree, start-up included: it shrinks with ``--seconds``;
compare tools at equal T, N), ``wall_s``, ``exit_code``, ``other_busy_cores`` (CPU used meanwhile by processes other
than the tool and the simulator; tick-sampled; above ~0.2 the line is noisy, a shared machine), then a last line
``peers_summary`` with each tool's µs per token over kneecap's.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

from benchmarks.client_accuracy import _stats
from benchmarks.common import ROOT, busy_jiffies, git_rev
from benchmarks.worker_cost import MODEL, children, proc_cpu, start_sim, write_scenario
from harness.procs import Child, start_child, stop_child

PEERS = ("kneecap", "aiohttp", "aiperf", "guidellm")
INSTALL = {"aiohttp": ".venv/bin/pip install -e '.[bench]' uvloop", "aiperf": "pip install aiperf",
           "guidellm": "pip install guidellm"}
PR_SET_CHILD_SUBREAPER = 36
_COUNTERS = ("vllm:generation_tokens_total", "sglang:generation_tokens_total", "llamacpp:tokens_predicted_total")


def _subreaper() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _help(exe: str, *sub: str) -> str:
    try:
        return subprocess.run([exe, *sub, "--help"], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "COLUMNS": "200"}).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


class Tokens:
    """Cumulative tokens the engine streamed: the simulator's stats, or a Prometheus counter, or None."""

    def __init__(self, host: str, sim_port: int | None) -> None:
        self.host, self.sim_port = host.rstrip("/"), sim_port
        self.source = "sim/stats" if sim_port else None
        if not sim_port:
            text = self._metrics() or ""
            self.source = next((c for c in _COUNTERS if c in text), None)

    def _metrics(self) -> str | None:
        try:
            with urllib.request.urlopen(f"{self.host}/metrics", timeout=10) as r:
                return r.read().decode(errors="replace")
        except (OSError, ValueError):
            return None

    def now(self) -> float | None:
        if self.sim_port:
            return _stats(self.sim_port)["tokens_sent"]
        if not self.source:
            return None
        text = self._metrics() or ""
        vals = [float(m.group(1)) for m in re.finditer(rf"^{re.escape(self.source)}(?:{{[^}}]*}})? (\S+)", text, re.M)]
        return sum(vals) if vals else None


def command(args: argparse.Namespace, peer: str, host: str, tmp: str) -> list[str] | str:
    """The peer's command line, or why it is skipped."""
    n, t, p, o = args.streams, args.seconds, args.prompt_tokens, args.tokens
    if peer == "kneecap":
        return [sys.executable, "-m", "harness.cli", "run", write_scenario(tmp, n, 0, t, o, p, "auto", args.model),
                "--host", host, "--workers", str(args.kneecap_workers), "--out", os.path.join(tmp, "kneecap")]
    if peer == "aiohttp":
        try:
            import aiohttp  # noqa: F401
        except ImportError:
            return f"aiohttp not installed: {INSTALL['aiohttp']}"
        url = urllib.parse.urlsplit(host)
        if url.hostname not in ("127.0.0.1", "localhost") or url.path.strip("/") or args.model != MODEL:
            return "the plain aiohttp loop (client_accuracy.py) targets http://127.0.0.1:PORT with model 'bench' only"
        return [sys.executable, "-m", "benchmarks.client_accuracy", "--load", "aiohttp", str(url.port or 80), str(n),
                "0", str(t), str(o), str(p), os.path.join(tmp, "aiohttp.json")]
    exe = shutil.which(peer)
    if exe is None:
        return f"{peer} not installed: {INSTALL[peer]}"
    if peer == "aiperf":
        out_flag = "--artifact-dir" if "--artifact-dir" in _help(exe, "profile") else "--output-artifact-dir"
        # AIPerf 0.13 loads a tokenizer offline only from the HF cache (snapshot_download: a directory is no repo id);
        # online it loads a local directory as such, without the network: run it without the offline switches.
        online = ["env", "-u", "HF_HUB_OFFLINE", "-u", "TRANSFORMERS_OFFLINE"]
        local = online if os.path.isdir(args.aiperf_tokenizer) else []
        return [*local, exe, "profile", "--model", args.model, "--url", host, "--endpoint-type", "chat", "--streaming",
                "--concurrency", str(n), "--benchmark-duration", f"{t:g}", "--synthetic-input-tokens-mean", str(p),
                "--synthetic-input-tokens-stddev", "0", "--output-tokens-mean", str(o), "--output-tokens-stddev", "0",
                "--extra-inputs", "ignore_eos:true", "--extra-inputs", f"min_tokens:{o}", "--tokenizer",
                args.aiperf_tokenizer, "--ui-type", "none", out_flag, os.path.join(tmp, "aiperf")]
    top = _help(exe)
    if re.search(r"^\s+run\s", top, re.M) and not re.search(r"^\s+benchmark\s", top, re.M):  # 0.8: kind=... options
        return [exe, "run", "--backend", f"kind=openai_http,target={host},model={args.model},"
                f"extras.body.ignore_eos=true,extras.body.min_tokens={o}", "--profile", f"kind=concurrent,streams={n}",
                "--constraint", f"kind=max_duration,seconds={t:g}", "--data",
                f"kind=synthetic_text,prompt_tokens={p},output_tokens={o}", "--tokenizer",
                f"kind=hf_auto,model={args.guidellm_processor}", "--output",
                f"kind=json,path={os.path.join(tmp, 'guidellm.json')}", "--disable-console-interactive"]
    text = _help(exe, "benchmark")
    mode = ["--profile", "concurrent"] if "--profile" in text else ["--rate-type", "concurrent"]
    quiet = ["--disable-progress"] if "--disable-progress" in text else []
    return [exe, "benchmark", "--target", host, "--model", args.model, *mode, "--rate", str(n), "--max-seconds",
            f"{t:g}", "--data", f"prompt_tokens={p},output_tokens={o}", "--processor", args.guidellm_processor,
            "--output-path", os.path.join(tmp, "guidellm.json"), *quiet]


def _leftovers(keep: set[int]) -> list[int]:
    return [pid for pid in children(os.getpid()) if pid not in keep]


def _stop_leftovers(keep: set[int], group: int | None) -> int:
    """SIGTERM, then SIGKILL, every process of the tool's group (its session) and every orphan reparented here
    (but ``keep``); reap them all."""
    if group is not None:
        with contextlib.suppress(OSError):
            os.killpg(group, signal.SIGTERM)
    stopped, end = 0, time.monotonic() + 10
    while pids := _leftovers(keep):
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM if time.monotonic() < end else signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                if os.waitpid(pid, os.WNOHANG)[0]:
                    stopped += 1
        time.sleep(0.1)
    if group is not None:
        with contextlib.suppress(OSError):
            os.killpg(group, signal.SIGKILL)  # a grandchild whose parent is still alive, or a zombie not yet reaped
    return stopped


def run_peer(args: argparse.Namespace, peer: str, cmd: list[str], tokens: Tokens, keep: set[int], tmp: str,
             sim_pid: int | None) -> dict:
    tok0, cpu0, b0, sim0 = tokens.now(), _children_cpu(), busy_jiffies(), proc_cpu(sim_pid) if sim_pid else 0.0
    t0 = time.monotonic()
    child: Child | None = start_child(peer, cmd, os.path.join(tmp, f"{peer}.log"), cwd=ROOT)
    code, timed_out = None, False
    try:
        end = t0 + args.seconds + args.grace
        while True:
            pid, status, _ = os.wait4(child.proc.pid, os.WNOHANG)
            if pid:
                child.proc.returncode = code = os.waitstatus_to_exitcode(status)
                break
            if time.monotonic() > end:
                timed_out = True
                stop_child(child)
                code = child.proc.returncode
                break
            time.sleep(0.05)
    finally:
        left = _stop_leftovers(keep, child.proc.pid)
    wall = time.monotonic() - t0
    tok1, cpu, b1 = tokens.now(), _children_cpu() - cpu0, busy_jiffies()
    sim_cpu = (proc_cpu(sim_pid) or 0.0) - (sim0 or 0.0) if sim_pid else 0.0
    busy = (b1[0] - b0[0]) / max(1, b1[1] - b0[1]) * (os.cpu_count() or 1)
    n_tok = None if tok0 is None or tok1 is None else round(tok1 - tok0)
    return {"name": "peers", "tool": peer, "streams": args.streams, "seconds": args.seconds,
            "prompt_tokens": args.prompt_tokens, "tokens_out": args.tokens, "exit_code": code, "timed_out": timed_out,
            "leftovers_stopped": left, "wall_s": round(wall, 2), "tree_cpu_s": round(cpu, 3), "tokens": n_tok,
            "us_per_token": round(cpu / n_tok * 1e6, 1) if n_tok else None,
            "tokens_per_s": round(n_tok / wall, 1) if n_tok else None,
            "other_busy_cores": round(busy - (cpu + sim_cpu) / wall, 3), "log": child.log,
            "command": " ".join(cmd), "git": args.git}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", help="engine base URL (default: start the built-in simulator)")
    parser.add_argument("--model", default=MODEL, help="model name sent (the simulator serves 'bench')")
    parser.add_argument("--streams", type=int, default=100, help="concurrent streams N")
    parser.add_argument("--seconds", type=float, default=30.0, help="seconds of load T per tool")
    parser.add_argument("--tokens", type=int, default=64, help="output tokens per request")
    parser.add_argument("--prompt-tokens", type=int, default=100)
    parser.add_argument("--iter-ms", type=float, default=20.0, help="simulator iteration (1000/iter = tokens/s)")
    parser.add_argument("--peers", nargs="*", choices=PEERS, default=list(PEERS))
    parser.add_argument("--kneecap-workers", type=int, default=1)
    parser.add_argument("--aiperf-tokenizer", default="builtin")
    parser.add_argument("--guidellm-processor", default="gpt2")
    parser.add_argument("--grace", type=float, default=180.0, help="seconds a tool may take beyond T (start-up, "
                                                                   "tokenizer download, reports) before it is stopped")
    parser.add_argument("--keep", metavar="DIR", help="keep logs and the tools' results in DIR")
    args = parser.parse_args()
    args.git = git_rev()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally blocks that stop our processes
    _subreaper()
    sim = None
    with tempfile.TemporaryDirectory() as scratch:
        tmp = args.keep or scratch
        os.makedirs(tmp, exist_ok=True)
        try:
            if args.host:
                host, port = args.host.rstrip("/"), None
            else:
                sim, port = start_sim(args.streams, args.iter_ms, args.tokens, args.prompt_tokens,
                                      os.path.join(tmp, "sim.log"))
                host = f"http://127.0.0.1:{port}"
            tokens, keep = Tokens(host, port), {sim.proc.pid} if sim else set()
            results = {}
            for peer in args.peers:
                cmd = command(args, peer, host, tmp)
                if isinstance(cmd, str):
                    print(json.dumps({"name": "peers", "tool": peer, "skipped": cmd}), flush=True)
                    continue
                results[peer] = run_peer(args, peer, cmd, tokens, keep, tmp, sim.proc.pid if sim else None)
                results[peer]["tokens_source"] = tokens.source
                print(json.dumps(results[peer]), flush=True)
            base = results.get("kneecap", {}).get("us_per_token")
            per = {k: r["us_per_token"] for k, r in results.items()}
            print(json.dumps({"name": "peers_summary", "us_per_token": per,
                              "over_kneecap": {k: round(r["us_per_token"] / base, 2) for k, r in results.items()
                                               if base and r["us_per_token"]},
                              "kneecap_cheapest": bool(base) and all((r["us_per_token"] or 1e12) >= base
                                                                     for r in results.values()),
                              "git": args.git}), flush=True)
        finally:
            stop_child(sim)
            _stop_leftovers(set(), None)  # nothing of ours outlives this process


if __name__ == "__main__":
    main()
