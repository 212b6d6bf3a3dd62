"""Keep-alive done right, over real loopback sockets: a closed connection is reopened inside the next request's
time (``new_connection``), and a socket the server closed is never written to."""

from __future__ import annotations

import socket
import time

import pytest

from harness.client import connection
from harness.client.openai import build_body, request_head
from harness.client.transport import Connection, Timeouts, stream_request
from harness.workload.prompts import Prompt
from tests.kit.servers import CannedServer, sse_reply

pytestmark = pytest.mark.integration
PROMPT = Prompt(messages=[{"role": "user", "content": "one two"}], text=None, words=2, target_tokens=2)
QUICK = Timeouts(connect_s=2, ttft_s=2, idle_s=1, total_s=5)
# What llama.cpp's server answers: keep-alive offered (HTTP/1.1, Keep-Alive header) and then it closes anyway.
def with_header(line: bytes) -> bytes:
    return sse_reply().replace(b"transfer-encoding: chunked\r\n", b"transfer-encoding: chunked\r\n" + line + b"\r\n")


LLAMA_CPP = with_header(b"keep-alive: timeout=5, max=100")


def send(conn: Connection):
    body = build_body("chat", "m", PROMPT, 3, ignore_eos=False)
    head = request_head("POST", "/v1/chat/completions", conn.host_header, len(body), None)
    return stream_request(conn, "/v1/chat/completions", head, body, QUICK)


@pytest.fixture
def sends(monkeypatch) -> list[int]:
    """Every payload the client writes, by socket: a write to a socket the server had closed shows here."""
    seen: list[int] = []
    real = Connection.send

    def counting(self: Connection, payload: bytes, until: float) -> None:
        seen.append(self.sock.fileno())  # type: ignore[union-attr]
        real(self, payload, until)

    monkeypatch.setattr(Connection, "send", counting)
    return seen


def test_a_server_that_closes_after_each_response_costs_a_connect_each_and_no_wasted_send(sends):
    with CannedServer(LLAMA_CPP, close_after_each=True) as srv:
        conn = Connection(srv.url)
        recs = []
        for _ in range(5):
            recs.append(send(conn))
            time.sleep(0.02)  # a user's next request comes after the server's FIN (the race is the retry's job)
    assert all(r.ok for r in recs), [r.error_detail for r in recs]
    assert [r.new_connection for r in recs] == [True] * 5
    assert len(sends) == 5 and srv.requests == 5 and srv.connections == 5  # no send on a dead socket, no retry


def test_a_server_that_keeps_the_connection_reuses_it(sends):
    with CannedServer(sse_reply()) as srv:
        conn = Connection(srv.url)
        recs = [send(conn) for _ in range(4)]
    assert all(r.ok for r in recs)
    assert [r.new_connection for r in recs] == [True, False, False, False]
    assert [r.connect_s is not None for r in recs] == [True, False, False, False]  # only a connect is timed
    assert 0 < recs[0].connect_s < recs[0].e2e_s  # type: ignore[operator]  # inside the request's own time
    assert len(sends) == 4 and srv.connections == 1


def test_connection_close_in_the_answer_closes_it_at_once(sends):
    with CannedServer(with_header(b"connection: close")) as srv:  # the server would keep it; the client obeys
        conn = Connection(srv.url)
        first = send(conn)
        assert conn.sock is None
        second = send(conn)
    assert first.ok and second.ok and second.new_connection and srv.connections == 2 and len(sends) == 2


def test_past_the_servers_keep_alive_timeout_the_client_reopens_rather_than_race_its_close(sends):
    with CannedServer(with_header(b"keep-alive: timeout=1")) as srv:
        conn = Connection(srv.url)
        first, soon = send(conn), send(conn)
        time.sleep(0.85)  # past 0.9 x 1 s - 0.1 s: the server may close any moment now
        late = send(conn)
    assert first.ok and soon.ok and late.ok
    assert (first.new_connection, soon.new_connection, late.new_connection) == (True, False, True)
    assert srv.connections == 2 and len(sends) == 3


def test_bytes_nobody_asked_for_on_an_idle_connection_make_it_unusable(sends):
    """Some servers send a 408 on an idle connection before closing it: that socket is not written to again."""
    with CannedServer(sse_reply()) as srv:
        conn = Connection(srv.url)
        first = send(conn)
        srv.sockets[0].sendall(b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\n\r\n")  # while idle
        time.sleep(0.02)
        second = send(conn)
    assert first.ok and second.ok and second.new_connection and srv.connections == 2 and len(sends) == 2


def test_the_host_is_resolved_once_per_process_and_again_after_a_failed_connect(monkeypatch):
    calls: list[str] = []
    real = socket.getaddrinfo

    def counting(host, *args, **kwargs):
        calls.append(host)
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", counting)
    monkeypatch.setattr(connection, "_RESOLVED", {})
    with CannedServer(sse_reply(), close_after_each=True) as srv:
        conn = Connection(f"http://localhost:{srv.port}")
        recs = []
        for _ in range(3):
            recs.append(send(conn))
            time.sleep(0.02)
        assert all(r.ok and r.new_connection for r in recs) and calls == ["localhost"]
        literal = Connection(srv.url)
        assert send(literal).ok and calls == ["localhost"]  # 127.0.0.1 needs no lookup
    refused = send(conn)  # the server is gone: a failed connect forgets the address
    assert refused.error == "connect_error" and ("localhost", srv.port) not in connection._RESOLVED
