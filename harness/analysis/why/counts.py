"""A step's features as codes and counts: the data of the tail tests, in arrays built once per step. Pure.

Each feature's column over the rows tested (the tails and the rest's sample, ~25k of a 100k-request step)
becomes a ``Coded``: its distinct known values in order (``keys``) and each row's index among them (``codes``,
−1 when missing), plus the uniform sample's counts (``base``). A test's two samples are then two count
vectors over the same keys (``np.bincount`` of the tail's codes; the base minus the excluded rows' for the
rest), and everything a test reads — U, the medians, a quantile, the share above a value, the value that
separates tail from rest — is one pass over the distinct values, not over the requests. The 112 tests of a
judged step cost ~0.1 ms each this way (``python -m benchmarks.tail_attribution``); the same tests on
``Counter``s cost ~1 ms each. ``tests/analysis/test_tail_counts.py`` holds them equal to the literal
definitions on random columns.

numpy is imported here only: workers and masters start without it (``analysis/why/attribute.py`` imports this module
when it first explains a tail).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.analysis.why.rank_tests import UTest, normal_sf

__all__ = ["Coded", "as_counter", "code_column", "counts", "mann_whitney_arrays", "median", "quantile", "separation",
           "share_above"]


@dataclass(frozen=True)
class Coded:
    keys: list
    """The distinct known values, ascending (numbers) or by ``str`` (anything else: flags, workers)."""
    values: np.ndarray | None
    """``keys`` as float64, for comparisons; None when the values are not numbers."""
    codes: np.ndarray
    """Each row's index into ``keys``; −1 where the value is missing (None, NaN)."""
    base: np.ndarray
    """Counts of each key over the uniform sample's rows."""


def code_column(col: Sequence[Any] | np.ndarray, uniform: np.ndarray, floor: float = 0.0,
                numeric: bool = True) -> Coded:
    """``col``'s rows coded by their distinct values; ``floor``: numbers up to it count as 0 (``_Numeric.floor``);
    ``uniform``: the rows of the rest's sample (positions in ``col``). Numbers become exact int keys when every
    known value is integral (token counts, queue lengths), as the rows carry them."""
    if numeric:
        arr = np.array(col, dtype=np.float64)  # None → NaN
        known = ~np.isnan(arr)
        if floor:
            arr = np.where(known & (arr > floor), arr, 0.0)
            arr[~known] = np.nan
        values, inverse = np.unique(arr[known], return_inverse=True)
        codes = np.full(len(arr), -1, dtype=np.int64)
        codes[known] = inverse
        integral = bool(np.all(values == np.floor(values))) and (not len(values) or abs(values).max() < 2 ** 53)
        keys = values.astype(np.int64).tolist() if integral else values.tolist()
    else:
        keys = sorted({v for v in col if v is not None}, key=str)
        index = dict(zip(keys, range(len(keys)), strict=True))
        index[None] = -1
        codes = np.fromiter(map(index.__getitem__, col), dtype=np.int64, count=len(col))
        values = None
    return Coded(keys, values, codes, _bincount(codes[uniform], len(keys)))


def _bincount(codes: np.ndarray, size: int) -> np.ndarray:
    return np.bincount(codes[codes >= 0], minlength=size)


def counts(coded: Coded, tail: np.ndarray, excluded: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The tail's counts over ``coded.keys``, and the rest's: the uniform sample's minus its ``excluded`` rows
    (the sample's own tail and missing rows)."""
    size = len(coded.keys)
    return _bincount(coded.codes[tail], size), coded.base - _bincount(coded.codes[excluded], size)


def mann_whitney_arrays(ct: np.ndarray, cr: np.ndarray) -> UTest:
    """``rank_tests.mann_whitney_counts`` on two count vectors over the same ascending keys: the same sums in
    integers, so the same U, z and p to the last bit."""
    nx, ny = int(ct.sum()), int(cr.sum())
    if nx == 0 or ny == 0:
        raise ValueError(f"mann_whitney_u needs two non-empty samples, got {nx} and {ny} values")
    below = np.cumsum(cr) - cr
    u = int(ct @ below) + 0.5 * int(ct @ cr)
    n = nx + ny
    t = ct + cr
    ties = int((t * t * t).sum()) - n
    var = nx * ny / 12.0 * ((n + 1) - ties / (n * (n - 1))) if n > 1 else 0.0
    mu = nx * ny / 2.0
    if var <= 0:
        return UTest(u, 0.0, 1.0, 0.0)
    z = max(abs(u - mu) - 0.5, 0.0) / math.sqrt(var)
    return UTest(u, math.copysign(z, u - mu), min(1.0, 2.0 * normal_sf(z)), 2.0 * u / (nx * ny) - 1.0)


def median(keys: list, c: np.ndarray) -> float:
    """The median of the values counted by ``c`` (the mean of the two middle ones for an even count)."""
    cum = np.cumsum(c)
    if not len(cum) or cum[-1] == 0:
        raise ValueError("median of no values")
    half = cum[-1] / 2
    i = int(np.searchsorted(cum, half, "left"))  # the first value whose running count reaches half
    if cum[i] == half:  # an even count splitting exactly here: the next counted value is the other middle one
        return (keys[i] + keys[int(np.searchsorted(cum, half, "right"))]) / 2
    return keys[i]


def quantile(keys: list, c: np.ndarray, q: float) -> float:
    """The value at nearest rank ``q`` of the counted values."""
    cum = np.cumsum(c)
    i = int(np.searchsorted(cum, q * (cum[-1] - 1), "right"))  # the first whose running count exceeds the rank
    return keys[i] if i < len(keys) else keys[int(np.flatnonzero(c)[-1])]


def share_above(values: np.ndarray, c: np.ndarray, v: float, n: int) -> float:
    """The share of the counted values above ``v``."""
    return int(c[values > v].sum()) / n


def separation(keys: list, ct: np.ndarray, cr: np.ndarray) -> float:
    """The value v where "above v" separates tail from rest most (share of the tail above v minus the rest's: the
    Kolmogorov–Smirnov point); the lowest such v."""
    nt, nr = int(ct.sum()), int(cr.sum())
    diff = (nt - np.cumsum(ct)) / nt - (nr - np.cumsum(cr)) / nr
    diff[(ct + cr) == 0] = -math.inf  # values neither sample has
    return keys[int(np.argmax(diff))]  # the first of the largest


def as_counter(coded: Coded, c: np.ndarray) -> dict:
    """Counts as a value → count map (flags, workers: a few keys), zeros left out."""
    return {k: n for k, n in zip(coded.keys, c.tolist(), strict=True) if n}
