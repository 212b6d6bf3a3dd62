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
between them is left out) whose start-to-start intervals vary by less than ``PERIODIC_CV`` of their median, or 3
whose two intervals agree within a third of that ("every 2.0 s ± 0.1").

Each request is credited with the time it was in flight (send to end) through a pause seen on its own worker or on
two workers or more: ``in_pause_ms``. Tail attribution tests it as a flag (``tail_features``).

Cost: rows without a long silence cost one pass; with pauses, the decoding intervals of the worker are sorted once
(two sorts of its rows' ints) and only those inside a candidate window are swept.
"""

from __future__ import annotations

import itertools
import math
import statistics
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from itertools import accumulate, compress, repeat
from operator import is_not

__all__ = ["MERGE_MS", "MIN_STREAMS", "PERIODIC_CV", "SILENT_SHARE", "Pause", "StepPauses", "find_pauses",
           "in_pause_ms"]

SILENT_SHARE = 0.9
MIN_STREAMS = 3
MERGE_MS = 10.0
PERIODIC_CV = 0.25
COINCIDENCE_ALPHA = 0.05
"""Pauses are long prefills only when more of them end beside a long prompt's first token than chance would have
it (one-sided binomial test at this level, ``without_prefills``)."""
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
    """Pauses of no cause the rows show (``prefills`` apart)."""
    workers: int = 0
    """Workers whose rows were looked at."""
    min_ms: float = 5.0
    prefills: list[Pause] = field(default_factory=list)
    """Pauses that ended as a long prompt's first token came: its prefill held every stream (``without_prefills``)."""

    def without_prefills(self, first_tokens_ms: Sequence[float]) -> StepPauses:
        """These pauses with those that ended when a long prompt's first token came (within 5 ms + 10% of the
        pause) moved to ``prefills``: an engine that prefills a long prompt in one piece holds every stream for it,
        and the same iteration ends the prefill and resumes the streams. A stall while a long prompt waited is not
        one of them (its prefill still follows it), unless the prefill came right after it: then the pause is more
        than twice the prefills' usual length (of 3 or more) and stays the server's."""
        first = sorted(first_tokens_ms)
        keep, moved, chance = [], [], []
        ends = [p.end_ms for p in self.pauses]
        span = max([*first, *ends], default=0.0) - min([*first, *(p.start_ms for p in self.pauses)], default=0.0)
        rate = len(first) / max(span, 1000.0)  # long prompts' first tokens per ms
        for p in self.pauses:
            tol = 5.0 + 0.1 * p.length_ms
            k = bisect_left(first, p.end_ms - tol)
            (moved if k < len(first) and first[k] <= p.end_ms + tol else keep).append(p)
            chance.append(1 - math.exp(-rate * 2 * tol))
        if moved and _binomial_sf(len(moved), len(self.pauses), statistics.fmean(chance)) > COINCIDENCE_ALPHA:
            return self  # long prompts' first tokens come so often that as many pauses would end beside one by chance
        if len(moved) >= 3:  # one far longer than the prefills' usual is a stall that a prefill ended: the server's
            usual = statistics.median(p.length_ms for p in moved)
            keep += [p for p in moved if p.length_ms > 2 * usual]
            moved = [p for p in moved if p.length_ms <= 2 * usual]
        return replace(self, pauses=sorted(keep, key=lambda p: p.start_ms), prefills=self.prefills + moved)

    @property
    def period(self) -> tuple[float, float] | None:
        """(median, sd) of the start-to-start intervals in seconds, when the pauses recur that regularly: at least 4
        within ``PERIODIC_CV``, or 3 whose two intervals agree within a third of it (a short step sees few); a
        pause shorter than half the median length (a scheduling blip among the server's stalls) is left out."""
        lengths = [p.length_ms for p in self.pauses]
        cut = statistics.median(lengths) / 2 if lengths else 0.0
        starts = [p.start_ms for p in self.pauses if p.length_ms >= cut]
        if len(starts) < 3:
            return None
        gaps = [(b - a) / 1000 for a, b in itertools.pairwise(starts)]
        med, sd = statistics.median(gaps), statistics.pstdev(gaps)
        limit = PERIODIC_CV if len(starts) >= 4 else PERIODIC_CV / 3
        return (med, sd) if med > 0 and sd / med < limit else None

    def words(self) -> str:
        """"5 pauses of ~303 ms, every ~2.0 s ± 0.0, on both workers" (or "on 1 of 3 workers", "(max 577)" when one
        is far longer): for the tail's line."""
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
                "words": self.words(), "long_prefills": len(self.prefills),
                "long_prefill_median_ms": round(statistics.median(p.length_ms for p in self.prefills), 1)
                if self.prefills else None,
                "listed": [{"start_s": round(p.start_ms / 1000, 3), "length_ms": round(p.length_ms, 1),
                            "streams": p.streams, "decoding": p.decoding, "workers": list(p.workers)}
                           for p in self.pauses[:LISTED]]}


def _binomial_sf(k: int, n: int, p: float) -> float:
    """P(X ≥ k) for X ~ Binomial(n, p)."""
    if p <= 0.0:
        return 0.0 if k > 0 else 1.0
    if p >= 1.0:
        return 1.0
    lp, lq = math.log(p), math.log1p(-p)  # in logs: comb(n, j) overflows a float from n ≈ 1,030
    return min(1.0, sum(math.exp(math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1) + j * lp
                                 + (n - j) * lq) for j in range(k, n + 1)))


