"""Tail attribution of a step's request rows as the workers ship them (``metrics.rows``). Pure.

The rows are kept by column as the reports come (``metrics.row_columns``): no object per request. The latencies
stay in tenths of a millisecond (compared int to int) and the flags, send times and server queue are derived only
for the rows tested (``tail.explain_columns``). A judged step of 100k requests, tails + TTFT split, costs 3.4-3.6×
a ``sorted()`` of its TTFTs in the same run (66 ms of CPU on a 2-CPU VM; 12× when the rows were lists of rows,
7-11× as lists by column); when every stream went through two of 29 server-wide pauses, 8-9× (157-161 ms)
(``python -m benchmarks.tail_attribution``: ``master_step``, ``master_step_pauses``; ±30% from run to run there).
"""

from __future__ import annotations

import bisect
import contextlib
import gc
from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import chain
from typing import Any

from harness.analysis.step_columns import StepColumns, floats, ints
from harness.analysis.why.attribute import StepTails, TailParams, explain_columns
from harness.analysis.why.pauses import StepPauses, find_pauses, in_pause_ms
from harness.analysis.why.prefill_hol import LongPrefills, long_prompt_threshold
from harness.metrics.rows import (
    FLAG_AFTER_ERROR,
    FLAG_LATE_FIRST,
    FLAG_LATE_STAMPS,
    FLAG_NEW_CONNECTION,
    GAP_FACTOR,
    GAP_MIN_S,
    ROW_FIELDS,
)

__all__ = ["NEAREST_S", "columns", "explain_rows", "gc_paused"]

NEAREST_S = 2.0
"""A server sample farther than this from a request's send says nothing about it (the scrape every 0.5 s stalled)."""
_TENTHS = 10_000
"""The rows' latencies: tenths of a millisecond per second (``metrics.rows``)."""


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
    """The rows as one list per ``ROW_FIELDS`` name (raw: tenths of ms, flags as bits). Rows from the wire were
    checked as they came (``Bucket.from_wire``); a row of another length: ValueError."""
    k = len(ROW_FIELDS)
    # One C-level copy into a flat list, then a strided slice per field: ~2.5× cheaper than an itemgetter pass per
    # field (100k scattered rows read 15 times). Every row's length was checked on the wire (metrics.rows); the
    # total catches a row of another length from anywhere else (unless another makes up for it exactly).
    flat = list(chain.from_iterable(rows))
    if len(flat) != k * len(rows):
        bad = next((r for r in rows if len(r) != k), rows[0] if rows else None)
        raise ValueError(f"a request row has {k} fields, got {bad!r:.80}")
    return {name: flat[i::k] for i, name in enumerate(ROW_FIELDS)}


