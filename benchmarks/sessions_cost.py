"""What sessions cost the client: ``python -m benchmarks.sessions_cost``.

Goals (sessions issue): (1) a worker streaming sessions handles >= 90% of the events per CPU-second it handles
streaming independent single requests; (2) a live session at a 100k-token context holds < 1 MB beyond the text
of its messages; (3) building the next prompt of a 100k-token history (``Session.next_turn`` + ``build_body``)
takes < 2 ms.

(1) Method, as ``client_accuracy``: the simulator on core 0 and one load process on core 1, gevent-patched as
under Locust, with N closed-loop greenlets (16 and 64) on kneecap's real client path (``Connection``,
``build_body``/``request_head``, ``stream_request``); a warm-up, then a measured window; CPU is the load
process's ``time.process_time()`` over the window; events are the content chunks received inside it
(``chunk_times``). "off": each greenlet sends independent requests (``PromptBuilder.build`` of 1000 tokens, 100
output tokens, ``ignore_eos``, ``keep_text=False``). "on": each greenlet runs 8-turn sessions (first message
1000 tokens, each turn 100 new tokens and a 100-token answer, think time 0) as ``harness.load.user`` does:
``next_turn``, the body from the call's messages, ``stream_request(keep_text=True)``, ``answer`` with the
streamed text. Greenlet i starts its first session ``i mod 8`` turns in (with stand-in answers), so the window
sees every turn index equally from its first second instead of all sessions in step at turn 1. Both prompt
builders run per request (the off mode too: that is the harness's path). The simulator streams both modes at
the same rate (20 ms iterations, prefill and per-sequence costs 0, room for every stream), so events per
CPU-second compare the client's work only. ``prompt_cpu_share`` and ``body_cpu_share`` are the shares of the
window's CPU spent building the prompt (``PromptBuilder.build`` / ``next_turn``) and encoding the body
(``build_body``, JSON of a prompt that grows to ~2.4k tokens in the sessions); ``on_over_off`` is the ratio
to the off line of the same N in the same run.

(2) In-process, no server: 20 sessions grown to >= 100k tokens (1000-token turns, 200-token answers, the
reported prompt_tokens fed back each turn) under ``tracemalloc``; the traced bytes per session minus the bytes
of its distinct message content strings (``sys.getsizeof``) is what the session costs beyond its text.

(3) The same sessions, 50 more turns among them: median wall time of ``next_turn()`` and of ``build_body`` of
its first call (and of their sum), with the garbage collector on as in a run.

One JSON line per configuration; ``other_busy_cores`` is CPU used by processes other than ours (a busy machine
invalidates the line).

Figures (three runs, 2026-11, 2-core dev box, rev 120e40d): on/off 0.99-1.09 at 16 streams and 0.95-1.01 at
64, i.e. within run-to-run noise (~5%: the load process uses 3-8% of its core, 0.5-1.2 CPU-s per window).
21-23k events per CPU-second at 16 streams, 40-43k at 64 (per-wakeup costs spread over bigger bursts). The
sessions' larger bodies (10.8 KB mean against 6.5 KB) are the visible part of their cost: ``build_body`` takes
1.0% of the CPU on against 0.6% off at 16 streams, 1.6% against 0.9% at 64; prompt building 0.3-0.5% in both
modes. Memory: 38 KB per 100k-token session beyond its 654 KB of text (168 messages, ~220 B each: the dict and
its slots in two lists). Prompt building at 100k tokens: ``next_turn`` 0.014 ms, ``build_body`` 1.4-1.46 ms
(a 665 KB JSON body), sum median 1.40-1.47 ms, max ~2.0 ms: JSON encoding is all of it, ~30% under the goal.
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

from benchmarks.common import busy_jiffies, git_rev, pin, stop_procs

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PATH = "/v1/chat/completions"
MODEL = "bench"
TURNS, FIRST_TOKENS, TURN_TOKENS, OUT_TOKENS = 8, 1000, 100, 100
TICK_S = 0.1


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[len(xs) // 2]


# -- load side (own process on core 1) -----------------------------------------------------------

def load(mode: str, port: int, streams: int, warmup: float, seconds: float) -> dict:
    import random

    import gevent

    from harness.client.openai import build_body, request_head
    from harness.client.transport import Connection, Timeouts, stream_request
    from harness.workload.lengths import Fixed
    from harness.workload.prompts import Prompt, PromptBuilder
    from harness.workload.sessions import SessionSampler, SessionSpec

    # CPU of the prompt and body building: the thread's clock (all greenlets share the thread; those steps never
    # yield), so another process taking the core meanwhile does not count
    perf, cpu, host, timeouts = time.perf_counter, time.thread_time, f"127.0.0.1:{port}", Timeouts()
    builder = PromptBuilder(api="chat")  # one per worker, as in the harness (one calibration)
    spec = SessionSpec(turns=Fixed(TURNS), first_input_tokens=Fixed(FIRST_TOKENS),
                       turn_input_tokens=Fixed(TURN_TOKENS), output_tokens=Fixed(OUT_TOKENS))
    recs: list[tuple] = []  # (start, chunk_times, error); tuples of floats stay out of the GC's tracking
    builds: list[tuple[float, float, float, int]] = []  # (t, prompt CPU s, body CPU s, body bytes)
    samplers, first = [], []
    if mode == "on":  # greenlet i's first session starts i mod TURNS turns in: every turn index from the start
        filler = random.Random(2)
        for i in range(streams):
            sampler = SessionSampler(spec, builder, seed=1, stream=i)
            session = sampler.new_session()
            for _ in range(i % TURNS):
                session.next_turn()
                session.answer(builder.turn_text(OUT_TOKENS, filler), None, None)
            samplers.append(sampler)
            first.append(session)

    def request(conn: Connection, body: bytes, keep_text: bool):
        head = request_head("POST", PATH, host, len(body), None)
        rec = stream_request(conn, PATH, head, body, timeouts, keep_text=keep_text)
        recs.append((rec.start, tuple(rec.chunk_times), rec.error))
        return rec

    def off(i: int) -> None:
        conn, rng = Connection(f"http://{host}"), random.Random(i)
        while perf() < t1:
            t, a = perf(), cpu()
            prompt = builder.build(FIRST_TOKENS, rng)
            b = cpu()
            body = build_body("chat", MODEL, prompt, OUT_TOKENS, ignore_eos=True)
            builds.append((t, b - a, cpu() - b, len(body)))
            rec = request(conn, body, False)
            if rec.prompt_tokens:
                builder.observe(prompt, rec.prompt_tokens)
        conn.close()

    def on(i: int) -> None:
        conn, sampler, session = Connection(f"http://{host}"), samplers[i], first[i]
        while perf() < t1:
            t, a = perf(), cpu()
            calls = session.next_turn()
            if calls is None:
                session = sampler.new_session()
                continue
            call = calls[0]
            b = cpu()
            body = build_body("chat", MODEL, Prompt(call.messages, None, 0, 0), call.max_tokens, ignore_eos=True)
            builds.append((t, b - a, cpu() - b, len(body)))
            rec = request(conn, body, True)
            if rec.error:  # a failed call ends the session, as in harness.load.user
                session = sampler.new_session()
                continue
            if session.turn == 1 and rec.prompt_tokens and session.first is not None:
                builder.observe(session.first, rec.prompt_tokens)
            session.answer(rec.content or "", rec.prompt_tokens, rec.output_tokens)
        conn.close()

    begin = perf()
    print(f"begin {begin}", flush=True)
    t0, t1 = begin + warmup, begin + warmup + seconds
    edges: list[tuple[float, float]] = []

    def monitor() -> None:
        while len(edges) < 2:
            gevent.sleep(TICK_S)
            now = perf()
            if now >= (t0 if not edges else t1):
                edges.append((now, time.process_time()))

    mon = gevent.spawn(monitor)
    users = [gevent.spawn(on if mode == "on" else off, i) for i in range(streams)]
    mon.join()
    gevent.joinall(users, timeout=30)  # in-flight requests finish: their chunks inside the window count
    (w0, c0), (w1, c1) = edges
    inside = [b for b in builds if w0 <= b[0] <= w1]
    return {"w0": w0, "w1": w1, "cpu_s": c1 - c0,
            "events": sum(w0 <= s + t <= w1 for s, ts, _ in recs for t in ts),
            "requests": sum(w0 <= s <= w1 for s, _, _ in recs),
            "errors": sum(bool(e) and w0 <= s <= w1 for s, _, e in recs),
            "prompt_s": sum(b[1] for b in inside), "body_s": sum(b[2] for b in inside),
            "body_bytes_mean": round(sum(b[3] for b in inside) / len(inside)) if inside else None}


# -- in-process: memory per session and prompt building at 100k tokens ---------------------------

def inproc(sessions: int, context: int, reps: int) -> dict:
    import gc
    import random
    import tracemalloc

    from harness.client.openai import build_body
    from harness.workload.lengths import Fixed
    from harness.workload.prompts import Prompt, PromptBuilder
    from harness.workload.sessions import SessionSampler, SessionSpec

    builder, rng = PromptBuilder(api="chat"), random.Random(3)
    spec = SessionSpec(turns=Fixed(100_000), first_input_tokens=Fixed(1000), turn_input_tokens=Fixed(1000),
                       output_tokens=Fixed(200))
    sampler = SessionSampler(spec, builder, seed=1, stream=0)

    def answer(s) -> None:  # the server's usage: the last context plus the new message (~1000 tokens)
        s.answer(builder.turn_text(200, rng), s.context_tokens + 1000, 200)

    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    live = [sampler.new_session() for _ in range(sessions)]
    for s in live:
        while s.context_tokens < context:
            s.next_turn()
            answer(s)
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    seen: set[int] = set()
    text = chars = messages = 0
    for s in live:
        messages += len(s.history)
        for m in s.history:
            c = m["content"]
            if id(c) not in seen:
                seen.add(id(c))
                text += sys.getsizeof(c)
                chars += len(c)
    beyond = (held - text) / sessions
    mem = {"name": "sessions_memory", "sessions": sessions,
           "context_tokens_mean": round(sum(s.context_tokens for s in live) / sessions),
           "turns_mean": round(sum(s.turn for s in live) / sessions, 1),
           "messages_per_session": round(messages / sessions, 1),
           "held_bytes_per_session": round(held / sessions), "text_bytes_per_session": round(text / sessions),
           "text_chars_per_session": round(chars / sessions), "bytes_per_session_beyond_text": round(beyond),
           "beyond_text_over_goal": round(beyond / 2**20, 4), "goal_met": beyond < 2**20}

    nt, bb, both, sizes, ctx = [], [], [], [], []
    for k in range(reps):
        s = live[k % sessions]
        ctx.append(s.context_tokens)
        a = time.perf_counter()
        calls = s.next_turn()
        b = time.perf_counter()
        body = build_body("chat", MODEL, Prompt(calls[0].messages, None, 0, 0), calls[0].max_tokens, ignore_eos=True)
        c = time.perf_counter()
        nt.append(b - a)
        bb.append(c - b)
        both.append(c - a)
        sizes.append(len(body))
        answer(s)
    build = {"name": "sessions_prompt_build", "reps": reps, "context_tokens_min": min(ctx),
             "context_tokens_max": max(ctx), "body_bytes_median": round(_median(sizes)),
             "next_turn_ms_p50": round(_median(nt) * 1000, 4), "build_body_ms_p50": round(_median(bb) * 1000, 4),
             "sum_ms_p50": round(_median(both) * 1000, 4), "sum_ms_max": round(max(both) * 1000, 4)}
    build["sum_over_goal"] = round(build["sum_ms_p50"] / 2, 4)
    build["goal_met"] = build["sum_ms_p50"] < 2
    return {"memory": mem, "build": build}


# -- driver --------------------------------------------------------------------------------------

def _stats(port: int, reset: bool = False) -> dict:
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/sim/stats{'?reset=1' if reset else ''}", timeout=10) as r:
        return json.loads(r.read())


def measure(args: argparse.Namespace, mode: str, n: int, tmp: str) -> dict:
    """Simulator on core 0, one load process on core 1; one JSON line of the window."""
    out = os.path.join(tmp, f"load-{mode}-{n}.json")
    sim = subprocess.Popen(
        [*pin(0), sys.executable, "-m", "harness.cli", "sim", "--port", "0", "--model", MODEL, "--max-num-seqs",
         str(n), "--kv-cache-tokens", str(1 << 21), "--max-model-len", "16384", "--max-num-batched-tokens",
         str(1 << 16), "--iter-base-ms", "20", "--iter-per-seq-ms", "0", "--iter-per-kv-ktoken-ms", "0",
         "--prefill-per-ktoken-ms", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT)
    proc = None
    try:
        m = re.search(r":(\d+)\s*$", sim.stdout.readline().strip())  # type: ignore[union-attr]
        if not m:
            raise SystemExit("simulator did not start")
        port = int(m.group(1))
        proc = subprocess.Popen([*pin(1), sys.executable, "-m", "benchmarks.sessions_cost", "--load", mode, str(port),
                                 str(n), str(args.warmup), str(args.seconds), out],
                                stdout=subprocess.PIPE, text=True, cwd=ROOT)
        begin = float(proc.stdout.readline().split()[1])  # type: ignore[union-attr]
        time.sleep(max(0.0, begin + args.warmup - time.perf_counter()))
        _stats(port, reset=True)
        b0 = busy_jiffies()
        time.sleep(max(0.0, begin + args.warmup + args.seconds - time.perf_counter()))
        s, b1 = _stats(port), busy_jiffies()
        proc.communicate(timeout=60)
        if proc.returncode != 0:
            raise SystemExit(f"load process failed: {mode} {n}")
    finally:
        stop_procs(proc, sim)
    with open(out) as f:
        res = json.load(f)
    wall, cpu = res["w1"] - res["w0"], res["cpu_s"]
    busy = (b1[0] - b0[0]) / max(1, b1[1] - b0[1]) * (os.cpu_count() or 1)
    return {"name": "sessions_cost", "mode": mode, "streams": n, "seconds": args.seconds,
            "events": res["events"], "events_per_cpu_s": round(res["events"] / cpu) if cpu else None,
            "requests": res["requests"], "errors": res["errors"], "load_cpu_share": round(cpu / wall, 3),
            "prompt_cpu_share": round(res["prompt_s"] / cpu, 4) if cpu else None,
            "body_cpu_share": round(res["body_s"] / cpu, 4) if cpu else None,
            "body_bytes_mean": res["body_bytes_mean"], "sim_tokens_per_s": s["tokens_per_s"],
            "sim_cpu_share": round(s["cpu_s"] / s["wall_s"], 3),
            "other_busy_cores": round(busy - s["cpu_s"] / s["wall_s"] - cpu / wall, 3), "git": args.git}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--load", nargs=6, help=argparse.SUPPRESS)
    parser.add_argument("--inproc", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, default=15.0, help="measured window per configuration")
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--streams", type=int, nargs="*", default=[16, 64], help="greenlets in the load process")
    parser.add_argument("--sessions", type=int, default=20, help="live sessions of the memory measurement")
    parser.add_argument("--context-tokens", type=int, default=100_000)
    parser.add_argument("--reps", type=int, default=50, help="prompt builds timed at that context")
    args = parser.parse_args()
    if args.load:
        mode, port, n, warmup, seconds, out = args.load
        from gevent import monkey
        monkey.patch_all()  # as Locust does, before any client import
        res = load(mode, int(port), int(n), float(warmup), float(seconds))
        with open(out, "w") as f:
            json.dump(res, f)
        return
    if args.inproc:
        sessions, context, reps, out = args.inproc
        with open(out, "w") as f:
            json.dump(inproc(int(sessions), int(context), int(reps)), f)
        return
    args.git = git_rev()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally blocks that stop our processes
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.streams:
            off = measure(args, "off", n, tmp)
            print(json.dumps(off), flush=True)
            on = measure(args, "on", n, tmp)
            ref = off["events_per_cpu_s"]
            on["off_events_per_cpu_s"] = ref
            on["on_over_off"] = round(on["events_per_cpu_s"] / ref, 3) if ref and on["events_per_cpu_s"] else None
            on["goal_met"] = (on["on_over_off"] or 0) >= 0.9
            print(json.dumps(on), flush=True)
        out = os.path.join(tmp, "inproc.json")
        proc = subprocess.Popen([*pin(1), sys.executable, "-m", "benchmarks.sessions_cost", "--inproc",
                                 str(args.sessions), str(args.context_tokens), str(args.reps), out], cwd=ROOT)
        try:
            proc.wait(timeout=300)
        finally:
            stop_procs(proc)
        if proc.returncode != 0:
            raise SystemExit("in-process measurement failed")
        with open(out) as f:
            res = json.load(f)
        for key in ("memory", "build"):
            print(json.dumps({**res[key], "git": args.git}), flush=True)


if __name__ == "__main__":
    main()
