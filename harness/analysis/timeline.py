"""A step's requests over time, for the report's timeline: each from its send to its end with its first token, and
how many were in flight. Pure.

At most ``LIMIT`` requests are kept, every k-th in send order when the step had more (a stride keeps the picture's
density: a burst stays a burst); the in-flight curve counts every request. Times are on the rows' clock (seconds
since the step began, as the server-wide pauses' ``start_s``), so the pauses can be drawn over it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harness.analysis.step_columns import floats, ints
from harness.metrics.rows import FLAG_FAILED
from harness.summary import Timeline

__all__ = ["BINS", "LIMIT", "timeline"]

LIMIT = 300
"""Requests drawn a step: ~10 KB of summary.json, and as many lines as a chart shows apart."""
BINS = 100
"""Points of the in-flight curve."""
_TENTHS_PER_MS = 10


def timeline(cols: Mapping[str, Sequence[Any]], limit: int = LIMIT) -> Timeline | None:
    """The step's ``Timeline`` from its request-row columns (``rows``: ``(send_s, ttft_ms, e2e_ms, class, failed)``);
    None without requests. A failed request has no TTFT or end (the rows keep none): it is drawn as its send alone
    and counts in flight for no time."""
    import numpy as np  # here: numpy only in a process that judges a step (tests/load/test_lean_imports.py)

    send_ms = ints(cols, "t_ms").astype(np.float64)
    n = len(send_ms)
    if not n:
        return None
    ttft, e2e = floats(cols, "ttft") / _TENTHS_PER_MS, floats(cols, "e2e") / _TENTHS_PER_MS
    failed = (ints(cols, "flags") & FLAG_FAILED).astype(bool)
    klass = floats(cols, "class")
    end_ms = send_ms + np.nan_to_num(e2e, nan=0.0)
    order = np.argsort(send_ms, kind="stable")
    drawn = order if n <= limit else order[np.linspace(0, n - 1, limit).round().astype(np.int64)]
    rows = [(round(float(send_ms[i]) / 1000, 3), _ms(ttft[i]), _ms(e2e[i]),
             None if np.isnan(klass[i]) else int(klass[i]), int(failed[i])) for i in drawn]
    span_ms = max(float(end_ms.max()), 1.0)
    bin_ms = span_ms / BINS
    mids = (np.arange(BINS) + 0.5) * bin_ms
    starts, ends = np.sort(send_ms), np.sort(end_ms)
    in_flight = np.searchsorted(starts, mids, "right") - np.searchsorted(ends, mids, "right")
    return Timeline(requests=n, drawn=len(rows), end_s=round(span_ms / 1000, 3), rows=rows,
                    bin_s=round(bin_ms / 1000, 4), in_flight=[int(k) for k in in_flight])


def _ms(v: float) -> float | None:
    return None if v != v else round(float(v), 1)
