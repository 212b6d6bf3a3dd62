"""Compact per-request rows: what tail attribution needs of each request, shipped with the step's deltas. Pure.

A row is a list of small integers (msgpack packs most in 1-3 bytes; ~25-35 bytes a request on the wire), in
``ROW_FIELDS`` order; None where the request has no value:

- ``ttft``, ``tpot``, ``e2e``, ``ttfo``: latencies in tenths of a millisecond (0.1 ms steps: finer than any tail
  that needs explaining, and a TPOT of 7.4 ms stays 7.4);
- ``prompt``, ``output``, ``cached``: tokens (server usage); ``in_flight`` on the worker at send; ``turn`` (sessions);
- ``flags``: 1 new connection, 2 after a failed request on the same connection, 4 failed, 8 some chunk times
  came from a late receive that brought several chunks (the reader fell behind: ``RequestRecord.late_chunks``),
  16 the first of them, 32 it asked for an exact output length, 64 it ended before it (``short_answer``);
- ``t_ms``: the send, in ms since the worker's step began (the master puts it on its own clock for joins);
- ``worker``: the worker's index;
- ``headers``, ``connect`` (new connections), ``server_prefill`` (llama.cpp's ``timings.prompt_ms``): the parts of
  TTFT the client and the server can name, in tenths of a millisecond (``analysis.why.decompose``);
- ``gaps``: the stream's silences between output chunks far longer than its own usual gap, and before its first
  token when the server held it (``long_gaps``), flat ``[start, length, ...]`` in ms since the send; ``[]`` when
  it had none, None when the stream was too short to say (fewer than ``GAP_MIN_CHUNKS`` chunks) or failed. A
  silence that ended in a late receive of several chunks has a negative length: the reader was behind and the
  kernel dated those chunks by the newest (a starved client would otherwise show every stream silent at once). The
  master finds server-wide pauses in them (``analysis.why.pauses``);
- ``send`` (writing the request, its connect left out) and ``lag`` (the worker's loop lag just before the send):
  the client's own part, in tenths of a millisecond; None where not measured;
- ``class``: the request's class in ``workload.mix`` (its index), ``PROBE_CLASS`` (−1) for a probe request
  (``load.probes``); None otherwise.

Rows of an older kneecap (15 fields, before ``gaps``; 16, before ``send`` and ``lag``; 18, before ``class``) are
read with the missing fields None (``check_rows``).

``tests/metrics/test_rows.py`` keeps the golden bytes of one row.
"""

from __future__ import annotations

import itertools
from operator import sub

from harness.metrics.record import RequestRecord

__all__ = ["FLAG_AFTER_ERROR", "FLAG_FAILED", "FLAG_LATE_FIRST", "FLAG_LATE_STAMPS", "FLAG_LENGTH_ASKED",
           "FLAG_NEW_CONNECTION", "FLAG_SHORT",
           "GAP_FACTOR", "GAP_MIN_CHUNKS", "GAP_MIN_S", "PROBE_CLASS", "ROW_FIELDS", "check_rows", "decode_row",
           "encode_row", "held_first", "long_gaps"]

ROW_FIELDS = ("ttft", "tpot", "e2e", "ttfo", "prompt", "output", "cached", "flags", "in_flight", "t_ms", "turn",
              "worker", "headers", "connect", "server_prefill", "gaps", "send", "lag", "class")
