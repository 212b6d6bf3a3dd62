"""The tail tests' arrays (``analysis/why/counts.py``) against the literal definitions, on random columns."""

from __future__ import annotations

import math
import statistics
from collections import Counter

import numpy as np
import pytest

from harness.analysis.why.counts import (
    as_counter,
    code_column,
    counts,
    mann_whitney_arrays,
    median,
    quantile,
    separation,
    share_above,
)
from harness.analysis.why.rank_tests import mann_whitney_counts


def _column(rng: np.random.Generator, n: int, levels: int, missing: float) -> list:
    return [None if rng.random() < missing else int(v) for v in rng.integers(0, levels, n)]


def _samples(seed: int, n: int = 600, levels: int = 50):
    """A coded column, a tail and a uniform sample with its excluded rows, and the literal counts of both."""
    rng = np.random.default_rng(seed)
    col = _column(rng, n, levels, 0.1)
    tail = sorted(rng.choice(n, n // 10, replace=False).tolist())
    uniform = sorted(rng.choice(n, n // 2, replace=False).tolist())
    tail_set = set(tail)
    excluded = [i for i in uniform if i in tail_set or col[i] is None]
    coded = code_column(col, np.array(uniform))
    ct, cr = counts(coded, np.array(tail, dtype=np.int64), np.array(excluded, dtype=np.int64))
    want_t = Counter(col[i] for i in tail if col[i] is not None)
    want_r = Counter(col[i] for i in uniform if i not in tail_set and col[i] is not None)
    return coded, ct, cr, want_t, want_r


@pytest.mark.parametrize("seed", range(8))
def test_counts_are_the_literal_counts_of_tail_and_rest(seed):
    coded, ct, cr, want_t, want_r = _samples(seed)
    assert coded.keys == sorted(coded.keys) and all(type(k) is int for k in coded.keys)
    assert as_counter(coded, ct) == want_t
    assert as_counter(coded, cr) == want_r


@pytest.mark.parametrize("seed", range(8))
def test_u_test_on_arrays_is_the_counts_version_to_the_last_bit(seed):
    _, ct, cr, want_t, want_r = _samples(seed, levels=[2, 5, 50, 400][seed % 4])
    assert mann_whitney_arrays(ct, cr) == mann_whitney_counts(want_t, want_r)


@pytest.mark.parametrize("seed", range(8))
def test_median_quantile_share_and_separation_by_their_definitions(seed):
    coded, ct, cr, want_t, want_r = _samples(seed, levels=[1, 2, 7, 300][seed % 4])
    for c, want in ((ct, want_t), (cr, want_r)):
        values = sorted(want.elements())
        assert median(coded.keys, c) == statistics.median(values)
        for q in (0.0, 0.5, 0.95):
            assert quantile(coded.keys, c, q) == values[math.floor(q * (len(values) - 1))]
        for v in (-1, 3, 25.5):
            assert share_above(coded.values, c, v, len(values)) == sum(x > v for x in values) / len(values)
    nt, nr = sum(want_t.values()), sum(want_r.values())
    best, at = -1.0, min(want_t.keys() | want_r.keys())
    for v in sorted(want_t.keys() | want_r.keys()):  # the Kolmogorov–Smirnov point read literally, lowest first
        d = sum(c for k, c in want_t.items() if k > v) / nt - sum(c for k, c in want_r.items() if k > v) / nr
        if d > best:
            best, at = d, v
    assert separation(coded.keys, ct, cr) == at


def test_floor_missing_values_and_non_numbers():
    col = [0.2, 0.9, None, float("nan"), 1.5, 3.0, 3.0, 0.0]
    coded = code_column(col, np.arange(len(col)), floor=1.0)
    assert coded.keys == [0, 1.5, 3.0] or coded.keys == [0.0, 1.5, 3.0]
    assert coded.codes.tolist() == [0, 0, -1, -1, 1, 2, 2, 0]
    assert as_counter(coded, coded.base) == {0: 3, 1.5: 1, 3.0: 2}
    ints = code_column([3, None, 10, 3], np.arange(4))
    assert ints.keys == [3, 10] and all(type(k) is int for k in ints.keys)
    flags = code_column([True, None, False, True], np.arange(4), numeric=False)
    assert flags.keys == [False, True] and as_counter(flags, flags.base) == {True: 2, False: 1}
    workers = code_column(["w10", "w2", None, "w10"], np.array([0, 1, 2]), numeric=False)
    assert workers.keys == ["w10", "w2"] and as_counter(workers, workers.base) == {"w10": 1, "w2": 1}
    with pytest.raises(ValueError, match="median of no values"):
        median([1], np.array([0]))
