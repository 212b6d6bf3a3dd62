"""HTTPS endpoints for real: a self-signed server in a thread, the client's verification, trust and classification."""

from __future__ import annotations

import socket
import sys
import threading

import pytest

from harness.client.openai import build_body, request_head
from harness.client.transport import Connection, Timeouts, stream_request
from harness.workload.prompts import Prompt
from tests.kit.servers import tls_server

pytestmark = pytest.mark.integration
PROMPT = Prompt(messages=[{"role": "user", "content": "one two three"}], text=None, words=3, target_tokens=3)
QUICK = Timeouts(connect_s=2, ttft_s=2, idle_s=2, total_s=5)


def send(conn: Connection):
    body = build_body("chat", "m", PROMPT, 3, ignore_eos=True)
    head = request_head("POST", "/v1/chat/completions", conn.host_header, len(body), None)
    return stream_request(conn, "/v1/chat/completions", head, body, QUICK)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with tls_server(tmp_path_factory.mktemp("tls")) as (srv, cert):
        yield srv, cert


def test_a_self_signed_certificate_fails_verification_by_default(server):
    srv, _ = server
    r = send(Connection(srv.url))
    assert r.error == "tls_error", (r.error, r.error_detail)
    assert r.error_detail == f"certificate verify failed: self-signed certificate (server 127.0.0.1:{srv.port})"
    assert r.status is None and r.e2e_s is not None and r.e2e_s < 2


def test_ca_file_trusts_it(server):
    srv, cert = server
    conn = Connection(srv.url, ca_file=cert)
    r = send(conn)
    assert r.ok and r.output_tokens == 3, r.error_detail
    sock = conn.sock
    assert send(conn).ok and conn.sock is sock  # kept alive over TLS
    assert conn.kernel_ts or sys.platform != "linux"  # TLS over memory BIOs: the kernel still stamps each receive


def test_verify_false_accepts_any_certificate(server):
    srv, _ = server
    r = send(Connection(srv.url, verify=False))
    assert r.ok and r.output_tokens == 3, r.error_detail


def test_a_certificate_for_another_name_is_a_tls_error(server):
    srv, cert = server
    r = send(Connection(f"https://localhost:{srv.port}", ca_file=cert))  # the certificate names 127.0.0.1 only
    assert r.error == "tls_error" and r.error_detail.startswith("certificate verify failed: Hostname mismatch")
    assert r.error_detail.endswith(f"(server localhost:{srv.port})")


def test_https_to_a_plain_http_server_is_a_tls_error_that_says_so():
    """A plain HTTP server answers the TLS hello with an HTTP error, which is no TLS record."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]

    def answer() -> None:
        c, _ = srv.accept()
        with c:
            c.recv(65536)
            c.sendall(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")

    th = threading.Thread(target=answer, daemon=True)
    th.start()
    r = send(Connection(f"https://127.0.0.1:{port}"))
    th.join(5)
    srv.close()
    assert r.error == "tls_error", (r.error, r.error_detail)
    assert r.error_detail.startswith(f"TLS handshake with 127.0.0.1:{port} failed: ")
    assert "_ssl.c" not in r.error_detail and "http://" in r.error_detail


def test_the_metrics_scrape_uses_the_endpoints_tls_settings(tmp_path):
    """A private-CA endpoint keeps its server metrics (live.py passes the endpoint's TLS settings to scrape)."""
    from harness.client.server_metrics import scrape
    from harness.client.transport import tls_context

    metrics = b"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 3\n"
    reply = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: %d\r\n\r\n%s" % (len(metrics), metrics)
    with tls_server(tmp_path, reply) as (srv, cert):
        url = f"{srv.url}/metrics"
        assert scrape(url) is None  # the system's CAs do not know it
        assert scrape(url, context=tls_context(cert)).waiting == 3
        assert scrape(url, context=tls_context(verify=False)).waiting == 3
