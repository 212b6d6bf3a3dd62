"""Simulator throughput and schedule fidelity: ``python -m benchmarks.sim_throughput``.

Protects: the simulator sustains >= 20,000 streamed tokens/s on one core with 256 concurrent streams,
with p99 lateness of a delivery against its planned iteration end < 2 ms, so it is never the
bottleneck of a test. Also prints its CPU cost per token at several loads (how users size it).

Reference measured in the same run: the same token schedule served by an aiohttp streaming handler
(``await resp.write`` per chunk), the usual way to write such a server. Both servers run pinned to
core 0; the load client (raw asyncio sockets, counting bytes only) runs pinned to core 1.
Each configuration prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import time
import urllib.request

from benchmarks.common import git_rev, pin

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)




def _start(cmd: list[str]) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen(pin(0) + cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    line = proc.stdout.readline()
    m = re.search(r":(\d+)\s*$", line.strip())
    if not m:
        proc.kill()
        raise SystemExit(f"server did not start: {line!r} {proc.stderr.read()!r}")
    return proc, int(m.group(1))


def _get(port: int, path: str) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        return json.loads(r.read())


# -- load client (runs in its own process on core 1) ---------------------------------------------

async def _stream_forever(port: int, body: bytes, stop: float, counts: list[int]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    req = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
           b"content-length: %d\r\n\r\n%b" % (len(body), body))
    while time.monotonic() < stop:
        writer.write(req)
        tail = b""
        while True:
            data = await reader.read(1 << 16)
            if not data:
                return
            counts[0] += len(data)
            tail = (tail + data)[-32:]
            if tail.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n"):
                break
    writer.close()


def client_main(port: int, streams: int, seconds: float, tokens: int) -> None:
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    body = json.dumps({"model": "bench", "messages": [{"role": "user", "content": "hi"}], "max_tokens": tokens,
                       "ignore_eos": True, "stream": True}).encode()
    counts = [0]

    async def run() -> None:
        stop = time.monotonic() + seconds
        await asyncio.gather(*(_stream_forever(port, body, stop, counts) for _ in range(streams)),
                             return_exceptions=True)

    asyncio.run(run())


# -- aiohttp reference server --------------------------------------------------------------------

def aiohttp_main(iter_base_ms: float, iter_per_seq_ms: float) -> None:
    """Each stream sleeps until its next token time (the schedule the engine would give), then writes."""
    from aiohttp import web

    from harness.sim.openai import StreamFormat, token_text

    active = [0]
    stats = {"tokens": 0, "late": [], "since": time.monotonic(), "cpu0": time.process_time()}

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        resp = web.StreamResponse(headers={"content-type": "text/event-stream; charset=utf-8"})
        await resp.prepare(request)
        fmt = StreamFormat("chat", "chatcmpl-ref", int(time.time()), body["model"])
        loop = asyncio.get_running_loop()
        active[0] += 1
        try:
            planned = loop.time()
            n = body["max_tokens"]
            for i in range(n):
                planned += (iter_base_ms + iter_per_seq_ms * active[0]) / 1000
                await asyncio.sleep(max(0.0, planned - loop.time()))
                stats["late"].append(loop.time() - planned)
                await resp.write(fmt.token_chunk(token_text(i), "length" if i == n - 1 else None))
                stats["tokens"] += 1
            await resp.write(StreamFormat.DONE)
            await resp.write_eof()
        finally:
            active[0] -= 1
        return resp

    async def get_stats(request: web.Request) -> web.Response:
        late = sorted(stats["late"][-100_000:])
        wall = time.monotonic() - stats["since"]
        cpu = time.process_time() - stats["cpu0"]
        out = {"tokens_sent": stats["tokens"], "wall_s": wall, "tokens_per_s": stats["tokens"] / wall,
               "cpu_s": cpu, "cpu_us_per_token": cpu / stats["tokens"] * 1e6 if stats["tokens"] else None,
               "busy_s": wall,
               "lateness_ms": {"p50": late[len(late) // 2] * 1000 if late else 0,
                               "p99": late[int(len(late) * 0.99)] * 1000 if late else 0,
                               "max": late[-1] * 1000 if late else 0}}
        if request.query.get("reset") == "1":
            stats.update(tokens=0, late=[], since=time.monotonic(), cpu0=time.process_time())
        return web.json_response(out)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/sim/stats", get_stats)

    async def serve() -> None:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        print(f"aiohttp reference on http://127.0.0.1:{port}", flush=True)
        await asyncio.Event().wait()

    try:
        import uvloop
        uvloop.run(serve())
    except ImportError:
        asyncio.run(serve())


# -- driver --------------------------------------------------------------------------------------

def measure(stack: str, streams: int, seconds: float, warmup: float, base_ms: float, per_seq_ms: float) -> dict:
    if stack == "kneecap":
        cmd = [sys.executable, "-m", "harness.cli", "sim", "--port", "0", "--model", "bench",
               "--max-num-seqs", str(streams), "--kv-cache-tokens", str(max(131_072, streams * 2100)),
               "--iter-base-ms", str(base_ms), "--iter-per-seq-ms", str(per_seq_ms),
               "--iter-per-kv-ktoken-ms", "0", "--prefill-per-ktoken-ms", "1"]
    else:
        cmd = [sys.executable, "-m", "benchmarks.sim_throughput", "--serve-aiohttp", str(base_ms), str(per_seq_ms)]
    server, port = _start(cmd)
    try:
        client = subprocess.Popen([*pin(1), sys.executable, "-m", "benchmarks.sim_throughput", "--client", str(port),
                                   str(streams), str(warmup + seconds + 1), "2000"], cwd=ROOT)
        time.sleep(warmup)
        _get(port, "/sim/stats?reset=1")
        time.sleep(seconds)
        s = _get(port, "/sim/stats")
        client.wait(timeout=seconds + 30)
    finally:
        server.terminate()
        server.wait(timeout=10)
    planned = streams / (base_ms + per_seq_ms * streams) * 1000
    return {"name": "sim_throughput", "stack": stack, "streams": streams, "seconds": seconds,
            "iter_base_ms": base_ms, "iter_per_seq_ms": per_seq_ms,
            "tokens_per_s": round(s["tokens_per_s"]), "planned_tokens_per_s": round(planned),
            "achieved_vs_planned": round(s["tokens_per_s"] / planned, 3),
            "lateness_p50_ms": round(s["lateness_ms"]["p50"], 3), "lateness_p99_ms": round(s["lateness_ms"]["p99"], 3),
            "lateness_max_ms": round(s["lateness_ms"]["max"], 3),
            "cpu_us_per_token": s["cpu_us_per_token"] and round(s["cpu_us_per_token"], 2),
            "cpu_share": round(s["cpu_s"] / s["wall_s"], 3), "git": git_rev()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--client", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--serve-aiohttp", nargs=2, type=float, help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--streams", type=int, nargs="*", default=[64, 256])
    parser.add_argument("--stacks", nargs="*", default=["kneecap", "aiohttp"])
    args = parser.parse_args()
    if args.client:
        port, streams, seconds, tokens = args.client
        client_main(int(port), int(streams), float(seconds), int(tokens))
        return
    if args.serve_aiohttp:
        aiohttp_main(*args.serve_aiohttp)
        return
    # 5 ms + 0.02 ms/seq: 256 streams plan 25.3 k tokens/s (10.1 ms iterations).
    for streams in args.streams:
        for stack in args.stacks:
            print(json.dumps(measure(stack, streams, args.seconds, args.warmup, 5.0, 0.02)), flush=True)


if __name__ == "__main__":
    main()
