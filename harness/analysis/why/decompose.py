"""Where a step's TTFT goes: the client's parts, and the server's own (queue, prefill) where it says. Pure.

Client side, from the request rows (``metrics.rows``), exact: TTFT, time to the response headers, headers →
first token, and for requests that opened a connection, the connect (TCP + TLS); the client's own share: writing
the request (``send``, inside headers) and the worker's loop lag just before the send (``loop_lag``: how far
behind the load generator was; not inside TTFT, which starts at the send, but a lagging loop reads late too).
Server side, one of:

- **per request** — llama.cpp's ``timings.prompt_ms`` on the final chunk (its prefill; it reports no queue): then
  "network + client + queue" = client TTFT − server prefill, request by request, exact;
- **per step** — the step deltas of the server's histograms (vLLM's ``request_queue_time``, ``request_prefill_time``,
  ``time_to_first_token``; SGLang/TGI where they have them; ``analysis.server``): means are exact (sum / count),
  quantiles known only to their bucket, given as [estimate, low, high]. "network + client" = client TTFT − server
  TTFT, as a mean only (quantiles do not subtract). The server counts every request that finished between the
  step's first and last scrape, not exactly the client's measured ones: a negative mean says so (``NEGATIVE``);
- else "unknown: the endpoint does not say".

Means add up (client TTFT = network+client + server TTFT; server TTFT ⊇ queue + prefill), quantiles do not: the
split is given for both, each part with its source.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from msgspec import UNSET, UnsetType, to_builtins

if TYPE_CHECKING:
    import numpy as np

from harness.analysis.step_columns import floats, ints
from harness.analysis.why.rows import columns
from harness.metrics.rows import FLAG_NEW_CONNECTION
from harness.summary import Server

__all__ = ["NEGATIVE", "UNKNOWN", "ttft_split"]

UNKNOWN = "unknown: the endpoint does not say"
NEGATIVE = ("the server's mean TTFT is above the client's: its histograms counted other requests than this step's "
            "(another client, or a step whose TTFT was still growing between the two scrapes)")
_QUANTILES = (0.5, 0.95)
_TENTHS_PER_MS = 10  # the rows' latencies are in tenths of a millisecond


def _stat(tenths: np.ndarray) -> dict | None:
    """n, mean and nearest-rank quantiles (as the sketches) in ms of values in the rows' tenths of a ms (integers,
    as float64: exact), partitioned, not sorted (a 100k-request step's sorts were most of the split's cost)."""
    import numpy as np  # here: numpy only in a process that judges a step (tests/load/test_lean_imports.py)

    n = len(tenths)
    if not n:
        return None
    ranks = [min(n - 1, int(q * n)) for q in _QUANTILES]
    part = np.partition(tenths, ranks)
    out: dict = {"n": n, "mean_ms": round(int(tenths.sum()) / n / _TENTHS_PER_MS, 3)}
    out.update((f"p{round(q * 100)}_ms", round(int(part[k]) / _TENTHS_PER_MS, 3)) for q, k in zip(_QUANTILES, ranks,
                                                                                                    strict=True))
    return out


def ttft_split(rows: Sequence[list] | Mapping[str, Sequence[Any]], server: Server | None) -> dict | None:
    """The step's TTFT in parts (module docstring) from its request rows (or their ``columns``, a
    ``StepColumns``' arrays shared with the tail's); ``server``: the step's server summary (its ``stages``, if any).
    None without successful requests."""
    import numpy as np

    c = rows if isinstance(rows, Mapping) else columns(rows)
    ttft = floats(c, "ttft")
    ok = ~np.isnan(ttft)  # a failure has no TTFT: none of its parts count
    n_ok = int(ok.sum())
    if not n_ok:
        return None

    def known(name: str) -> tuple[np.ndarray, np.ndarray]:  # the successful requests that have the part
        part = floats(c, name)
        has = ok & ~np.isnan(part)
        return has, part[has]

    new = ok & (ints(c, "flags") & FLAG_NEW_CONNECTION).astype(bool)
    has_headers, headers = known("headers")
    has_connect, connect = known("connect")  # a connect time is a new connection's
    has_prefill, prefill = known("server_prefill")
    client: dict[str, Any] = {
        "ttft": _stat(ttft[ok]), "headers": _stat(headers),
        "headers_to_first_token": _stat(ttft[has_headers] - headers),
        "connect": _stat(connect[new[has_connect]]), "new_connection_share": round(int(new.sum()) / n_ok, 4),
        "send": _stat(known("send")[1]), "loop_lag": _stat(known("lag")[1])}
    out: dict = {"client": client}
    stages = {k: to_builtins(v) for k, v in server.stages.items()} \
        if server is not None and not isinstance(server.stages, UnsetType) else {}
    if len(prefill):
        out["server"] = {"source": "per request: timings.prompt_ms (llama.cpp)",
                         "prefill": _stat(prefill), "queue": UNKNOWN,
                         "network_client_queue": _stat(ttft[has_prefill] - prefill)}
    elif stages.get("ttft"):
        src = "per step: the server's /metrics histograms (bucket bounds: [estimate, low, high] ms)"
        s_ttft = stages["ttft"]
        # Means subtract; quantiles do not (a p50 minus a bucket's bounds is no request's part, and went negative).
        net: dict = {"mean_ms": round(client["ttft"]["mean_ms"] - s_ttft["mean_ms"], 3)}
        if net["mean_ms"] < 0:
            net["note"] = NEGATIVE
        out["server"] = {"source": src, "ttft": s_ttft, "queue": stages.get("queue_time") or UNKNOWN,
                         "prefill": stages.get("prefill_time") or UNKNOWN, "network_client": net}
    else:
        note = server.stages_note if server is not None else UNSET
        out["server"] = {"source": UNKNOWN if isinstance(note, UnsetType) else note}
    return out