_OLDER_LENGTHS = (15, 16, 18)
_GAPS = ROW_FIELDS.index("gaps")
FLAG_NEW_CONNECTION, FLAG_AFTER_ERROR, FLAG_FAILED, FLAG_LATE_STAMPS, FLAG_LATE_FIRST = 1, 2, 4, 8, 16
FLAG_LENGTH_ASKED, FLAG_SHORT = 32, 64
"""A request that asked for exactly ``max_tokens`` of output, and one of those that got fewer
(``RequestRecord.exact_length``, ``short_answer``)."""
"""``FLAG_LATE_FIRST``: the first output chunk came in a late receive together with the chunks after it, dated by
the newest of them (``client/inflight.py``): its time, the TTFT, may be the reader's lateness, not the server's."""
PROBE_CLASS = -1
"""The ``class`` of a probe's row (``load.probes``): kept apart from the step's requests by the master."""
_LATENCY = 10_000  # tenths of a millisecond per second
_MAX_TENTHS = 2 ** 62
"""The largest latency a row holds (~14.6 million years): a server's absurd timing (llama.cpp's ``prompt_ms`` may be
any finite float) is kept as this, not as an int past the int64 columns (``metrics.row_columns``) or an inf."""
GAP_FACTOR = 4.0
"""A silence counts when it is at least this many times the stream's median gap between chunks..."""
GAP_MIN_S = 0.005
"""... and at least this long: below it, a gap is the OS's scheduling, not the server's."""
GAP_MIN_CHUNKS = 5
"""Fewer chunks (four gaps) say too little about a stream's usual gap."""


