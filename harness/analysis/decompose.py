"""Where a step's TTFT goes: the client's parts, and the server's own (queue, prefill) where it says. Pure.

Client side, from the request rows (``metrics.rows``), exact: TTFT, time to the response headers, headers →
first token, and for requests that opened a connection, the connect (TCP + TLS). Server side, one of:

- **per request** — llama.cpp's ``timings.prompt_ms`` on the final chunk (its prefill; it reports no queue): then
  "network + client + queue" = client TTFT − server prefill, request by request, exact;
- **per step** — the step deltas of the server's histograms (vLLM's ``request_queue_time``, ``request_prefill_time``,
  ``time_to_first_token``; SGLang/TGI where they have them; ``analysis.server``): means are exact (sum / count),
  quantiles known only to their bucket, given as [estimate, low, high]. "network + client" = client TTFT − server
  TTFT: its bounds are the client's figure minus the server's bucket bounds. The server counts every request that
  finished between the step's first and last scrape, not exactly the client's measured ones;
- else "unknown: the endpoint does not say".

Means add up (client TTFT = network+client + server TTFT; server TTFT ⊇ queue + prefill), quantiles do not: the
split is given for both, each part with its source.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.metrics.rows import decode_row

__all__ = ["UNKNOWN", "ttft_split"]

UNKNOWN = "unknown: the endpoint does not say"
_QUANTILES = (0.5, 0.95)


def _q(values: list[float], q: float) -> float | None:
    """Nearest rank, as the sketches; ``values`` sorted."""
    return values[min(len(values) - 1, int(q * len(values)))] if values else None


def _ms(x: float | None) -> float | None:
    return None if x is None else round(x * 1000, 3)


def _stat(values: list[float]) -> dict | None:
    if not values:
        return None
    values.sort()
    out: dict = {"n": len(values), "mean_ms": _ms(sum(values) / len(values))}
    out.update((f"p{round(q * 100)}_ms", _ms(_q(values, q))) for q in _QUANTILES)
    return out


def ttft_split(rows: Sequence[list], server: dict | None) -> dict | None:
    """The step's TTFT in parts (module docstring); ``server``: the step's server summary (its ``stages``, if
    any). None without successful requests."""
    ttft, headers, after_headers, connect, prefill, rest = [], [], [], [], [], []
    new = 0
    for row in rows:
        d = decode_row(row)
        t = d["ttft_s"]
        if t is None:
            continue
        ttft.append(t)
        if d["headers_s"] is not None:
            headers.append(d["headers_s"])
            after_headers.append(t - d["headers_s"])
        if d["new_connection"]:
            new += 1
            if d["connect_s"] is not None:
                connect.append(d["connect_s"])
        if d["server_prefill_s"] is not None:
            prefill.append(d["server_prefill_s"])
            rest.append(t - d["server_prefill_s"])
    if not ttft:
        return None
    client = {"ttft": _stat(ttft), "headers": _stat(headers), "headers_to_first_token": _stat(after_headers),
              "connect": _stat(connect), "new_connection_share": round(new / len(ttft), 4)}
    out: dict = {"client": client}
    stages = (server or {}).get("stages") or {}
    if prefill:
        out["server"] = {"source": "per request: timings.prompt_ms (llama.cpp)", "prefill": _stat(prefill),
                         "queue": UNKNOWN, "network_client_queue": _stat(rest)}
    elif stages.get("ttft"):
        src = "per step: the server's /metrics histograms (bucket bounds: [estimate, low, high] ms)"
        s_ttft, c = stages["ttft"], client["ttft"]
        net: dict = {"mean_ms": round(c["mean_ms"] - s_ttft["mean_ms"], 3)}
        for key in ("p50_ms", "p95_ms"):
            est, low, high = s_ttft.get(key) or (None, None, None)
            if est is not None:
                net[key] = [round(c[key] - est, 3), None if high is None else round(c[key] - high, 3),
                            round(c[key] - low, 3)]
        out["server"] = {"source": src, "ttft": s_ttft, "queue": stages.get("queue_time") or UNKNOWN,
                         "prefill": stages.get("prefill_time") or UNKNOWN, "network_client": net}
    else:
        out["server"] = {"source": UNKNOWN}
    return out
