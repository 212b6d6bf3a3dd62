"""Long-context client cost: ``python -m benchmarks.long_context [--rounds 15] [--inflight 100] [--no-reference-rss]``.

What it protects (issue 16): a long-context test must not make the client the bottleneck. Goals: building and
sending one request of 1M prompt tokens costs < 20 ms CPU and < 5 MB allocated (Python heap, tracemalloc);
a worker with 100 1M-token requests in flight stays under 1 GB RSS.

1. Build + send, at 8K, 128K and 1M prompt tokens (chat): kneecap's path (``PromptBuilder.build``, a ``Spliced``
   prompt, ``build_body`` -> ``SplicedBody``, ``Connection.send`` of the buffers with ``sendmsg``) against the
   reference in the same run: the prompt built as a ``str`` per request (the builder's plain path), ``json.dumps``
   of the body, ``sendall(head + body)`` on a blocking socket. Both send to one server process that drains
   every byte (no answer). Per request: CPU (``process_time``; the server is another process), wall, and the
   peak of memory allocated during it (tracemalloc, in separate rounds: tracing slows the code). The corpus is
   built once per worker, before the first long prompt: that one-time cost is printed apart.
   The splice threshold (``SPLICE_MIN_WORDS``) comes from the same measurement at 256–8192 words, each prompt
   sent both ways (``threshold`` lines: median µs of build + send).
2. RSS with ``--inflight`` 1M-token requests in flight: a child process (gevent, as a Locust worker: monkey-
   patched, one greenlet per request, the real ``stream_request`` and worker mux) sends them to a server that
   reads each whole body and never answers; once the server holds all of them, the child's VmRSS and VmHWM
   are read from /proc. The reference child does the same with every body a ``bytes`` of its own (the plain
   path; ``--no-reference-rss`` skips it: it needs ~1.5 GB).

How to read: one JSON line per measurement, then a table. ``over_reference`` is kneecap's figure divided by the
reference's (below 1: cheaper). Wall times include the kernel copying bytes over loopback into a draining
reader on a shared 2-core machine: compare within one run.
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import statistics
import subprocess
import sys
import time
import tracemalloc

from benchmarks.common import git_rev
from harness.client.openai import build_body, request_head
from harness.client.transport import Connection
from harness.workload.prompts import PromptBuilder

TARGETS = (8_192, 131_072, 1_000_000)
MODEL = "sim-long"

_DRAIN = r"""
import socket, sys, threading
srv = socket.create_server(("127.0.0.1", 0), backlog=256)
print(srv.getsockname()[1], flush=True)
hold = sys.argv[1] == "hold"
held = 0
lock = threading.Lock()
def serve(c):
    global held
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    data = b""
    while b"\r\n\r\n" not in data:
        n = c.recv_into(view)
        if not n:
            return
        data += bytes(view[:n])
    head, _, rest = data.partition(b"\r\n\r\n")
    length = int([l for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")][0].split(b":")[1])
    got = len(rest)
    if not hold:  # drain: every byte, forever
        while c.recv_into(view):
            pass
        return
    while got < length:
        n = c.recv_into(view)
        if not n:
            return
        got += n
    with lock:
        held += 1
        print("held", held, flush=True)
    c.recv(1)  # never answer; wait for the client to go away
while True:
    c, _ = srv.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"""


def _server(mode: str) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([sys.executable, "-c", _DRAIN, mode], stdout=subprocess.PIPE, text=True)
    return proc, int(proc.stdout.readline())  # type: ignore[union-attr]


def _reference_body(prompt, max_tokens: int) -> bytes:
    body = {"model": MODEL, "stream": True, "max_tokens": max_tokens, "stream_options": {"include_usage": True},
            "messages": prompt.messages, "ignore_eos": True, "min_tokens": max_tokens}
    return json.dumps(body, separators=(",", ":")).encode()


def build_and_send(rounds: int) -> list[dict]:
    server, port = _server("drain")
    out = []
    try:
        ours = PromptBuilder(api="chat", seed=1)
        plain = PromptBuilder(api="chat", seed=1, splice_min_words=1 << 62)
        c0, t0 = time.process_time(), time.perf_counter()
        ours.build(TARGETS[-1], random.Random(0))  # the worker's one-time corpus (grows to the longest prompt)
        once = {"cpu_ms": (time.process_time() - c0) * 1000, "wall_ms": (time.perf_counter() - t0) * 1000,
                "corpus_mb": ours.corpus.shared_bytes / 1e6}
        conn = Connection(f"http://127.0.0.1:{port}")
        conn.open(5)
        sock = socket.create_connection(("127.0.0.1", port))
        rng = random.Random(2)

        def kneecap(target: int) -> None:
            body = build_body("chat", MODEL, ours.build(target, rng), 256, ignore_eos=True)
            head = request_head("POST", "/v1/chat/completions", conn.host_header, len(body), None)
            # as stream_request joins them: the head to the (small) first part only
            payload = head + body if isinstance(body, bytes) else [head + body.parts[0], *body.parts[1:]]
            conn.send(payload, time.perf_counter() + 60)

        def reference(target: int) -> None:
            body = _reference_body(plain.build(target, rng), 256)
            sock.sendall(request_head("POST", "/v1/chat/completions", "127.0.0.1", len(body), None) + body)

        for target in TARGETS:
            row: dict = {"bench": "long_context.build_send", "prompt_tokens": target, "rev": git_rev()}
            for name, fn in (("kneecap", kneecap), ("reference", reference)):
                fn(target)  # warm
                cpu, wall = [], []
                for _ in range(rounds):
                    c, t = time.process_time(), time.perf_counter()
                    fn(target)
                    wall.append(time.perf_counter() - t)
                    cpu.append(time.process_time() - c)
                peaks = []
                tracemalloc.start()
                for _ in range(3):
                    tracemalloc.reset_peak()
                    before = tracemalloc.get_traced_memory()[0]
                    fn(target)
                    peaks.append(tracemalloc.get_traced_memory()[1] - before)
                tracemalloc.stop()
                row[name] = {"cpu_ms": statistics.median(cpu) * 1000, "wall_ms": statistics.median(wall) * 1000,
                             "alloc_mb": max(peaks) / 1e6}
            k, r = row["kneecap"], row["reference"]
            row["over_reference"] = {key: k[key] / r[key] if r[key] else None for key in k}
            if target == TARGETS[-1]:
                row["goals_met"] = k["cpu_ms"] < 20 and k["alloc_mb"] < 5
                row["once_per_worker"] = once
            out.append(row)
        conn.close()
        sock.close()
    finally:
        server.kill()
        server.wait()
    return out


def threshold(rounds: int = 1500) -> list[dict]:
    """Build + send at short lengths, the same prompt spliced and as a ``str``: where splicing starts to pay."""
    server, port = _server("drain")
    out = []
    try:
        conn = Connection(f"http://127.0.0.1:{port}")
        conn.open(5)
        for words in (256, 1024, 4096, 8192):
            row: dict = {"bench": "long_context.threshold", "words": words, "rev": git_rev()}
            for name, least in (("spliced_us", 1), ("str_us", 1 << 62)):
                b, rng = PromptBuilder(api="chat", splice_min_words=least), random.Random(0)
                times = []
                for _ in range(rounds):
                    t = time.perf_counter()
                    body = build_body("chat", MODEL, b.build(words, rng), 256, ignore_eos=True)
                    head = request_head("POST", "/v1/chat/completions", conn.host_header, len(body), None)
                    conn.send(head + body if isinstance(body, bytes) else [head + body.parts[0], *body.parts[1:]],
                              time.perf_counter() + 60)
                    times.append(time.perf_counter() - t)
                row[name] = statistics.median(times) * 1e6
            out.append(row)
        conn.close()
    finally:
        server.kill()
        server.wait()
    return out


def _child(port: int, n: int, plain: bool) -> None:
    """The in-flight child: ``n`` greenlets, each one 1M-token request held by the server."""
    from gevent import monkey

    monkey.patch_all()
    import gevent

    from harness.client.transport import stream_request
    from harness.spec.timeouts import Timeouts

    builder = PromptBuilder(api="chat", splice_min_words=1 << 62 if plain else 1 << 14)
    rng = random.Random(3)
    limits = Timeouts(ttft_s=600, idle_s=600, total_s=600)

    def one() -> None:
        conn = Connection(f"http://127.0.0.1:{port}")
        prompt = builder.build(TARGETS[-1], rng)
        body = _reference_body(prompt, 256) if plain else build_body("chat", MODEL, prompt, 256, ignore_eos=True)
        head = request_head("POST", "/v1/chat/completions", conn.host_header, len(body), None)
        stream_request(conn, "", head, body, limits)

    print("ready", _rss()[0], flush=True)
    gevent.joinall([gevent.spawn(one) for _ in range(n)])


def _rss(pid: str = "self") -> tuple[float, float]:
    """(VmRSS, VmHWM) in MB."""
    with open(f"/proc/{pid}/status") as f:
        fields = dict(line.split(":", 1) for line in f)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def in_flight_rss(n: int, plain: bool) -> dict:
    server, port = _server("hold")
    child = subprocess.Popen([sys.executable, "-m", "benchmarks.long_context", "--child", str(port), str(n),
                              "plain" if plain else "spliced"], stdout=subprocess.PIPE, text=True)
    try:
        ready = float(child.stdout.readline().split()[1])  # type: ignore[union-attr]
        t0 = time.perf_counter()
        held = 0
        while held < n:
            line = server.stdout.readline()  # type: ignore[union-attr]
            if not line:
                raise RuntimeError("the holding server ended")
            held = int(line.split()[1])
        rss, hwm = _rss(str(child.pid))
        return {"bench": "long_context.inflight_rss", "path": "reference" if plain else "kneecap", "in_flight": n,
                "prompt_tokens": TARGETS[-1], "rss_mb": rss, "hwm_mb": hwm, "rss_before_mb": ready,
                "seconds_to_send_all": time.perf_counter() - t0, "goal_met": None if plain else hwm < 1024,
                "rev": git_rev()}
    finally:
        for p in (child, server):
            p.kill()
            p.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--inflight", type=int, default=100)
    ap.add_argument("--no-reference-rss", action="store_true")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(int(args.child[0]), int(args.child[1]), args.child[2] == "plain")
        return
    rows = threshold() + build_and_send(args.rounds)
    rows.append(in_flight_rss(args.inflight, plain=False))
    if not args.no_reference_rss:
        rows.append(in_flight_rss(args.inflight, plain=True))
    for row in rows:
        print(json.dumps(row))
    print(f"\n{'prompt tokens':>13} | {'kneecap cpu ms':>14} {'wall ms':>8} {'alloc MB':>8} | "
          f"{'reference cpu ms':>16} {'wall ms':>8} {'alloc MB':>8}")
    for row in rows:
        if row["bench"].endswith("build_send"):
            k, r = row["kneecap"], row["reference"]
            print(f"{row['prompt_tokens']:>13,} | {k['cpu_ms']:>14.2f} {k['wall_ms']:>8.2f} {k['alloc_mb']:>8.3f} | "
                  f"{r['cpu_ms']:>16.2f} {r['wall_ms']:>8.2f} {r['alloc_mb']:>8.3f}")
    print("splice threshold (build + send, median µs): " + ", ".join(
        f"{r['words']} words {r['spliced_us']:.0f} spliced / {r['str_us']:.0f} str" for r in rows
        if r["bench"].endswith("threshold")))
    for row in rows:
        if row["bench"].endswith("rss"):
            print(f"{row['path']}: {row['in_flight']} x {row['prompt_tokens']:,}-token requests in flight: RSS "
                  f"{row['rss_mb']:.0f} MB (peak {row['hwm_mb']:.0f}, {row['rss_before_mb']:.0f} before sending)")


if __name__ == "__main__":
    main()
