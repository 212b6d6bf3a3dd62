"""A mergeable quantile sketch with a relative-error guarantee (DDSketch, positive values only).

Why: workers time every token, so percentiles must come from something that is cheap to add to,
small to ship every 3 s, and exact to merge on the master. Averaging per-worker percentiles is
wrong; shipping every sample is too much. This sketch does all three.

Guarantee, in numbers: with ``relative_accuracy`` α = 0.01 (the default), ``quantile(q)`` returns a
value within ±1% of the true order statistic at that rank: a true 100 ms comes back as 99–101 ms, a
true 7.4 ms TPOT as 7.33–7.47 ms (Locust's own stats would say 7). Bins are logarithmic, so their
number depends only on the *range* of the data: ~551 bins cover 1 ms–1 min, ~781 cover 0.1 ms–10 min,
~1,606 cover 1 ns–1 day, and the whole positive float range needs at most ~36,500.

How: with γ = (1+α)/(1−α), a value v > 0 goes to bin ``key = ceil(log(v) / log(γ))``, i.e. the range
(γ^(key−1), γ^key], and a bin is read back as ``2·γ^key / (γ+1)``, which is within α of every value in
that range. Counts are integers and every sketch with the same α uses the same mapping, so merging K
sketches gives exactly the bins of one sketch of the union. (``math.log`` comes from the platform's
libm: across different machines a value lying exactly on a bin edge may land in the neighbouring bin,
which is still within α.)

Edges, so that nothing is dropped silently:
- values in [0, 1e-9) count in a zero bin and read back as 0 (clamped to the exact min);
- negative, NaN and infinite values are not added; they are counted in ``overflow``, which the
  report shows;
- exact ``min`` and ``max`` are tracked; ranks 0 and n−1 return them, other estimates are clamped
  into [min, max].

Rank definition: ``quantile(q)`` is the order statistic at 0-based rank ``floor(q·(n−1))`` (the
"lower" rank, as ddsketch uses), so q=0 is the min, q=1 the max and q=0.5 of [1, 2] is 1.

Example::

    s = Sketch()                      # relative_accuracy=0.01
    for ttft in ttfts:
        s.add(ttft)
    s.quantile(0.99)                  # within 1% of the true p99
    master.merge(s)                   # exact: same bins as one sketch of everything
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable, Hashable, Iterable, Sequence
from itertools import repeat
from math import ceil as _ceil
from math import log as _log
from typing import TypeVar

from harness.errors import KneecapError

__all__ = ["Sketch", "SketchMismatch", "fold_bins"]

ZERO_CUTOFF = 1e-9
"""Values in [0, ZERO_CUTOFF) go to the zero bin (1 ns when values are seconds)."""

_INF = math.inf
_T = TypeVar("_T")
_ONE = 1  # CPython caches small ints: `count is _ONE` is one pointer compare on the hot path


@functools.lru_cache(maxsize=16)
def _constants(alpha: float) -> tuple[float, float, float]:
    # γ, 1/ln γ and the read factor 2/(γ+1) of an α: computed once, not per sketch (a master builds thousands a round)
    gamma = (1.0 + alpha) / (1.0 - alpha)
    return gamma, 1.0 / math.log(gamma), 2.0 / (gamma + 1.0)


class SketchMismatch(KneecapError):
    """Sketches that cannot be combined: different relative accuracy, or an unknown wire format version."""


def _positive_int(count: object) -> int:
    # Only reached when count is not the int 1, so the common add(v) pays for one comparison, not this.
    n = operator.index(count)  # type: ignore[arg-type]  # any object: TypeError for floats (even 1.0) and the rest
    if n < 1:
        raise ValueError(f"count must be a positive int, got {count!r}")
    return n


class Sketch:
    """Log-bucketed quantile sketch over non-negative values; see the module docstring for the bound.

    Usage::

        s = Sketch(relative_accuracy=0.01)
        s.add(0.120)          # one sample (e.g. seconds)
        s.add(0.095, 3)       # three samples of the same value
        s.quantile(0.99), s.count, s.overflow
    """

    __slots__ = ("_bins", "_count", "_gamma", "_inv_log_gamma", "_max", "_memo", "_min", "_overflow", "_pending",
                 "_read_factor", "_sorted_keys", "_sum", "_zero", "relative_accuracy")

    def __init__(self, *, relative_accuracy: float = 0.01) -> None:
        if not 0.0 < relative_accuracy < 1.0:
            raise ValueError(f"relative_accuracy must be in (0, 1), got {relative_accuracy!r} (0.01 means ±1%)")
        self.relative_accuracy: float = float(relative_accuracy)
        """α: every quantile is within ±α·(true value). Sketches merge only with the same α."""
        # 1/ln γ: multiply on the hot path instead of dividing; the read factor: bin estimate = γ^key · 2/(γ+1)
        self._gamma, self._inv_log_gamma, self._read_factor = _constants(self.relative_accuracy)
        self._bins: dict[int, int] = {}
        self._pending: Sequence[bytes] = ()
        """Bins merged but not yet added to ``_bins``: packed payloads off the wire (``fold_bins``), added in one
        batch when the bins are first read (``_settle``): a master merges thousands of reports a round into a
        sketch it reads once a window. Bytes, which the garbage collector does not track; () while there are none."""
        # () until first read: an empty tuple is no object for the garbage collector to walk (a master holds thousands
        # of sketches, most never read one by one); a list per sketch was one more on every full collection
        self._sorted_keys: Sequence[int] = ()
        self._zero = 0
        self._count = 0
        self._overflow = 0
        self._sum = 0.0
        self._min = _INF
        self._max = -_INF
        self._memo: tuple[int, object, object] | None = None

    # -- adding ------------------------------------------------------------------------------

    def add(self, value: float, count: int = 1) -> None:
        """Add ``count`` samples of ``value``. Negative, NaN or infinite values go to ``overflow``."""
        if count is not _ONE:  # identity, so 1.0 and True also take the checked path and bins stay plain ints
            count = _positive_int(count)
        # Chained comparisons are False for NaN, so NaN falls through to overflow.
        if ZERO_CUTOFF <= value < _INF:
            key = _ceil(_log(value) * self._inv_log_gamma)
            try:  # the bin almost always exists already; this is ~6% faster than bins.get(key, 0)
                self._bins[key] += count
            except KeyError:
                self._bins[key] = count
        elif 0.0 <= value < ZERO_CUTOFF:
            self._zero += count
        else:
            self._overflow += count
            return
        self._count += count
        self._sum += value * count
        if value < self._min:
            self._min = value
        if value > self._max:
            self._max = value

    def merge(self, other: Sketch) -> None:
        """Add every sample of ``other`` to this sketch; ``other`` is left unchanged."""
        if not isinstance(other, Sketch):
            raise TypeError(f"can only merge a Sketch, got {type(other).__name__}")
        if other.relative_accuracy != self.relative_accuracy:
            raise SketchMismatch(
                f"cannot merge sketches with different relative accuracy: this one has {self.relative_accuracy} "
                f"(gamma {self._gamma:.6g}), the other has {other.relative_accuracy} (gamma {other._gamma:.6g}); "
                "give every worker the same relative_accuracy"
            )
        if other._pending:  # immutable bytes: shared, not copied
            if type(self._pending) is list:
                self._pending.extend(other._pending)
            else:  # () or a decoded sketch's own (payload,)
                self._pending = [*self._pending, *other._pending]
        bins, theirs = self._bins, other._bins
        if not theirs:  # a decoded sketch keeps its bins as pending bytes (the master's usual merge): none to add
            pass
        elif not bins:
            bins.update(theirs)  # the common first merge into an empty bucket
        else:
            keys = list(theirs) if other is self else theirs  # a copy when merging into itself: the keys are read
            # as the values change; one C-level pass (update over zip/map), ~2× the speed of a Python loop
            bins.update(zip(keys, map(operator.add, map(bins.get, keys, repeat(0)), theirs.values()), strict=True))
        self._zero += other._zero
        self._count += other._count
        self._overflow += other._overflow
        self._sum += other._sum
        if other._min < self._min:
            self._min = other._min
        if other._max > self._max:
            self._max = other._max
        if len(self._pending) >= SETTLE_AT:  # last: merging into itself, the bins above are the ones before it
            self._settle()

    # -- reading -----------------------------------------------------------------------------

    def quantile(self, q: float) -> float:
        """Value at quantile ``q`` in [0, 1]: the sample at rank ``floor(q·(count−1))``, within ±α.

        Returns ``math.nan`` for an empty sketch; raises ValueError for q outside [0, 1].
        """
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"quantile must be in [0, 1], got {q!r} (for p99 pass 0.99)")
        if self._count == 0:
            return math.nan
        return self.value_at_rank(math.floor(q * (self._count - 1)))

    def value_at_rank(self, rank: int) -> float:
        """Estimate of the ``rank``-th smallest sample (0-based, 0 ≤ rank < count), within ±α.

        This maps order-statistic confidence intervals (ranks from Binomial(n, q)) to values.
        """
        rank = operator.index(rank)
        n = self._count
        if not 0 <= rank < n:
            raise ValueError(f"rank must be in [0, count-1] = [0, {n - 1}], got {rank}"
                             + (" (the sketch is empty)" if n == 0 else ""))
        # The extremes are tracked exactly, so answer them exactly.
        if rank == 0:
            return float(self._min)
        if rank == n - 1:
            return float(self._max)
        if rank < self._zero:
            return float(min(max(0.0, self._min), self._max))  # zero bin: values in [0, 1e-9) read as 0
        estimate = self._gamma ** self._key_at_rank(rank) * self._read_factor
        return float(min(max(estimate, self._min), self._max))

    def _settle(self) -> None:
        pending, self._pending = self._pending, ()
        fold_bins(self._bins, pending)

    def _key_at_rank(self, rank: int) -> int:
        if self._pending:
            self._settle()
        # Keys are only ever added (clear() starts a new dict), so an unchanged number of keys means an
        # unchanged key set and the sorted list from the last query is still right.
        if len(self._sorted_keys) != len(self._bins):
            self._sorted_keys = sorted(self._bins)
        bins = self._bins
        remaining = rank - self._zero  # samples before `rank` among the bins
        above = self._count - 1 - rank  # samples after it
        # Walk from the nearer end: tail quantiles (p99, p99.9) then touch a handful of bins, not all of them.
        if remaining <= above:
            keys: Iterable[int] = self._sorted_keys
        else:
            keys, remaining = reversed(self._sorted_keys), above
        for key in keys:
            remaining -= bins[key]
            if remaining < 0:
                return key
        raise AssertionError("rank beyond the bins; counts are inconsistent")  # value_at_rank checked the range

    @property
    def count(self) -> int:
        """Number of samples added (overflowed values excluded)."""
        return self._count

    @property
    def overflow(self) -> int:
        """Number of samples refused because they were negative, NaN or infinite."""
        return self._overflow

    @property
    def zero_count(self) -> int:
        """Number of samples in the zero bin, [0, 1e-9)."""
        return self._zero

    @property
    def sum(self) -> float:
        """Exact (floating-point) sum of the samples added."""
        return self._sum

    @property
    def min(self) -> float:
        """Exact smallest sample; ``math.nan`` when empty."""
        return float(self._min) if self._count else math.nan

    @property
    def max(self) -> float:
        """Exact largest sample; ``math.nan`` when empty."""
        return float(self._max) if self._count else math.nan

    @property
    def mean(self) -> float:
        """Exact (floating-point) mean; ``math.nan`` when empty."""
        return self._sum / self._count if self._count else math.nan

    def bins(self) -> dict[int, int]:
        """A copy of the non-zero bins, ``{key: count}`` sorted by key (for tests, debugging and the wire)."""
        if self._pending:
            self._settle()
        return {key: self._bins[key] for key in sorted(self._bins)}

    # -- housekeeping ------------------------------------------------------------------------

    def remembered(self, tag: Hashable, make: Callable[[Sketch], _T]) -> _T:
        """``make(self)``, kept while the samples stay the same (their count: every added sample raises it, ``clear``
        forgets it): a master summarises every judged step's sketches again at each checkpoint, every 10 s. One value
        kept, told apart from another reader's by ``tag``; the caller copies it before changing it."""
        memo = self._memo
        if memo is not None and memo[0] == self._count and memo[1] == tag:
            return memo[2]  # type: ignore[return-value]  # made by this tag's make: a _T
        value = make(self)
        self._memo = (self._count, tag, value)
        return value

    def copy(self) -> Sketch:
        """An independent sketch with the same samples."""
        new = Sketch(relative_accuracy=self.relative_accuracy)
        new.merge(self)
        return new

    def clear(self) -> None:
        """Forget every sample (and the overflow count); keep the accuracy."""
        self._bins = {}
        self._sorted_keys = self._pending = ()
        self._zero = self._count = self._overflow = 0
        self._sum = 0.0
        self._min = _INF
        self._max = -_INF
        self._memo = None

    @classmethod
    def _from_parts(cls, *, relative_accuracy: float, bins: dict[int, int], zero: int, overflow: int,
                    total: float, lo: float, hi: float, count: int,
                    pending: Sequence[bytes] = ()) -> Sketch:
        # For the wire decoder, which has already validated every part (count == zero + sum of the bins, α in (0, 1)):
        # no __init__, so a master's thousands of decoded sketches a round skip its checks and arithmetic.
        s = object.__new__(cls)
        s.relative_accuracy = relative_accuracy
        s._gamma, s._inv_log_gamma, s._read_factor = _constants(relative_accuracy)
        s._bins = bins
        s._sorted_keys = ()
        s._pending = pending
        s._zero = zero
        s._count = count
        s._overflow = overflow
        s._sum = total
        s._min, s._max = (lo, hi) if count else (_INF, -_INF)
        s._memo = None
        return s

    def __repr__(self) -> str:
        if self._pending:
            self._settle()
        return (f"Sketch(relative_accuracy={self.relative_accuracy}, count={self._count}, bins={len(self._bins)}, "
                f"zero={self._zero}, overflow={self._overflow})")


