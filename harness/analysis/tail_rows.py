"""Tail attribution of a step's request rows as the workers ship them (``metrics.rows``). Pure."""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from harness.analysis.tail import StepTails, TailParams, TailRow, explain_tail
from harness.metrics.rows import decode_row

__all__ = ["NEAREST_S", "explain_rows"]

_NOT_FEATURES = ("failed", "headers_s", "connect_s", "server_prefill_s")
"""Row values that are parts of the latency (``analysis.decompose``), not features of the request."""

NEAREST_S = 2.0
"""A server sample farther than this from a request's send says nothing about it (the scrape every 0.5 s stalled)."""


def explain_rows(rows: Sequence[list], params: TailParams | None = None, *,
                 waiting: Sequence[tuple[float, float]] = (), started: float = 0.0) -> StepTails:
    """``explain_tail`` of ``rows``. ``waiting``: the server's waiting queue as scraped, (time, requests) on the
    clock of ``started``, the step's start: each request gets the sample nearest its send. A failed request has no
    latency and counts only as a feature of the request after it on its connection (``after_error``)."""
    times = [t for t, _ in waiting]
    tail_rows = []
    for row in rows:
        d = decode_row(row)
        for part in _NOT_FEATURES:
            del d[part]
        if times:
            d["server_waiting"] = _nearest(times, waiting, started + d["t_in_step_s"])
        tail_rows.append(TailRow(**d))
    return explain_tail(tail_rows, params or TailParams())


def _nearest(times: list[float], samples: Sequence[tuple[float, float]], t: float) -> int | None:
    i = bisect.bisect_left(times, t)
    best = min((j for j in (i - 1, i) if 0 <= j < len(times)), key=lambda j: abs(times[j] - t))
    return round(samples[best][1]) if abs(times[best] - t) <= NEAREST_S else None
