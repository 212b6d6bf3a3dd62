"""Server-wide pauses, seen from the client: moments when (nearly) every stream on a worker stopped at once. Pure.

Each request row carries its stream's long silences (``metrics.rows.long_gaps``: gaps between output chunks of at
least 4× the stream's own median gap and 5 ms, and the time a server held its first token when the first receive
brought that many more chunks than the stream's usual; the stream counts as decoding from that silence's start). A
silence that ended in a late receive may be the reader's: the stream counts neither as silent nor as decoding
through it (a server's flush read late by a busy client leaves the pause to the streams read on time). A *pause* on
a worker is an interval in which at least ``SILENT_SHARE`` (90%) and at least ``MIN_STREAMS`` (3) of the worker's
streams then decoding (first chunk received, last not yet; streams of at least 5 chunks) were inside such a silence,
lasting at least ``min_ms`` (the caller passes 4× the step's ITL p50, 5 ms at least). A stream still waiting for its
first token is neither counted nor required until it has waited ``WAIT_FACTOR`` × the step's median TTFT (and
``min_ms``): at overload most streams wait about that long, and their silence is the queue. Past it, it counts as a
silent stream until its first token: a stall that caught every stream of a worker before its first token is a pause
too (in a closed loop the users a stall released send again together, and the next stall may find them all waiting:
``tests/load/test_tail_mixture.py`` saw one stall in five so, 5 tail requests).

Pauses of several workers that overlap (within ``MERGE_MS``: their step clocks start a few ms apart) are one pause
"on N workers": seen on every worker, it is the server (or the network to it); seen on one worker of several, it
is more likely that worker's host. Periodicity: at least 4 pauses (of at least half the median length: a blip
between them is left out) whose start-to-start intervals vary by less than ``PERIODIC_CV`` of their median, or 3
whose two intervals agree within a third of that ("every 2.0 s ± 0.1").

Each request is credited with the time it was in flight (send to end) through a pause seen on its own worker or on
two workers or more: ``in_pause_ms``. Tail attribution tests it as a flag (``tail_features``).

Cost: rows without a long silence or a long wait cost one pass; with a few, a count of the silent streams at once
over the fleet (never ``MIN_STREAMS``: no pause, ~25 ms at 100k rows); only then the sweep of every row's decoding
interval, one sort of the fleet's events (~70 ms at 100k rows).
"""

from __future__ import annotations

import itertools
import math
import statistics
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from itertools import chain, compress, repeat
from operator import is_not, itemgetter
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

__all__ = ["MERGE_MS", "MIN_STREAMS", "PERIODIC_CV", "SILENT_SHARE", "WAIT_FACTOR", "Pause", "StepPauses",
           "find_pauses", "in_pause_ms"]

