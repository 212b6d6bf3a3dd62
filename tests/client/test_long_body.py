"""Long prompts on the wire and in time: a spliced body sent as buffers (partial sends, TLS) arrives whole; the
default limits grow with the prompt while a limit the scenario sets stays as set.

The sends are real: a socketpair with a tiny send buffer (so ``sendmsg`` stops mid-buffer again and again), and
``CannedServer`` over loopback, plain and TLS (self-signed), which records the body it received.
"""

from __future__ import annotations

import json
import random
import socket
import threading
import time

import pytest

from harness.checker import Checker
from harness.client.openai import build_body, request_head
from harness.client.transport import Connection, stream_request
from harness.endpoint import parse_endpoint
from harness.spec.timeouts import PREFILL_S_PER_KTOKEN, Timeouts
from harness.workload.prompts import PromptBuilder, SplicedBody
from tests.kit.servers import CannedServer, sse_reply, tls_server


def long_body(tokens: int = 200_000) -> SplicedBody:
    prompt = PromptBuilder(api="chat").build(tokens, random.Random(0))
    body = build_body("chat", "m", prompt, 3, ignore_eos=True)
    assert isinstance(body, SplicedBody)
    return body


def test_partial_sends_resume_inside_a_buffer():
    body = long_body()
    ours, theirs = socket.socketpair()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    ours.setblocking(False)
    got = bytearray()

    def drain() -> None:
        while data := theirs.recv(7919):  # an odd size: receives end anywhere in a buffer
            got.extend(data)

    reader = threading.Thread(target=drain)
    reader.start()
    conn = Connection("http://127.0.0.1:1")
    conn.sock = ours  # type: ignore[assignment]
    conn.send([b"HEAD ", *body.parts], time.perf_counter() + 30)
    ours.close()
    reader.join(10)
    assert bytes(got) == b"HEAD " + bytes(body)


@pytest.mark.integration
@pytest.mark.parametrize("tls", [False, True])
def test_a_spliced_body_reaches_the_server_whole(tmp_path, tls):
    body = long_body()
    with (tls_server(tmp_path) if tls else _plain()) as (srv, cert):
        conn = Connection(srv.url, ca_file=cert)
        head = request_head("POST", "/v1/chat/completions", conn.host_header, len(body), None)
        for _ in range(2):  # the second on the kept-alive connection
            rec = stream_request(conn, "", head, body, Timeouts(), tracker=None)
            assert rec.error is None, rec.error_detail
    assert [b for _, b in srv.received] == [bytes(body)] * 2
    assert len(json.loads(srv.received[0][1])["messages"][0]["content"].split()) == 200_000  # words, as sent


class _plain:
    def __enter__(self):
        self.srv = CannedServer(sse_reply()).__enter__()
        return self.srv, None

    def __exit__(self, *exc):
        self.srv.__exit__(*exc)


def test_default_limits_grow_with_the_prompt():
    t = Timeouts.defaults()
    assert t.for_prompt(0) is t
    long = t.for_prompt(1_000_000)
    more = 1000 * PREFILL_S_PER_KTOKEN
    assert (long.connect_s, long.ttft_s, long.idle_s, long.total_s) == (10, 60 + more, 30 + more, 600 + more)
    assert long.for_prompt(1_000_000) == long  # applied once: the result does not grow again
    assert Timeouts(ttft_s=5).for_prompt(1_000_000).ttft_s == 5  # explicit values are as set


def test_a_limit_the_scenario_sets_stays_as_set():
    check = Checker()
    ep = parse_endpoint({"timeouts": {"ttft_s": 20, "connect_s": 3}}, check)
    assert not check.problems
    t = ep.timeouts.for_prompt(262_144)
    more = 262.144 * PREFILL_S_PER_KTOKEN
    assert (t.connect_s, t.ttft_s) == (3, 20) and t.idle_s == pytest.approx(30 + more)
    assert t.total_s == pytest.approx(600 + more)
    bare = parse_endpoint({}, Checker()).timeouts.for_prompt(262_144)
    assert bare.ttft_s == pytest.approx(60 + more)
