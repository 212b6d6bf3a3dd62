"""The simulator over real HTTP on loopback, read with the standard library's client (not kneecap's): a request,
its SSE events, the Prometheus scrape."""

from __future__ import annotations

import http.client
import json

from prometheus_client.parser import text_string_to_metric_families

from tests.kit.sim import SimProcess

__all__ = ["CHAT", "chat", "events", "post", "read_chunks", "scrape"]

CHAT = "/v1/chat/completions"


def post(sim: SimProcess, path: str, body: object, headers: dict | None = None, timeout: float = 30):
    conn = http.client.HTTPConnection(sim.host, sim.port, timeout=timeout)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    conn.request("POST", path, data, {"content-type": "application/json", **(headers or {})})
    return conn, conn.getresponse()


def chat(max_tokens: int = 5, **extra) -> dict:
    return {"model": "sim-tiny", "messages": [{"role": "user", "content": "one two three four"}],
            "max_tokens": max_tokens, "ignore_eos": True, **extra}


def events(raw: bytes) -> list[bytes]:
    assert raw.endswith(b"\n\n")
    return raw[:-2].split(b"\n\n")


def read_chunks(resp) -> list[dict]:
    got = events(resp.read())
    assert got[-1] == b"data: [DONE]"
    return [json.loads(e[6:]) for e in got[:-1]]


def scrape(sim: SimProcess) -> dict[str, float]:
    conn = http.client.HTTPConnection(sim.host, sim.port, timeout=10)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[sample.name] = sample.value
    return out