def long_gaps(chunk_times: list[float], late: list[int] | None = None) -> list[int] | None:
    """The silences between consecutive ``chunk_times`` (seconds since the send) of at least ``GAP_FACTOR`` × their
    median and ``GAP_MIN_S``, flat ``[start_ms, length_ms, ...]``; None for fewer than ``GAP_MIN_CHUNKS`` chunks.
    ``late``: chunks that began a late receive (``RequestRecord.late_chunks``): the silence before each may be the
    reader's, so it comes with a negative length (the stream's state then unknown: neither silent nor streaming).
    The median is of the gaps between receives (the lower one, of two at least): chunks that came in one receive (a
    server writing several at once, a gateway's buffer, a stalled server's flush) share its time, and their zero
    gaps are no measure of the stream's pace.
    A first receive that brought far more chunks than the stream's receives usually do (``held_first``) is a silence
    too, before the first token: the server had made those tokens and held them (a stall before the first token
    shows no gap between chunks, only a late TTFT)."""
    t = chunk_times
    if len(t) < GAP_MIN_CHUNKS:
        return None
    gaps = list(map(sub, t[1:], t[:-1]))
    longest = max(gaps)
    if longest < GAP_MIN_S and t[1] != t[0]:  # the usual case at a few ms a token: no sort
        return []
    paced = sorted(g for g in gaps if g > 0)
    if len(paced) < 2:
        return [] if longest < GAP_MIN_S else None  # one receive (a gateway's buffer): no silence within it
    pace = paced[(len(paced) - 1) // 2]
    limit = max(GAP_MIN_S, GAP_FACTOR * pace)
    out: list[int] = []
    if t[1] == t[0]:
        held = held_first(t, pace)
        if held >= limit:
            start = max(0.0, t[0] - held)
            out += (round(start * 1000), -round((t[0] - start) * 1000) if late and late[0] == 0
                    else round((t[0] - start) * 1000))
    if longest < limit:
        return out
    for i, g in enumerate(gaps):
        if g >= limit:
            out += (round(t[i] * 1000), -round(g * 1000) if late and i + 1 in late else round(g * 1000))
    return out


def held_first(chunk_times: list[float], pace: float) -> float:
    """Seconds the server held a stream's first token, as its first receive shows: the chunks it brought beyond the
    stream's usual receive (the lower median of the others' counts), at ``pace`` (the median gap between receives)
    per usual receive; 0 when it brought no more than usual."""
    runs, n = [], 1
    for a, b in itertools.pairwise(chunk_times):
        if b == a:
            n += 1
        else:
            runs.append(n)
            n = 1
    runs.append(n)
    if len(runs) < 2:
        return 0.0
    usual = sorted(runs[1:])[(len(runs) - 2) // 2]
    return max(0, runs[0] - usual) * pace / usual


def _tenths(s: float | None) -> int | None:
    if s is None or not s >= 0:  # NaN: unknown too
        return None
    t = s * _LATENCY
    return round(t) if t < _MAX_TENTHS else _MAX_TENTHS


def encode_row(rec: RequestRecord, sent_in_step_s: float, worker: int) -> list:
    """``rec`` as a row; ``sent_in_step_s``: its send, in seconds since this worker's step began."""
    ok = rec.error is None
    flags = (FLAG_NEW_CONNECTION if rec.new_connection else 0) | (FLAG_AFTER_ERROR if rec.after_error else 0) \
        | (0 if ok else FLAG_FAILED) | (FLAG_LATE_STAMPS if rec.late_chunks else 0) \
        | (FLAG_LATE_FIRST if rec.late_chunks and rec.late_chunks[0] == 0 else 0) \
        | (FLAG_LENGTH_ASKED if rec.exact_length else 0) | (FLAG_SHORT if ok and rec.short_answer else 0)
    return [_tenths(rec.ttft_s) if ok else None, _tenths(rec.tpot_s), _tenths(rec.e2e_s) if ok else None,
            _tenths(rec.ttfo_s) if ok else None, rec.prompt_tokens, rec.output_tokens, rec.cached_tokens, flags,
            rec.in_flight, max(0, round(sent_in_step_s * 1000)), rec.turn, worker,
            _tenths(rec.headers_s) if ok else None, _tenths(rec.connect_s), _tenths(rec.server_prefill_s),
            long_gaps(rec.chunk_times, rec.late_chunks) if ok else None,
            None if rec.sent_s is None else _tenths(rec.sent_s - (rec.connect_s or 0.0)), _tenths(rec.loop_lag_s),
            rec.class_index]


def decode_row(row: list) -> dict:
    """A row as named values (latencies in seconds, flags as booleans); raises ValueError on a malformed row."""
    if not isinstance(row, (list, tuple)) or len(row) != len(ROW_FIELDS):
        raise ValueError(f"a request row has {len(ROW_FIELDS)} fields, got {row!r:.80}")
    (ttft, tpot, e2e, ttfo, prompt, output, cached, flags, in_flight, t_ms, turn, worker, headers, connect, prefill,
     gaps, send, lag, cls) = row
    flags = int(flags or 0)
    return {"ttft_s": _seconds(ttft), "tpot_s": _seconds(tpot), "e2e_s": _seconds(e2e), "ttfo_s": _seconds(ttfo),
            "prompt_tokens": prompt, "output_tokens": output, "cached_tokens": cached,
            "new_connection": bool(flags & FLAG_NEW_CONNECTION), "after_error": bool(flags & FLAG_AFTER_ERROR),
            "failed": bool(flags & FLAG_FAILED), "late_stamps": bool(flags & FLAG_LATE_STAMPS),
            "late_first": bool(flags & FLAG_LATE_FIRST), "length_asked": bool(flags & FLAG_LENGTH_ASKED),
            "short_answer": bool(flags & FLAG_SHORT), "in_flight": in_flight,
            "t_in_step_s": t_ms / 1000, "turn": turn,
            "worker": worker, "headers_s": _seconds(headers), "connect_s": _seconds(connect),
            "server_prefill_s": _seconds(prefill), "gaps_ms": gaps, "send_s": _seconds(send),
            "loop_lag_s": _seconds(lag), "class_index": cls}


def check_rows(rows: list) -> None:
    """ValueError unless ``rows`` is a list of rows of ``ROW_FIELDS``' length whose flags, send times and workers
    are integers (what the master needs before it reads them by column). A row of an older kneecap (``_OLDER_LENGTHS``)
    gets the fields it lacks as None, in place: unknown, the rest is the same."""
    n = len(ROW_FIELDS)
    for row in rows:
        if isinstance(row, list) and len(row) in _OLDER_LENGTHS:
            row.extend([None] * (n - len(row)))
        if not isinstance(row, list) or len(row) != n or not all(isinstance(row[i], int) for i in (7, 9, 11)):
            raise ValueError(f"a request row has {n} fields with integer flags, send time and worker, got {row!r:.80}")


def _seconds(tenths: int | None) -> float | None:
    return None if tenths is None else tenths / _LATENCY
