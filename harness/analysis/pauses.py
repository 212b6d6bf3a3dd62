"""Server-wide pauses, seen from the client: moments when (nearly) every stream on a worker stopped at once. Pure.

Each request row carries its stream's long silences (``metrics.rows.long_gaps``: gaps between output chunks of at
least 4× the stream's own median gap and 5 ms). A *pause* on a worker is an interval in which at least
``SILENT_SHARE`` (90%) and at least ``MIN_STREAMS`` (3) of the worker's streams then decoding (first chunk
received, last not yet; streams of at least 5 chunks) were inside such a silence, lasting at least ``min_ms``
(the caller passes 4× the step's ITL p50, 5 ms at least). Streams still waiting for their first token are neither
counted nor required: at overload most streams wait, and their silence is the queue, not a pause.

Pauses of several workers that overlap (within ``MERGE_MS``: their step clocks start a few ms apart) are one pause
"on N workers": seen on every worker, it is the server (or the network to it); seen on one worker of several, it
is more likely that worker's host. Periodicity: at least 4 pauses (of at least half the median length: a blip
between them is left out) whose start-to-start intervals vary by less than ``PERIODIC_CV`` of their median
("every 2.0 s ± 0.1").

Each request is credited with the time it was in flight (send to end) through a pause seen on its own worker or on
two workers or more: ``in_pause_ms``. Tail attribution tests it as a flag (``tail_features``).

Cost: rows without a long silence cost one pass; with pauses, the decoding intervals of the worker are sorted once
(two sorts of its rows' ints) and only those inside a candidate window are swept.
"""

from __future__ import annotations

import itertools
import statistics
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["MERGE_MS", "MIN_STREAMS", "PERIODIC_CV", "SILENT_SHARE", "Pause", "StepPauses", "find_pauses",
           "in_pause_ms"]

SILENT_SHARE = 0.9
MIN_STREAMS = 3
MERGE_MS = 10.0
PERIODIC_CV = 0.25
LISTED = 50
"""Pauses listed in the summary (the figures count them all)."""
_TENTHS_PER_MS = 10


@dataclass(frozen=True)
class Pause:
    start_ms: float
    """Since the step began (the rows' send-time clock)."""
    length_ms: float
    streams: int
    """Silent streams at its fullest (summed over workers)."""
    decoding: int
    """Streams decoding then (summed over workers)."""
    workers: tuple = ()

    @property
    def end_ms(self) -> float:
        return self.start_ms + self.length_ms


@dataclass(frozen=True)
class StepPauses:
    pauses: list[Pause] = field(default_factory=list)
    workers: int = 0
    """Workers whose rows were looked at."""
    min_ms: float = 5.0

    @property
    def period(self) -> tuple[float, float] | None:
        """(median, sd) of the start-to-start intervals in seconds, when at least 4 pauses recur that regularly; a
        pause shorter than half the median length (a scheduling blip among the server's stalls) is left out."""
        lengths = [p.length_ms for p in self.pauses]
        cut = statistics.median(lengths) / 2 if lengths else 0.0
        starts = [p.start_ms for p in self.pauses if p.length_ms >= cut]
        if len(starts) < 4:
            return None
        gaps = [(b - a) / 1000 for a, b in itertools.pairwise(starts)]
        med, sd = statistics.median(gaps), statistics.pstdev(gaps)
        return (med, sd) if med > 0 and sd / med < PERIODIC_CV else None

    def words(self) -> str:
        """"9 pauses of ~200 ms (max 230), every ~2.0 s ± 0.1, on 2 of 2 workers": for the tail's line."""
        n = len(self.pauses)
        if not n:
            return ""
        lengths = [p.length_ms for p in self.pauses]
        out = f"{n} pause{'s' * (n != 1)} of ~{statistics.median(lengths):.0f} ms"
        out += f" (max {max(lengths):.0f})" if n > 1 and max(lengths) > 1.5 * statistics.median(lengths) else ""
        period = self.period
        if period:
            digits = 1 if period[0] >= 1 else 2
            out += f", every ~{period[0]:.{digits}f} s ± {period[1]:.{digits}f}"
        seen = {w for p in self.pauses for w in p.workers}
        if self.workers > 1:
            out += f", on {len(seen)} of {self.workers} workers" if len(seen) < self.workers else \
                f", on {'both' if self.workers == 2 else 'all'} workers"
        return out

    def to_dict(self) -> dict:
        period = self.period
        lengths = [p.length_ms for p in self.pauses]
        return {"count": len(self.pauses), "min_ms": round(self.min_ms, 1), "workers": self.workers,
                "median_ms": round(statistics.median(lengths), 1) if lengths else None,
                "max_ms": round(max(lengths), 1) if lengths else None,
                "period_s": None if period is None else round(period[0], 3),
                "period_sd_s": None if period is None else round(period[1], 3),
                "words": self.words(),
                "listed": [{"start_s": round(p.start_ms / 1000, 3), "length_ms": round(p.length_ms, 1),
                            "streams": p.streams, "decoding": p.decoding, "workers": list(p.workers)}
                           for p in self.pauses[:LISTED]]}