SETTLE_AT = 256
"""Pending payloads a sketch keeps at most (~650 bytes each for 73 bins): a sketch no one reads for minutes (a long
step's, on a large fleet) folds them in batches of this many, ~1 ms each (0.8-2.0 ms at 500 workers). A step's
sketches reach it at the same report: 1,024 made that report 15-20 ms (folds of 2-7 ms, ``benchmarks/fleet_merge.py``
at 500 workers)."""
PACKED_HEAD = 64
"""Bytes before a packed payload's bins (its header: ``metrics.wire``)."""
_HEAD_WORDS = PACKED_HEAD // 4
_NUMPY_FROM = 4096
"""Pending bins from which ``fold_bins`` adds them in one numpy pass (below it, a dict update each is as fast)."""
_DENSE_SPAN = 1 << 20


def fold_bins(bins: dict[int, int], pending: Sequence[bytes]) -> None:
    """Add the bins of every packed payload in ``pending`` to ``bins``: each a ``PACKED_HEAD``-byte header (not read
    here), then n int32 keys and n uint32 counts in this machine's byte order (``metrics.wire``'s version 2). Exact:
    a bin's sum stays an int (numpy sums counts below 2^53 exactly; a batch past that takes the dict path)."""
    sizes = [(len(p) - PACKED_HEAD) >> 3 for p in pending]
    total = sum(sizes)
    if total >= _NUMPY_FROM:
        import numpy as np  # a master's batch (thousands of reports); numpy is not loaded before one comes

        n = np.array(sizes, dtype=np.int64)
        words = np.frombuffer(b"".join(pending), dtype=np.int32)  # every payload is 4-byte words
        ends = np.cumsum(n * 2 + _HEAD_WORDS)
        keys_at = np.repeat(ends - n * 2, n) + np.arange(total) - np.repeat(np.cumsum(n) - n, n)
        keys, counts = words[keys_at], words.view(np.uint32)[keys_at + np.repeat(n, n)]
        if int(counts.sum(dtype=np.uint64)) < 1 << 53:
            lo, hi = int(keys.min()), int(keys.max())
            if hi - lo < _DENSE_SPAN:
                sums = np.bincount(keys - lo, weights=counts)
                where = np.flatnonzero(sums)
                found, added = (where + lo).tolist(), sums[where].astype(np.int64).tolist()
            else:  # keys far apart (a tiny alpha): by the distinct keys, not a dense span
                distinct, index = np.unique(keys, return_inverse=True)
                found, added = distinct.tolist(), np.bincount(index, weights=counts).astype(np.int64).tolist()
            bins.update(zip(found, map(operator.add, map(bins.get, found, repeat(0)), added), strict=True))
            return
    for payload, size in zip(pending, sizes, strict=True):  # one C-level pass each, as ``merge``
        view = memoryview(payload)
        ks, cs = view[PACKED_HEAD:PACKED_HEAD + 4 * size].cast("i"), view[PACKED_HEAD + 4 * size:].cast("I")
        bins.update(zip(ks, map(operator.add, map(bins.get, ks, repeat(0)), cs), strict=True))
