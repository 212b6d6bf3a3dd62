"""The simulator over real HTTP on loopback, read with the standard library's client (not kneecap's)."""

from __future__ import annotations

import http.client
import json
import re
import socket
import threading
import time

import pytest

from tests.kit.sim import SimProcess, start_sim
from tests.kit.sim_http import CHAT, chat, events, post, scrape

pytestmark = pytest.mark.integration


def test_chat_stream_framing_is_byte_for_byte_vllm(sim):
    _, resp = post(sim, CHAT, chat(3, stream=True, stream_options={"include_usage": True}))
    assert resp.status == 200
    assert resp.getheader("content-type") == "text/event-stream; charset=utf-8"
    assert resp.getheader("transfer-encoding") == "chunked"
    got = events(resp.read())
    rid = re.match(rb'data: \{"id":"(chatcmpl-[0-9a-f]+)"', got[0]).group(1).decode()
    created = json.loads(got[0][6:])["created"]
    head = f'data: {{"id":"{rid}","object":"chat.completion.chunk","created":{created},"model":"sim-tiny","choices":'
    expected = [
        head + '[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}',
        head + '[{"index":0,"delta":{"content":" the"},"logprobs":null,"finish_reason":null}]}',
        head + '[{"index":0,"delta":{"content":" of"},"logprobs":null,"finish_reason":null}]}',
        head + '[{"index":0,"delta":{"content":" and"},"logprobs":null,"finish_reason":"length","stop_reason":null}]}',
        # vLLM with prompt token details on; without a prefix cache the details are left out (test_prefix_cache_http)
        head + '[],"usage":{"prompt_tokens":11,"total_tokens":14,"completion_tokens":3,'
               '"prompt_tokens_details":{"cached_tokens":0}}}',
        "data: [DONE]",
    ]
    assert [e.decode() for e in got] == expected


def test_completions_stream_has_no_role_chunk_and_no_usage_unless_asked(sim):
    body = {"model": "sim-tiny", "prompt": "a b c d e", "max_tokens": 4, "ignore_eos": True, "stream": True}
    _, resp = post(sim, "/v1/completions", body)
    got = events(resp.read())
    chunks = [json.loads(e[6:]) for e in got[:-1]]
    assert got[-1] == b"data: [DONE]"
    assert [c["object"] for c in chunks] == ["text_completion"] * 4
    assert [c["choices"][0]["text"] for c in chunks] == [" the", " of", " and", " to"]
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None, None, None, "length"]
    assert all(c["id"].startswith("cmpl-") and "usage" not in c for c in chunks)


@pytest.mark.parametrize("path,body", [
    (CHAT, chat(7)),
    ("/v1/completions", {"model": "sim-tiny", "prompt": "x " * 50, "max_completion_tokens": 7, "ignore_eos": True}),
])
def test_non_stream_responses_carry_usage(sim, path, body):
    _, resp = post(sim, path, body)
    out = json.loads(resp.read())
    assert resp.status == 200
    choice = out["choices"][0]
    text = choice["message"]["content"] if path == CHAT else choice["text"]
    assert len(text.split()) == 7 and choice["finish_reason"] == "length"
    assert out["usage"]["completion_tokens"] == 7
    assert out["usage"]["prompt_tokens"] == (11 if path == CHAT else 50)


def test_without_ignore_eos_the_model_stops_by_itself_but_respects_min_tokens(sim):
    lengths = []
    for _ in range(20):
        _, resp = post(sim, CHAT, {"model": "sim-tiny", "messages": [{"role": "user", "content": "hi"}],
                                   "max_tokens": 100, "min_tokens": 20})
        out = json.loads(resp.read())
        lengths.append(out["usage"]["completion_tokens"])
        assert out["choices"][0]["finish_reason"] in ("stop", "length")
    assert min(lengths) >= 20 and len(set(lengths)) > 5