def find_pauses(t_ms: Sequence[int], ttft: Sequence, e2e: Sequence, gaps: Sequence, worker: Sequence, *,
                min_ms: float = 5.0) -> StepPauses:
    """The step's pauses from its rows' columns (``metrics.rows``: send ms, TTFT and E2E in tenths of a ms, gaps)."""
    by_worker: dict = {}
    for i, g in enumerate(gaps):
        if g is not None:
            by_worker.setdefault(worker[i], []).append(i)
    found: list[Pause] = []
    for w, rows in by_worker.items():
        found += _worker_pauses(w, rows, t_ms, ttft, e2e, gaps, min_ms)
    return StepPauses(_merge(found), workers=len(set(worker)), min_ms=min_ms)


def _worker_pauses(w, rows: list[int], t_ms, ttft, e2e, gaps, min_ms: float) -> list[Pause]:
    silent: list[tuple[float, int]] = []
    for i in rows:
        g = gaps[i]
        for k in range(0, len(g), 2):
            a = t_ms[i] + g[k]
            silent += ((a, 1), (a + g[k + 1], -1))
    if len(silent) < 2 * MIN_STREAMS:
        return []
    silent.sort(key=lambda e: (e[0], e[1]))  # ends first at a tie
    windows = _windows(silent)
    if not windows:
        return []
    dec = [i for i in rows if ttft[i] is not None and e2e[i] is not None]
    starts = sorted(t_ms[i] + ttft[i] / _TENTHS_PER_MS for i in dec)
    ends = sorted(t_ms[i] + e2e[i] / _TENTHS_PER_MS for i in dec)
    times = [e[0] for e in silent]
    running = [0]
    for _, d in silent:
        running.append(running[-1] + d)
    out = []
    for a, b in windows:  # the state just before a, then every event in [a, b]
        lo, hi = bisect_left(times, a), bisect_right(times, b)
        events = silent[lo:hi]
        events += [(t, 1, "d") for t in starts[bisect_left(starts, a):bisect_right(starts, b)]]
        events += [(t, -1, "d") for t in ends[bisect_left(ends, a):bisect_right(ends, b)]]
        out += _sweep(w, a, b, sorted(events, key=lambda e: (e[0], e[1])),
                      decoding=bisect_left(starts, a) - bisect_left(ends, a), silent=running[lo], min_ms=min_ms)
    return out


def _windows(silent: list[tuple[float, int]]) -> list[tuple[float, float]]:
    """Intervals in which at least MIN_STREAMS silences overlap: the only places a pause can be."""
    out, s, opened = [], 0, None
    for t, d in silent:
        s += d
        if s >= MIN_STREAMS and opened is None:
            opened = t
        elif s < MIN_STREAMS and opened is not None:
            out.append((opened, t))
            opened = None
    return out


def _sweep(w, a: float, b: float, events: list, *, decoding: int, silent: int, min_ms: float) -> list[Pause]:
    out, opened, peak_s, peak_d, t_prev = [], None, 0, 0, a
    for t, d, *kind in [*events, (b, 0)]:
        if t > t_prev:  # the state held over (t_prev, t)
            holds = silent >= MIN_STREAMS and silent >= SILENT_SHARE * decoding
            if holds:
                opened = t_prev if opened is None else opened
                peak_s, peak_d = max(peak_s, silent), max(peak_d, decoding)
            elif opened is not None:
                out.append((opened, t_prev, peak_s, peak_d))
                opened, peak_s, peak_d = None, 0, 0
        t_prev = t
        if kind:
            decoding += d
        else:
            silent += d
    if opened is not None:
        out.append((opened, b, peak_s, peak_d))
    return [Pause(s, e - s, ps, pd, (w,)) for s, e, ps, pd in out if e - s >= min_ms]


def _merge(pauses: list[Pause]) -> list[Pause]:
    out: list[Pause] = []
    for p in sorted(pauses, key=lambda p: p.start_ms):
        last = out[-1] if out else None
        if last is not None and p.start_ms <= last.end_ms + MERGE_MS:
            end = max(last.end_ms, p.end_ms)
            same = set(p.workers) <= set(last.workers)  # the same worker again: its streams are not new ones
            out[-1] = Pause(last.start_ms, end - last.start_ms,
                            max(last.streams, p.streams) if same else last.streams + p.streams,
                            max(last.decoding, p.decoding) if same else last.decoding + p.decoding,
                            tuple(sorted({*last.workers, *p.workers}, key=str)))
        else:
            out.append(p)
    return out


def in_pause_ms(idx: Sequence[int], t_ms: Sequence[int], e2e: Sequence, worker: Sequence,
                pauses: StepPauses) -> list:
    """For rows ``idx``: ms in flight (send to end) through a pause seen on the row's worker or on ≥ 2 workers;
    None for a row without an end (a failure)."""
    ps = pauses.pauses
    starts = [p.start_ms for p in ps]
    out: list = []
    for i in idx:
        if e2e[i] is None:
            out.append(None)
            continue
        a, b = t_ms[i], t_ms[i] + e2e[i] / _TENTHS_PER_MS
        total = 0.0
        for k in range(max(0, bisect_left(starts, a) - 1), bisect_right(starts, b)):
            p = ps[k]
            if worker[i] in p.workers or len(p.workers) > 1:
                total += max(0.0, min(b, p.end_ms) - max(a, p.start_ms))
        out.append(round(total))
    return out
