"""Tail attribution of a step's request rows as the workers ship them (``metrics.rows``). Pure.

The rows become columns (one list per feature) straight away: no object per request, so the master's cost per
judged step stays ~0.2 s at 100k requests (``python -m benchmarks.tail_attribution``, ``master_step``).
"""

from __future__ import annotations

import bisect
import contextlib
import gc
from collections.abc import Iterator, Sequence
from operator import itemgetter

from harness.analysis.tail import StepTails, TailParams, explain_tail
from harness.metrics.rows import FLAG_AFTER_ERROR, FLAG_NEW_CONNECTION, ROW_FIELDS

__all__ = ["NEAREST_S", "columns", "explain_rows", "gc_paused"]

NEAREST_S = 2.0
"""A server sample farther than this from a request's send says nothing about it (the scrape every 0.5 s stalled)."""
_AT = {name: i for i, name in enumerate(ROW_FIELDS)}


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No garbage collection inside: a step's analysis allocates some 10^5-10^6 small objects and no cycles, and a
    collection in the middle costs ~10% of it (213 vs 192 ms at 100k requests)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def columns(rows: Sequence[list]) -> dict[str, list]:
    """The rows as one tuple per ``ROW_FIELDS`` name (raw: tenths of ms, flags as bits). Rows from the wire were
    checked as they came (``Bucket.from_wire``); a row of another length: ValueError."""
    if rows and len(rows[0]) != len(ROW_FIELDS):  # (each row's length was checked on the wire: metrics.rows)
        raise ValueError(f"a request row has {len(ROW_FIELDS)} fields, got {rows[0]!r:.80}")
    return {name: list(map(itemgetter(i), rows)) for i, name in enumerate(ROW_FIELDS)}  # C-level: ~3 ms a field


def _seconds(values: list) -> list:
    return [None if v is None else v / 10_000 for v in values]


def explain_rows(rows: Sequence[list] | dict[str, list], params: TailParams | None = None, *,
                 waiting: Sequence[tuple[float, float]] = (), started: float = 0.0) -> StepTails:
    """``explain_tail`` of ``rows`` (or their ``columns``, shared with the TTFT split). ``waiting``: the server's
    waiting queue as scraped, (time, requests) on the
    clock of ``started``, the step's start: each request gets the sample nearest its send. A failed request has no
    latency and counts only as a feature of the request after it on its connection (``after_error``)."""
    c = rows if isinstance(rows, dict) else columns(rows)
    t_in_step = [t / 1000 for t in c["t_ms"]]
    times = [t for t, _ in waiting]
    data = {"ttft_s": _seconds(c["ttft"]), "tpot_s": _seconds(c["tpot"]), "e2e_s": _seconds(c["e2e"]),
            "ttfo_s": _seconds(c["ttfo"]), "prompt_tokens": c["prompt"], "output_tokens": c["output"],
            "cached_tokens": c["cached"], "new_connection": [bool(f & FLAG_NEW_CONNECTION) for f in c["flags"]],
            "after_error": [bool(f & FLAG_AFTER_ERROR) for f in c["flags"]], "worker": c["worker"],
            "t_in_step_s": t_in_step, "in_flight": c["in_flight"], "turn": c["turn"],
            "server_waiting": [_nearest(times, waiting, started + t) for t in t_in_step] if times
            else [None] * len(t_in_step)}
    return explain_tail(data, params or TailParams())


def _nearest(times: list[float], samples: Sequence[tuple[float, float]], t: float) -> int | None:
    i = bisect.bisect_left(times, t)
    best = min((j for j in (i - 1, i) if 0 <= j < len(times)), key=lambda j: abs(times[j] - t))
    return round(samples[best][1]) if abs(times[best] - t) <= NEAREST_S else None
