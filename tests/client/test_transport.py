"""The streaming client over real loopback sockets: the simulator's faults and scripted broken servers."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

import pytest

from harness.client.openai import build_body, request_head
from harness.client.transport import Connection, Timeouts, stream_request
from harness.workload.prompts import Prompt

pytestmark = pytest.mark.integration
PROMPT = Prompt(messages=[{"role": "user", "content": "one two three"}], text=None, words=3, target_tokens=3)
QUICK = Timeouts(connect_s=2, ttft_s=2, idle_s=0.25, total_s=5)


def send(conn: Connection, tokens: int = 10, fault: str | None = None, model: str = "sim-tiny",
         timeouts: Timeouts = QUICK, max_line: int = 65536):
    body = build_body("chat", model, PROMPT, tokens, ignore_eos=True)
    head = request_head("POST", "/v1/chat/completions", conn.host_header, len(body), None)
    if fault:
        head = head[:-2] + f"x-kneecap-fault: {fault}\r\n\r\n".encode()
    return stream_request(conn, "/v1/chat/completions", head, body, timeouts, max_line_bytes=max_line)


def test_a_clean_stream(sim):
    conn = Connection(sim.url)
    r = send(conn, 12)
    assert r.ok and r.status == 200 and r.finish_reason == "length"
    assert r.output_tokens == 12 and not r.output_tokens_counted and r.prompt_tokens == 10
    assert 0 < r.headers_s <= r.ttft_s < r.e2e_s and len(r.chunk_times) == 12
    assert r.response_id.startswith("chatcmpl-")
    assert r.tpot_s == pytest.approx((r.e2e_s - r.ttft_s) / 11)
    assert r.itl_tokens() == r.itl_chunks() and len(r.itl_chunks()) == 11
    sock = conn.sock
    assert sock is not None and send(conn, 3).ok and conn.sock is sock  # keep-alive reused


@pytest.mark.parametrize("fault,kind", [
    ("reset", "reset"), ("malformed", "malformed_chunk"), ("no_done", "truncated"), ("long_line", "oversized_line"),
    ("stall", "idle_timeout"), ("429", "http_429"), ("500", "http_5xx"), ("503", "http_5xx"),
])
def test_each_fault_is_classified_and_the_connection_recovers(sim, fault, kind):
    conn = Connection(sim.url)
    r = send(conn, 10, fault)
    assert r.error == kind, (r.error, r.error_detail)
    assert r.e2e_s is not None and r.e2e_s < 3
    if kind in ("reset", "malformed_chunk", "truncated", "oversized_line", "idle_timeout"):
        assert len(r.chunk_times) == 5 and r.ttft_s is not None  # the times it reached are kept
    if kind == "http_429":
        assert r.retry_after_s == 1.0
    assert send(conn, 3).ok  # the next request on the same Connection object works


def test_http_error_keeps_the_server_message(sim):
    r = send(Connection(sim.url), model="gpt-nope")
    assert r.error == "http_4xx" and r.status == 404 and "does not exist" in r.error_detail


def test_connect_refused():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    r = send(Connection(f"http://127.0.0.1:{port}"))
    assert r.error == "connect_error" and "cannot connect" in r.error_detail


def test_a_host_name_idna_cannot_encode_is_a_connect_error():
    r = send(Connection(f"http://{'a' * 64}.invalid:80"))
    assert r.error == "connect_error" and "cannot connect" in r.error_detail


@contextmanager
def scripted(script: Callable[[socket.socket], None]) -> Iterator[str]:
    """A server on a free port: accepts connections one at a time, reads the request, runs ``script(sock)``.

    A script that holds its connection waits on an event the test sets, so the test never waits for it."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    addr = srv.getsockname()
    stop = threading.Event()

    def serve() -> None:
        while True:
            c, _ = srv.accept()
            with c:
                if stop.is_set():
                    return
                c.recv(65536)
                with suppress(OSError):
                    script(c)

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    try:
        yield f"http://127.0.0.1:{addr[1]}"
    finally:
        stop.set()
        socket.create_connection(addr).close()  # wakes the accept
        th.join()
        srv.close()