SILENT_SHARE = 0.9
MIN_STREAMS = 3
WAIT_FACTOR = 4.0
"""A wait for the first token this many times the step's median TTFT is a silence (like ``metrics.rows.GAP_FACTOR``
for the gaps between chunks)."""
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
    """Streams decoding then, or waiting for their first token past ``WAIT_FACTOR`` × the median (summed over
    workers)."""
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

    def without_prefills(self, first_tokens_ms: Sequence[float],
                         prompt_tokens: Sequence[float] | None = None) -> StepPauses:
        """These pauses with those that ended when a long prompt's first token came (within 5 ms + 10% of the
        pause) moved to ``prefills``: an engine that prefills a long prompt in one piece holds every stream for it,
        and the same iteration ends the prefill and resumes the streams. A stall while a long prompt waited is not
        one of them (its prefill still follows it), unless the prefill came right after it: then the pause is more
        than twice what the prefills usually cost (of 3 or more) and stays the server's. The cost is per prompt token
        of the long prompts whose first tokens ended the pause (``prompt_tokens``, sorted with ``first_tokens_ms``;
        per prompt without it): two long prompts prefilled in one batch hold the streams twice as long, and are
        still a prefill (``tests/load/test_tail_mixture.py``, three runs side by side, once counted such a 246 ms pause
        as a server stall)."""
        weights = prompt_tokens if prompt_tokens is not None else [1.0] * len(first_tokens_ms)
        firsts = sorted(zip(first_tokens_ms, weights, strict=True))
        first, weight = [b for b, _ in firsts], [n for _, n in firsts]
        keep, moved, chance = [], [], []
        ends = [p.end_ms for p in self.pauses]
        span = max([*first, *ends], default=0.0) - min([*first, *(p.start_ms for p in self.pauses)], default=0.0)
        rate = len(first) / max(span, 1000.0)  # long prompts' first tokens per ms
        for p in self.pauses:
            tol = 5.0 + 0.1 * p.length_ms
            k, j = bisect_left(first, p.end_ms - tol), bisect_right(first, p.end_ms + tol)
            if j > k:
                moved.append((p, sum(weight[k:j])))
            else:
                keep.append(p)
            chance.append(1 - math.exp(-rate * 2 * tol))
        if moved and _binomial_sf(len(moved), len(self.pauses), statistics.fmean(chance)) > COINCIDENCE_ALPHA:
            return self  # long prompts' first tokens come so often that as many pauses would end beside one by chance
        if len(moved) >= 3:  # one far longer than its prompts' prefill usually takes is a stall a prefill ended
            usual = statistics.median(p.length_ms / w for p, w in moved)
            keep += [p for p, w in moved if p.length_ms > 2 * usual * w]
            moved = [(p, w) for p, w in moved if p.length_ms <= 2 * usual * w]
        return replace(self, pauses=sorted(keep, key=lambda p: p.start_ms),
                       prefills=self.prefills + [p for p, _ in moved])

    @property
    def period(self) -> tuple[float, float] | None:
        """(median, sd) of the recurring pauses' start-to-start intervals in seconds (``recurring``)."""
        found = self.recurring
        return None if found is None else found[1:]

    @property
    def recurring(self) -> tuple[list[Pause], float, float] | None:
        """The pauses that recur regularly and their period's (median, sd) in seconds: at least 4 within
        ``PERIODIC_CV``, or 3 whose two intervals agree within a third of it (a short step sees few); a pause shorter
        than half the median length (a scheduling blip among the server's stalls) is left out. When blips are most of
        the pauses (a busy client host: 15 of ~20 ms beside 5 of the server's 300 ms stalls), the pauses over twice
        the median length, when 3 or more, are tried first, alone.
        One occurrence may be missing (a stall while no stream was decoding or long waiting shows no pause: "every
        2 s" seen at 0, 2 and 6 s): an interval of twice the others counts as two, and the intervals per period must
        then agree within a tenth of the limit (2.0 and 2.05 s, not 2.0 and 2.25: a grid fits loose intervals too
        easily)."""
        lengths = [p.length_ms for p in self.pauses]
        if not lengths:
            return None
        median = statistics.median(lengths)
        long = [n for n in lengths if n > 2 * median]
        for cut in (statistics.median(long) / 2 if len(long) >= 3 else None, median / 2):
            if cut is None:
                continue
            kept = [p for p in self.pauses if p.length_ms >= cut]
            period = _period([p.start_ms for p in kept])
            if period is not None:
                return kept, *period
        return None

    def words(self) -> str:
        """"5 pauses of ~303 ms, every ~2.0 s ± 0.0, on both workers" (or "on 1 of 3 workers", "(max 577)" when one
        is far longer): for the tail's line."""
        return self._words(self.recurring)

    def _words(self, recurring: tuple[list[Pause], float, float] | None) -> str:
        n = len(self.pauses)
        if not n:
            return ""
        some = recurring is not None and len(recurring[0]) < n  # the period is the long ones', blips beside them
        shown = recurring[0] if some and recurring is not None else self.pauses
        lengths = [p.length_ms for p in shown]
        out = f"{len(shown)} of {n} pauses" if some else f"{n} pause{'s' * (n != 1)}"
        typical = statistics.median(lengths)
        out += f" of ~{typical:.0f} ms" + (f" (max {max(lengths):.0f})" if max(lengths) > 1.5 * typical else "")
        if recurring is not None:
            med, sd = recurring[1:]
            digits = 1 if med >= 1 else 2
            out += f", every ~{med:.{digits}f} s ± {sd:.{digits}f}"
        seen = {w for p in self.pauses for w in p.workers}
        if self.workers > 1:
            out += f", on {len(seen)} of {self.workers} workers" if len(seen) < self.workers else \
                f", on {'both' if self.workers == 2 else 'all'} workers"
        return out

    def to_dict(self) -> dict:
        recurring = self.recurring
        period = None if recurring is None else recurring[1:]
        lengths = [p.length_ms for p in self.pauses]
        return {"count": len(self.pauses), "min_ms": round(self.min_ms, 1), "workers": self.workers,
                "recurring": None if recurring is None else len(recurring[0]),
                "recurring_median_ms": None if recurring is None else round(
                    statistics.median(p.length_ms for p in recurring[0]), 1),
                "median_ms": round(statistics.median(lengths), 1) if lengths else None,
                "max_ms": round(max(lengths), 1) if lengths else None,
                "period_s": None if period is None else round(period[0], 3),
                "period_sd_s": None if period is None else round(period[1], 3),
                "words": self._words(recurring), "long_prefills": len(self.prefills),
                "long_prefill_median_ms": round(statistics.median(p.length_ms for p in self.prefills), 1)
                if self.prefills else None,
                "listed": [{"start_s": round(p.start_ms / 1000, 3), "length_ms": round(p.length_ms, 1),
                            "streams": p.streams, "decoding": p.decoding, "workers": list(p.workers)}
                           for p in self.pauses[:LISTED]]}