def explain_rows(rows: Sequence[list] | Mapping[str, Sequence[Any]], params: TailParams | None = None, *,
                 waiting: Sequence[tuple[float, float]] = (), started: float = 0.0,
                 itl_p50_s: float | None = None) -> StepTails:
    """``explain_tail`` of ``rows`` (or their ``columns``, shared with the TTFT split). ``waiting``: the server's
    waiting queue as scraped, (time, requests) on the clock of ``started``, the step's start: each request gets the
    sample nearest its send. A failed request has no latency and counts only as a feature of the request after it
    on its connection (``after_error``). The rows' stream silences give the step's server-wide pauses
    (``analysis.why.pauses``; at least ``GAP_FACTOR`` × the step's ``itl_p50_s`` long) and each request's ``in_pause``
    (``in_pause_first``: before its first token); long prompts, ``behind_long_prefill``
    (``analysis.why.prefill_hol``)."""
    c = rows if isinstance(rows, StepColumns) else StepColumns(rows if isinstance(rows, Mapping) else columns(rows))
    flags, t_ms = ints(c, "flags"), ints(c, "t_ms")
    times = [t for t, _ in waiting]
    sent = t_ms

    def waiting_at(idx: list[int]) -> list:
        return [_nearest(times, waiting, started + sent[i] / 1000) for i in idx] if times else [None] * len(idx)

    def flag(bit: int) -> Callable[[list[int]], list]:
        return lambda idx: (flags[idx] & bit).astype(bool).tolist()

    # Numbers as float64 arrays made once from the rows' int64 columns (StepColumns; the TTFT split and the pauses
    # read the same ones), in tenths of a millisecond: only ranks and a few values are read. The flags, send times,
    # queue and workers are derived for the rows tested only.
    data = {"ttft_s": floats(c, "ttft"), "tpot_s": floats(c, "tpot"), "e2e_s": floats(c, "e2e"),
            "ttfo_s": floats(c, "ttfo"), "prompt_tokens": floats(c, "prompt"), "output_tokens": floats(c, "output"),
            "cached_tokens": floats(c, "cached"), "in_flight": floats(c, "in_flight"), "turn": floats(c, "turn")}
    derived = {"new_connection": flag(FLAG_NEW_CONNECTION), "after_error": flag(FLAG_AFTER_ERROR),
               "late_stamps": flag(FLAG_LATE_STAMPS), "late_first": flag(FLAG_LATE_FIRST),
               "t_in_step_s": lambda idx: t_ms[idx] / 1000, "server_waiting": waiting_at,
               "worker": lambda idx: ints(c, "worker")[idx].tolist(),
               "send_ms": lambda idx: floats(c, "send")[idx] / 10,
               "loop_lag_ms": lambda idx: floats(c, "lag")[idx] / 10}
    pauses, words = _stream_features(c, itl_p50_s, derived)
    return explain_columns(data, params or TailParams(), per_s=_TENTHS, derived=derived, pauses=pauses, words=words)


def _stream_features(c: StepColumns, itl_p50_s: float | None,
                     derived: dict[str, Callable[[list[int]], list]]) -> tuple[StepPauses | None, dict[str, str]]:
    """``in_pause`` (when the rows carry stream silences) and ``behind_long_prefill`` (when the step has long
    prompts) into ``derived``; the step's pauses and the words with this step's figures. A pause that ended as a long
    prompt's first token came was that prefill: it counts for ``behind_long_prefill``, not ``in_pause``."""
    t_ms, ttft, e2e, worker, pauses, words = ints(c, "t_ms"), floats(c, "ttft"), floats(c, "e2e"), ints(
        c, "worker"), None, {}
    threshold = long_prompt_threshold(floats(c, "prompt"))
    hol = LongPrefills(t_ms, ttft, floats(c, "prompt"), threshold) if threshold is not None else None
    if c["gaps"].count(None) < len(c["gaps"]):  # C-level: most steps' rows all carry it, or none does
        min_ms = max(GAP_MIN_S, GAP_FACTOR * (itl_p50_s or 0.0)) * 1000
        pauses = find_pauses(t_ms, ttft, e2e, c["gaps"], worker, min_ms=min_ms)
        if hol is not None:
            pauses = pauses.without_prefills(hol.first_tokens, hol.first_token_prompts)
        found = pauses
        derived["in_pause"] = lambda idx: [None if ms is None else ms > 0
                                           for ms in in_pause_ms(idx, t_ms, e2e, worker, found.pauses)]
        derived["in_pause_first"] = lambda idx: [None if ms is None else ms > 0  # send to the first token
                                                 for ms in in_pause_ms(idx, t_ms, ttft, worker, found.pauses)]
    if hol is not None:
        held = pauses.prefills if pauses is not None else []

        def behind(idx: list[int]) -> list:  # waited beside a long prefill, or streamed through one
            through = in_pause_ms(idx, t_ms, e2e, worker, held) if held else [None] * len(idx)
            return [b if b is None else b or bool(m) for b, m in zip(hol.behind(idx), through, strict=True)]

        derived["behind_long_prefill"] = behind
        words["hol"] = (f"head-of-line blocking behind long prefills (prompts over {threshold:,} tokens); consider "
                        "chunked prefill")
    return pauses, words


def _nearest(times: list[float], samples: Sequence[tuple[float, float]], t: float) -> int | None:
    i = bisect.bisect_left(times, t)
    best = min((j for j in (i - 1, i) if 0 <= j < len(times)), key=lambda j: abs(times[j] - t))
    return round(samples[best][1]) if abs(times[best] - t) <= NEAREST_S else None