BAD = [
    (b"{not json", 400, "not valid JSON"),
    (b"[1, 2]", 400, "JSON object"),
    ({"messages": [{"role": "user", "content": "x"}]}, 400, "'model' is required"),
    ({"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]}, 404, "does not exist"),
    ({"model": "sim-tiny"}, 400, "'messages' is required"),
    ({"model": "sim-tiny", "messages": []}, 400, "'messages' is required"),
    ({"model": "sim-tiny", "messages": ["hi"]}, 400, "messages[0] must be an object"),
    ({"model": "sim-tiny", "messages": [{"role": "wizard", "content": "x"}]}, 400, "role must be one of"),
    ({"model": "sim-tiny", "messages": [{"role": "user", "content": 5}]}, 400, "content must be"),
    ({**chat(), "n": 2}, 400, "'n' must be 1"),
    ({**chat(), "max_tokens": 0}, 400, "'max_tokens' must be an integer >= 1"),
    ({**chat(), "max_tokens": "ten"}, 400, "'max_tokens' must be an integer"),
    ({**chat(), "stream": "yes"}, 400, "'stream' must be a boolean"),
    ({**chat(), "stream_options": {"include_usage": True}}, 400, "only be defined when `stream=True`"),
    ({**chat(), "min_tokens": 10}, 400, "'min_tokens' (10) must be <= max_tokens"),
    ({**chat(5000)}, 400, "maximum context length is 4096"),
    ({"model": "sim-tiny", "messages": [{"role": "user", "content": "w " * 5000}]}, 400, "maximum context length"),
]


@pytest.mark.parametrize("body,status,message", BAD)
def test_bad_requests_get_openai_errors(sim, body, status, message):
    _, resp = post(sim, CHAT, body)
    out = json.loads(resp.read())
    assert resp.status == status
    assert set(out["error"]) == {"message", "type", "param", "code"}
    assert message in out["error"]["message"]


def test_routing_and_size_errors(sim):
    conn = http.client.HTTPConnection(sim.host, sim.port, timeout=10)
    conn.request("GET", "/nope")
    resp = conn.getresponse()
    assert resp.status == 404 and "no route" in json.loads(resp.read())["error"]["message"]
    conn.request("GET", CHAT)  # same connection: keep-alive works
    resp = conn.getresponse()
    assert resp.status == 405 and json.loads(resp.read())["error"]["type"] == "invalid_request_error"
    conn.request("GET", "/v1/models")
    models = json.loads(conn.getresponse().read())
    assert [m["id"] for m in models["data"]] == ["sim-tiny"]
    _, resp = post(sim, CHAT, b"{" + b" " * (9 << 20) + b"}")
    assert resp.status == 413 and "larger than" in json.loads(resp.read())["error"]["message"]


def test_garbage_on_the_socket_gets_400_and_server_survives(sim):
    with socket.create_connection((sim.host, sim.port), timeout=5) as s:
        s.sendall(b"\x16\x03\x01 this is not http\r\n\r\n")
        reply = s.recv(4096)
    assert reply.startswith(b"HTTP/1.1 400")
    _, resp = post(sim, CHAT, chat(2))
    assert resp.status == 200


def scrape_until(sim: SimProcess, done, timeout: float = 5.0) -> dict[str, float]:
    """Scrape until ``done(metrics)``; each scrape's round trip paces the next (no sleeping on a guess)."""
    deadline = time.monotonic() + timeout
    while not done(m := scrape(sim)):
        assert time.monotonic() < deadline, m
    return m


def test_metrics_parse_and_move_under_load():
    with start_sim("--preset", "tiny", "--iter-base-ms", "10") as sim:
        before = scrape(sim)
        for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                     "vllm:num_preemptions_total", "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
                     "vllm:time_to_first_token_seconds_count", "vllm:inter_token_latency_seconds_count",
                     "vllm:e2e_request_latency_seconds_count"):
            assert name in before, name
        threads = [threading.Thread(target=lambda: post(sim, CHAT, chat(60))[1].read()) for _ in range(14)]
        for t in threads:
            t.start()
        # All 14 in and the scheduler's next iteration has admitted them; the first 8 need ~0.7 s for their 60
        # tokens, so none has finished yet. More than 8 running (or none waiting) fails below.
        during = scrape_until(sim, lambda m: m["vllm:num_requests_running"] >= 8
                              and m["vllm:num_requests_running"] + m["vllm:num_requests_waiting"] == 14)
        for t in threads:
            t.join()
        after = scrape(sim)
    assert during["vllm:num_requests_running"] == 8  # the tiny preset's slots
    assert during["vllm:num_requests_waiting"] == 6
    assert during["vllm:kv_cache_usage_perc"] > 0
    assert after["vllm:num_requests_running"] == 0 and after["vllm:kv_cache_usage_perc"] == 0
    assert after["vllm:generation_tokens_total"] == 14 * 60
    assert after["vllm:e2e_request_latency_seconds_count"] == 14
    assert after["vllm:time_to_first_token_seconds_count"] == 14
    assert after["vllm:inter_token_latency_seconds_count"] == 14 * 59


def test_client_disconnect_frees_the_slot(sim):
    conn, resp = post(sim, CHAT, chat(2000, stream=True))
    resp.read1(100)
    resp.close()  # the response holds its own reference to the socket
    conn.close()
    # Freed on the disconnect: running to its end, 2000 tokens would hold the slot for ~4.5 s.
    freed = scrape_until(sim, lambda m: m["vllm:num_requests_running"] == 0, timeout=2.0)
    assert freed["vllm:num_requests_running"] == 0