def _period(starts: list[float]) -> tuple[float, float] | None:
    """``StepPauses.recurring``'s test of one set of pauses' starts (ms)."""
    if len(starts) < 3:
        return None
    gaps = [(b - a) / 1000 for a, b in itertools.pairwise(starts)]
    base = min(gaps)
    times = [max(1, round(g / base)) if base > 0 else 1 for g in gaps]
    missed = sum(times) - len(gaps)
    if missed > 1:
        times, missed = [1] * len(gaps), 0  # not one grid with one gap: judged as they are (and fail, mostly)
    each = [g / n for g, n in zip(gaps, times, strict=True)]
    med, sd = statistics.median(each), statistics.pstdev(each)
    limit = PERIODIC_CV / 10 if missed else PERIODIC_CV if len(starts) >= 4 else PERIODIC_CV / 3
    return (med, sd) if med > 0 and sd / med < limit else None


def _binomial_sf(k: int, n: int, p: float) -> float:
    """P(X ≥ k) for X ~ Binomial(n, p)."""
    if p <= 0.0:
        return 0.0 if k > 0 else 1.0
    if p >= 1.0:
        return 1.0
    lp, lq = math.log(p), math.log1p(-p)  # in logs: comb(n, j) overflows a float from n ≈ 1,030
    return min(1.0, sum(math.exp(math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1) + j * lp
                                 + (n - j) * lq) for j in range(k, n + 1)))