SSE_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def chunked(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


TOKEN = b'data: {"id":"x","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}\n\n'
LAST = b'data: {"id":"x","choices":[{"index":0,"delta":{"content":"b"},"finish_reason":"stop"}]}\n\n'


def test_garbage_instead_of_http():
    with scripted(lambda c: c.sendall(b"SSH-2.0-OpenSSH_9.2\r\n\r\n")) as url:
        assert send(Connection(url)).error == "bad_response"


def test_json_instead_of_a_stream():
    body = b'{"choices": []}'
    reply = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%b" % (len(body), body)
    with scripted(lambda c: c.sendall(reply)) as url:
        r = send(Connection(url))
    assert r.error == "not_sse" and "application/json" in r.error_detail


def test_headers_then_silence_is_a_ttft_timeout():
    release = threading.Event()

    def script(c: socket.socket) -> None:
        c.sendall(SSE_HEAD)
        release.wait(5)  # silent, the connection open, until the client has given up

    with scripted(script) as url:
        r = send(Connection(url), timeouts=Timeouts(ttft_s=0.3, idle_s=5, total_s=5))
        release.set()
    assert r.error == "ttft_timeout" and r.headers_s is not None and 0.29 < r.e2e_s < 0.6


def test_trickle_is_a_total_timeout():
    release = threading.Event()

    def script(c: socket.socket) -> None:
        c.sendall(SSE_HEAD)
        for _ in range(20):
            c.sendall(chunked(TOKEN))
            if release.wait(0.05):  # one token per 50 ms is the trickle under test
                return

    with scripted(script) as url:
        r = send(Connection(url), timeouts=Timeouts(ttft_s=1, idle_s=1, total_s=0.4))
        release.set()
    assert r.error == "total_timeout" and 4 <= len(r.chunk_times) <= 9


def test_a_kept_alive_socket_the_server_closed_is_retried_once_on_a_new_one():
    closed, accepted = threading.Event(), []
    reply = SSE_HEAD + chunked(TOKEN) + chunked(LAST) + chunked(b"data: [DONE]\n\n") + b"0\r\n\r\n"

    def script(c: socket.socket) -> None:
        accepted.append(c)
        c.sendall(reply)  # keep-alive by HTTP/1.1 default ...
        if len(accepted) == 1:
            c.close()  # ... but the server drops it before the next request
            closed.set()

    with scripted(script) as url:
        conn = Connection(url)
        first = send(conn)
        sock = conn.sock
        assert first.ok and sock is not None
        closed.wait(5)
        second = send(conn)
    assert second.ok and second.output_tokens == 2 and conn.sock is not sock and len(accepted) == 2


class LateReader:
    """A socket whose first receive comes late, as for the last of a burst of streams one worker reads.

    The lateness is a busy wait, not a sleep: under gevent (the whole suite runs patched once Locust is imported)
    the receive runs in the worker's one reader, a hub callback that must not switch; the server has sent its whole
    answer in one write before the client can read any of it."""

    def __init__(self, sock: socket.socket, late_s: float) -> None:
        self._sock, self._late_s = sock, late_s

    def recvmsg(self, *args: int):
        if self._late_s:
            until = time.perf_counter() + self._late_s
            while time.perf_counter() < until:
                pass
            self._late_s = 0.0
        return self._sock.recvmsg(*args)

    def __getattr__(self, name: str):
        return getattr(self._sock, name)


def test_times_are_the_kernel_s_receive_times_not_the_late_read(monkeypatch):
    open_socket = Connection.open

    def open_late(self: Connection, timeout: float) -> socket.socket:
        self.sock = LateReader(open_socket(self, timeout), 0.3)  # type: ignore[assignment]
        return self.sock  # type: ignore[return-value]

    def script(c: socket.socket) -> None:
        c.sendall(SSE_HEAD + chunked(TOKEN) + chunked(LAST) + chunked(b"data: [DONE]\n\n") + b"0\r\n\r\n")

    monkeypatch.setattr(Connection, "open", open_late)
    with scripted(script) as url:
        conn = Connection(url)
        t0 = time.perf_counter()
        r = send(conn)
        waited = time.perf_counter() - t0
    if not conn.kernel_ts:
        pytest.skip("no SO_TIMESTAMPNS on this platform")
    assert r.ok and waited >= 0.3 and r.e2e_s < 0.15 and r.headers_s <= r.ttft_s <= r.e2e_s


def test_close_after_finish_without_done_is_complete():
    with scripted(lambda c: c.sendall(SSE_HEAD + chunked(TOKEN) + chunked(LAST))) as url:
        r = send(Connection(url))
    assert r.ok and r.finish_reason == "stop" and r.output_tokens == 2 and r.output_tokens_counted
    assert r.itl_tokens() is None  # no usage: per-token gaps unknown


def test_close_before_headers_is_a_reset():
    with scripted(lambda c: None) as url:
        r = send(Connection(url))
    assert r.error == "reset"


COOPERATIVE = """
from gevent import monkey; monkey.patch_all()
import sys
from harness.client.openai import build_body, request_head
from harness.spec.timeouts import Timeouts
from harness.client.transport import Connection, stream_request
from harness.workload.prompts import Prompt
conn = Connection(sys.argv[1])
prompt = Prompt(messages=[{"role": "user", "content": "x"}], text=None, words=1, target_tokens=1)
for tokens, fault, limits in ((10, "stall", Timeouts(idle_s=0.25)), (3000, None, Timeouts(total_s=0.4)),
                              (10, None, Timeouts())):
    body = build_body("chat", "sim-tiny", prompt, tokens, ignore_eos=True)
    head = request_head("POST", "/v1/chat/completions", conn.host_header, len(body), None)
    if fault:
        head = head[:-2] + f"x-kneecap-fault: {fault}\\r\\n\\r\\n".encode()
    r = stream_request(conn, "/v1/chat/completions", head, body, limits)
    print(conn.cooperative, r.error, round(r.e2e_s, 2))
"""


def test_deadlines_under_gevent_come_from_the_one_reader(sim):
    """Inside Locust the worker's one reader (client/mux.py) reads every stream and enforces the deadlines."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", COOPERATIVE, sim.url], capture_output=True, text=True, timeout=60)
    lines = [line.split() for line in out.stdout.splitlines()]
    assert [line[:2] for line in lines] == [["True", "idle_timeout"], ["True", "total_timeout"], ["True", "None"]], \
        out.stdout + out.stderr
    assert 0.25 <= float(lines[0][2]) < 0.45 and 0.4 <= float(lines[1][2]) < 0.6


def test_usage_counts_as_strings_are_a_bad_response_and_the_connection_is_renewed():
    """The server of issue 11 ("prompt_tokens": "fifty"): classified, no count kept, nothing raised."""
    from tests.kit.servers import USAGE_AS_STRINGS, CannedServer, sse_reply

    with CannedServer(lambda n: USAGE_AS_STRINGS if n == 1 else sse_reply()) as srv:
        conn = Connection(srv.url)
        r = send(conn)
        assert r.error == "bad_response" and r.prompt_tokens is None and r.output_tokens == 3
        assert r.error_detail.startswith("server chunk's usage.prompt_tokens is 'fifty', expected an integer >= 0")
        assert conn.sock is None  # not reused after a broken stream
        assert send(conn).ok and srv.requests == 2