def find_pauses(t_ms: Sequence[int], ttft: Sequence, e2e: Sequence, gaps: Sequence, worker: Sequence, *,
                min_ms: float = 5.0) -> StepPauses:
    """The step's pauses from its rows' columns (``metrics.rows``: send ms, TTFT and E2E in tenths of a ms, gaps)."""
    by_worker: dict = {}
    for i in compress(range(len(gaps)), map(is_not, gaps, repeat(None))):
        by_worker.setdefault(worker[i], []).append(i)
    found: list[Pause] = []
    for w, rows in by_worker.items():
        found += _worker_pauses(w, rows, t_ms, ttft, e2e, gaps, min_ms)
    return StepPauses(_merge(found), workers=len(set(worker)), min_ms=min_ms)


# Events are ints: the time in tenths of a ms × 4 + a code, so one C-level sort orders them by time with ends before
# starts at a tie (a stream that resumes as another goes silent is not two at once).
_SILENT_END, _DECODE_END, _SILENT_START, _DECODE_START = 0, 1, 2, 3
_EVENT_MS = 4 * _TENTHS_PER_MS  # an event's units per ms of the rows


def _worker_pauses(w, rows: list[int], t_ms, ttft, e2e, gaps, min_ms: float) -> list[Pause]:
    silent: list[int] = []
    add = silent.extend
    for i in rows:
        g = gaps[i]
        if g:  # as events: start + _SILENT_START, end + _SILENT_END
            t = t_ms[i] * _EVENT_MS
            if len(g) == 2:  # the usual: one silence
                add((t + g[0] * _EVENT_MS + _SILENT_START, t + (g[0] + g[1]) * _EVENT_MS + _SILENT_END))
            else:
                for k in range(0, len(g), 2):
                    add((t + g[k] * _EVENT_MS + _SILENT_START, t + (g[k] + g[k + 1]) * _EVENT_MS + _SILENT_END))
    if len(silent) < 2 * MIN_STREAMS:
        return []
    silent.sort()
    running = list(accumulate((1 if e & 2 else -1 for e in silent), initial=0))  # silent streams after event k
    windows = _windows(silent, running)
    if not windows:
        return []
    dec = [i for i in rows if ttft[i] is not None and e2e[i] is not None]
    starts = sorted((t_ms[i] * _TENTHS_PER_MS + ttft[i]) * 4 + _DECODE_START for i in dec)
    ends = sorted((t_ms[i] * _TENTHS_PER_MS + e2e[i]) * 4 + _DECODE_END for i in dec)
    out = []
    for a, b in windows:  # the state just before a (in tenths of a ms), then every event in [a, b]
        lo, hi = bisect_left(silent, a * 4), bisect_right(silent, b * 4 + 3)
        s0, s1 = bisect_left(starts, a * 4), bisect_right(starts, b * 4 + 3)
        e0, e1 = bisect_left(ends, a * 4), bisect_right(ends, b * 4 + 3)
        events = sorted(silent[lo:hi] + starts[s0:s1] + ends[e0:e1])
        out += _sweep(w, a, b, events, decoding=s0 - e0, silent=running[lo], min_ms=min_ms)
    return out


def _windows(silent: list[int], running: list[int]) -> list[tuple[int, int]]:
    """Intervals (tenths of a ms) in which at least MIN_STREAMS silences overlap: the only places a pause can be."""
    out, opened = [], None
    for e, s in zip(silent, running[1:], strict=True):
        if s >= MIN_STREAMS and opened is None:
            opened = e >> 2
        elif s < MIN_STREAMS and opened is not None:
            out.append((opened, e >> 2))
            opened = None
    return out


def _sweep(w, a: int, b: int, events: list[int], *, decoding: int, silent: int, min_ms: float) -> list[Pause]:
    out, opened, peak_s, peak_d, t_prev = [], None, 0, 0, a
    for e in [*events, b * 4 + 3]:
        t = e >> 2
        if t > t_prev:  # the state held over (t_prev, t)
            if silent >= MIN_STREAMS and silent >= SILENT_SHARE * decoding:
                opened = t_prev if opened is None else opened
                peak_s, peak_d = max(peak_s, silent), max(peak_d, decoding)
            elif opened is not None:
                out.append((opened, t_prev, peak_s, peak_d))
                opened, peak_s, peak_d = None, 0, 0
        t_prev = t
        code = e & 3
        if code == _SILENT_START:
            silent += 1
        elif code == _SILENT_END:
            silent -= 1
        elif code == _DECODE_START:
            decoding += 1
        else:
            decoding -= 1
    if opened is not None:
        out.append((opened, b, peak_s, peak_d))
    scale = _TENTHS_PER_MS
    return [Pause(s / scale, (e - s) / scale, ps, pd, (w,)) for s, e, ps, pd in out if e - s >= min_ms * scale]


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
                pauses: Sequence[Pause]) -> list:
    """For rows ``idx``: ms in flight (send to end) through one of ``pauses`` (sorted, disjoint: a ``StepPauses``'
    list) seen on the row's worker or on ≥ 2 workers; None for a row without an end (a failure)."""
    ps = pauses  # walk back from the last that starts before the row ends
    starts, ends = [p.start_ms for p in ps], [p.end_ms for p in ps]
    seen = [None if len(p.workers) > 1 else p.workers for p in ps]  # None: on several workers, every row's
    out: list = []
    for i in idx:
        d = e2e[i]
        if d is None:
            out.append(None)
            continue
        a = t_ms[i]
        b, total, k = a + d / _TENTHS_PER_MS, 0.0, bisect_right(starts, a + d / _TENTHS_PER_MS) - 1
        while k >= 0 and ends[k] > a:
            if seen[k] is None or worker[i] in seen[k]:
                total += min(b, ends[k]) - max(a, starts[k])
            k -= 1
        out.append(round(total))
    return out
