"""Chunk times over real loopback TCP and TLS: exact when the reader keeps up, counted as shared when it does not.

The server writes four events 15 ms apart and notes, around each write, when it sent it. A reader that keeps up
dates each chunk within its own write. A late reader (it does not read until the last write: the worker busy, or
another process on its core) finds the four merged by the kernel under the newest one's time: Linux keeps one
receive time per merged segment (``tcp_try_coalesce``), so no receive can date the earlier ones, and the record
says that three chunk times may be late."""

from __future__ import annotations

import socket
import ssl
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from harness.client import transport
from harness.client.openai import build_body, request_head
from harness.client.transport import Connection, Timeouts, stream_request
from harness.workload.prompts import Prompt
from tests.kit.servers import self_signed, tls_server_context

pytestmark = pytest.mark.integration
PROMPT = Prompt(messages=[{"role": "user", "content": "one"}], text=None, words=1, target_tokens=1)
HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
GAP_S = 0.015
SLACK_S = 0.0005  # the kernel's CLOCK_REALTIME stamp put on perf_counter's clock (one offset per request)


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


def _event(text: str, finish: str | None = None) -> bytes:
    fin = "null" if finish is None else f'"{finish}"'
    return _chunk(b'data: {"id":"x","choices":[{"index":0,"delta":{"content":"%b"},"finish_reason":%b}]}\n\n'
                  % (text.encode(), fin.encode()))


@contextmanager
def paced_server(tls: ssl.SSLContext | None) -> Iterator[tuple[str, list[tuple[float, float]], threading.Event]]:
    """One connection: the head, then four events GAP_S apart, each write's (before, after) on perf_counter."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    sent: list[tuple[float, float]] = []
    done = threading.Event()

    def serve() -> None:
        c, _ = srv.accept()
        if tls is not None:
            c = tls.wrap_socket(c, server_side=True)
        with c:
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            c.recv(65536)
            c.sendall(HEAD)
            for i, ev in enumerate([_event("a"), _event("b"), _event("c"), _event("d", "stop")]):
                if i:
                    time.sleep(GAP_S)  # the server's pacing is what is under test, not a wait for the client
                before = time.perf_counter()
                c.sendall(ev + (_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n" if i == 3 else b""))
                sent.append((before, time.perf_counter()))
            done.set()
            c.recv(1)  # until the client closes

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{srv.getsockname()[1]}", sent, done
    finally:
        th.join(5)
        srv.close()


def request(monkeypatch, url: str, done: threading.Event, *, late: bool, ca: str | None = None):
    if late:
        original = transport._receive

        def late_receive(conn: Connection, st) -> None:
            assert done.wait(5), "the server did not finish writing"
            time.sleep(0.005)  # the lateness under test: read 5 ms after the last write arrived
            original(conn, st)

        monkeypatch.setattr(transport, "_receive", late_receive)
    conn = Connection(url, ca_file=ca)
    body = build_body("chat", "m", PROMPT, 4, ignore_eos=True)
    rec = stream_request(conn, "", request_head("POST", "/v1/chat/completions", conn.host_header, len(body), None),
                         body, Timeouts(connect_s=2, ttft_s=5, idle_s=5, total_s=10))
    conn.close()
    assert rec.ok, rec.error_detail
    return conn, rec, [rec.start + t for t in rec.chunk_times]


def _within(t: float, write: tuple[float, float]) -> bool:
    return write[0] - SLACK_S <= t <= write[1] + SLACK_S


linux = pytest.mark.skipif(sys.platform != "linux", reason="kernel receive stamps (SO_TIMESTAMPNS) are Linux's")


@linux
@pytest.mark.timing  # a stamp within its write: beside two lanes (CI, 2026-12-04) the reader fell 15 ms behind
def test_a_reader_that_keeps_up_dates_each_chunk_within_its_write(monkeypatch):
    with paced_server(None) as (url, sent, done):
        conn, rec, got = request(monkeypatch, url, done, late=False)
    assert conn.kernel_ts and len(got) == 4
    assert all(_within(t, w) for t, w in zip(got, sent, strict=True)), (got, sent)
    assert rec.shared_stamps == 0 and rec.late_chunks is None


@linux
@pytest.mark.parametrize("tls", [False, True], ids=["tcp", "tls"])
def test_a_late_reader_gets_the_merged_segments_newest_time_and_the_record_says_so(monkeypatch, tmp_path, tls):
    ctx, ca = None, None
    if tls:
        ca, key = self_signed(tmp_path)
        ctx = tls_server_context(ca, key)
    with paced_server(ctx) as (url, sent, done):
        _, rec, got = request(monkeypatch, url, done, late=True, ca=ca)
    assert len(got) == 4 and all(_within(t, sent[-1]) for t in got), (got, sent)  # the kernel's, not the read's
    assert rec.shared_stamps == 3  # four chunks, one time: three may be late (here by 45, 30 and 15 ms)
    assert rec.late_chunks == [0]  # the late receive began at the first chunk: the silence before it is the reader's