def find_pauses(t_ms: Sequence[int] | np.ndarray, ttft: Sequence[Any] | np.ndarray, e2e: Sequence[Any] | np.ndarray,
                gaps: Sequence[Any], worker: Sequence[Any] | np.ndarray, *, min_ms: float = 5.0) -> StepPauses:
    """The step's pauses from its rows' columns (``metrics.rows``: send ms, TTFT and E2E in tenths of a ms, gaps)."""
    import numpy as np  # here: numpy only in a process that judges a step (tests/load/test_lean_imports.py)

    n = len(gaps)
    nones = gaps.count(None) if isinstance(gaps, list) else sum(g is None for g in gaps)
    rows = None if nones == 0 else list(compress(range(n), map(is_not, gaps, repeat(None))))

    # the rows with silences: every row, most steps (no copy then)
    def column(c: Sequence[Any] | np.ndarray) -> Sequence[Any] | np.ndarray:
        return c if rows is None else c[rows] if isinstance(c, np.ndarray) else list(map(c.__getitem__, rows))

    g = column(gaps)
    pairs = np.fromiter(chain.from_iterable(g), np.int64)  # (offset, length) per silence, ms since the send
    workers = len(np.unique(worker) if isinstance(worker, np.ndarray) else set(worker))
    none = StepPauses([], workers=workers, min_ms=min_ms)
    first = np.array(column(ttft), dtype=float)  # None: nan (a failure before its first token)
    firsts = first[~np.isnan(first)]  # the upper median: a partition, not a sort
    limit = int(max(min_ms * _TENTHS_PER_MS, WAIT_FACTOR * np.partition(firsts, len(firsts) // 2)[len(firsts) // 2])) \
        if len(firsts) else 0
    per_row = np.fromiter(map(len, g), np.int64, len(g)) // 2
    # a stream is in the count from its first token, or from the start of a silence before it (a held first token:
    # ``long_gaps``), which is each row's first silence when it has one
    began = first.copy()
    rows_with = np.flatnonzero(per_row)
    began[rows_with] = np.fmin(first[rows_with], pairs[2 * (np.cumsum(per_row) - per_row)[rows_with]] * _TENTHS_PER_MS)
    waited = np.flatnonzero(began > limit)  # nan compares false
    if len(pairs) < 2 * MIN_STREAMS and len(waited) < MIN_STREAMS:
        return none
    sent = np.array(column(t_ms), np.int64) * _TENTHS_PER_MS
    starts, lengths = np.repeat(sent, per_row) + pairs[0::2] * _TENTHS_PER_MS, pairs[1::2] * _TENTHS_PER_MS
    sure = lengths >= 0  # a negative length: a late receive's silence, maybe the reader's (``long_gaps``)
    silent = starts[sure], sent[waited] + limit  # their starts
    ended = silent[0] + lengths[sure], sent[waited] + began[waited].astype(np.int64)
    unsure = starts[~sure], starts[~sure] - lengths[~sure]  # the stream's state unknown: out of the count
    if _most_at_once(np.concatenate(silent), np.concatenate(ended)) < MIN_STREAMS:
        return none  # never MIN_STREAMS silent at once, even fleet-wide: the usual step, without the decoding sweep
    last = np.array(column(e2e), dtype=float)
    known = ~(np.isnan(began) | np.isnan(last))  # decoded: a failure decodes nothing
    names, code = np.unique(np.array(column(worker)), return_inverse=True)
    # each worker's events on its own stretch of one time line: one sort for the fleet, and since every start has its
    # end, the running counts are back to 0 between two workers' stretches
    off = code.astype(np.int64) * _WORKER
    sent += off
    gap_off, wait_off = np.repeat(off, per_row), off[waited]
    gap_off, unsure_off = gap_off[sure], gap_off[~sure]
    # stable: timsort takes the runs the rows come in (a worker's report, by time): 22 ms against 35 ms for
    # quicksort on the 600k events of 100k streams through 29 pauses (benchmarks/tail_attribution.py)
    found = _runs(np.sort(np.concatenate([
        (ended[0] + gap_off) * 4 + _SILENT_END, (silent[0] + gap_off) * 4 + _SILENT_START,
        (sent[known] + last[known].astype(np.int64)) * 4 + _DECODE_END,
        (sent[known] + began[known].astype(np.int64)) * 4 + _DECODE_START,
        *((ended[1] + wait_off) * 4 + c for c in (_SILENT_END, _DECODE_END)),  # a long wait: counted and silent
        *((silent[1] + wait_off) * 4 + c for c in (_SILENT_START, _DECODE_START)),
        (unsure[0] + unsure_off) * 4 + _DECODE_END, (unsure[1] + unsure_off) * 4 + _DECODE_START]), kind="stable"),
        min_ms)
    return StepPauses(_merge([Pause(start / _TENTHS_PER_MS, length / _TENTHS_PER_MS, s, d, (names[w].item(),))
                              for w, start, length, s, d in found]), workers=workers, min_ms=min_ms)


# Events are ints: (the worker × _WORKER + the time in tenths of a ms) × 4 + a code, so one sort orders them by
# worker, then time, with ends before starts at a tie (a stream that resumes as another goes silent is not two at once).
_SILENT_END, _DECODE_END, _SILENT_START, _DECODE_START = 0, 1, 2, 3
_STEP = [-1, 0, 1, 0], [0, -1, 0, 1]  # silent streams and decoding streams: change per code
_WORKER = 1 << 40
"""A worker's stretch of the time line, in tenths of a ms: ~3.5 years of step."""


def _most_at_once(starts: np.ndarray, ends: np.ndarray) -> int:
    """The most intervals [start, end) open at one moment."""
    import numpy as np

    events = np.sort(np.concatenate([ends * 2, starts * 2 + 1]))  # an end before a start at a tie
    return int(np.cumsum(np.where(events & 1, 1, -1)).max(initial=0))


def _runs(keys: np.ndarray, min_ms: float) -> list[tuple[int, int, int, int, int]]:
    """(worker, start, length in tenths of a ms, peak silent, peak decoding) of every run of held intervals in which
    enough streams were silent, from the sorted events."""
    import numpy as np

    t, code = keys >> 2, keys & 3
    silent, decoding = np.cumsum(np.array(_STEP[0])[code]), np.cumsum(np.array(_STEP[1])[code])  # after each event
    # the state after the last event at a time holds until the next time: only those intervals count
    held = np.flatnonzero(t[1:] > t[:-1])
    on = (silent[held] >= MIN_STREAMS) & (silent[held] >= SILENT_SHARE * decoding[held])
    edges = np.diff(on.astype(np.int8), prepend=0, append=0)
    opened, closed = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)  # runs of held intervals: [opened, closed)
    if not len(opened):
        return []
    bounds = np.stack([opened, closed]).T.ravel()  # a run's peaks: maxima over [opened, closed), every other segment
    peak_s = np.maximum.reduceat(np.append(silent[held], 0), bounds)[0::2]
    peak_d = np.maximum.reduceat(np.append(decoding[held], 0), bounds)[0::2]
    start, end = t[held[opened]], t[held[closed - 1] + 1]
    long = np.flatnonzero(end - start >= min_ms * _TENTHS_PER_MS)
    return list(zip(*(x[long].tolist() for x in (start // _WORKER, start % _WORKER, end - start, peak_s, peak_d)),
                    strict=True))


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


def in_pause_ms(idx: Sequence[int], t_ms: Sequence[int] | np.ndarray, e2e: Sequence[Any] | np.ndarray,
                worker: Sequence[Any] | np.ndarray, pauses: Sequence[Pause]) -> list:
    """For rows ``idx``: ms in flight (send to end: ``e2e``, or to the first token: the TTFT column) through one of
    ``pauses`` (sorted, disjoint: a ``StepPauses``' list) seen on the row's worker or on ≥ 2 workers; None for a row
    without an end (a failure)."""
    import numpy as np

    if not len(idx):
        return []
    at = np.asarray(idx, dtype=np.int64)
    get = itemgetter(*idx) if len(idx) > 1 else lambda col: (col[idx[0]],)  # C-level gathers from a list

    def gather(col: Sequence[Any] | np.ndarray) -> np.ndarray:  # arrays: StepColumns' (analysis.step_columns)
        return col[at] if isinstance(col, np.ndarray) else np.array(get(col))

    sent, ends = gather(t_ms).astype(float), gather(e2e).astype(float)  # None: nan, and nan stays None below
    ended = sent + ends / _TENTHS_PER_MS
    total = np.zeros(len(idx))
    names, code = np.unique(gather(worker), return_inverse=True)
    for k, w in enumerate(names.tolist()):
        seen = [p for p in pauses if len(p.workers) > 1 or w in p.workers]
        if not seen:
            continue
        mine = code == k
        # the time spent in pauses up to x is piecewise linear in x: a row's share is its value at the end minus at
        # the send (one interpolation for all rows)
        edges: list[float]
        spent: list[float]
        edges, spent, done = [], [], 0.0
        for p in seen:
            edges += (p.start_ms, p.end_ms)
            spent += (done, done + p.length_ms)
            done += p.length_ms
        total[mine] = np.interp(ended[mine], edges, spent) - np.interp(sent[mine], edges, spent)
    out = np.round(np.nan_to_num(total)).astype(int).tolist()
    for j in np.flatnonzero(np.isnan(ends)).tolist():  # failures: few
        out[j] = None
    return out
