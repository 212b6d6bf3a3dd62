"""Sketch accuracy as a property over many data sets, exact merging, and the edges (overflow, empty, ranks).

The reference for every estimate is the exact order statistic at 0-based rank floor(q·(n−1)), the same rank
definition ``Sketch.quantile`` documents.
"""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest

import harness.metrics
from harness.errors import KneecapError
from harness.metrics import Sketch, SketchMismatch
from harness.metrics.quantiles import summarize_sketch

ALPHA = 0.01
QUANTILES = (0.5, 0.9, 0.95, 0.99, 0.999, 0.0, 1.0)
SIZES = (1, 2, 10, 1000, 100_000)
# The bound is exact in real arithmetic; log/pow in floating point put a value lying on a bin edge a few ulps over
# it (measured: 4e-16 relative, see test_values_on_bin_edges_keep_the_bound). 1e-12 is far below anything visible.
FLOAT_SLACK = 1e-12


def _dataset(name: str, n: int) -> np.ndarray:
    rng = np.random.default_rng([n, zlib.crc32(name.encode())])  # stable across runs (hash() is salted)
    if name == "uniform":
        return rng.uniform(0.0, 10.0, n)
    if name == "normal":
        return rng.normal(100.0, 10.0, n)  # mean 10 sd above 0, so no negatives
    if name == "lognormal_heavy":
        return rng.lognormal(math.log(0.05), 2.0, n)
    if name == "pareto_heavy":
        return rng.pareto(1.2, n) + 1.0
    if name == "exponential":
        return rng.exponential(0.2, n)
    if name == "constant":
        return np.full(n, 0.042)
    if name == "bimodal":
        return np.where(rng.random(n) < 0.7, rng.normal(0.02, 0.002, n), rng.normal(1.5, 0.1, n))
    if name == "integers":
        return rng.integers(0, 1000, n).astype(float)  # includes exact zeros: the zero bin
    if name == "tiny":
        return rng.uniform(0.5e-4, 2e-4, n)
    if name == "huge":
        return rng.uniform(0.5e5, 2e5, n)
    raise AssertionError(name)


DATASETS = ("uniform", "normal", "lognormal_heavy", "pareto_heavy", "exponential", "constant", "bimodal",
            "integers", "tiny", "huge")


def _exact(sorted_values: list[float], q: float) -> float:
    return sorted_values[math.floor(q * (len(sorted_values) - 1))]


def _assert_close(estimate: float, exact: float, alpha: float, what: str) -> None:
    assert abs(estimate - exact) <= (alpha + FLOAT_SLACK) * abs(exact), (
        f"{what}: estimate {estimate!r} vs exact {exact!r}, relative error {abs(estimate - exact) / abs(exact):.3%}"
    )


def _sketch(values, alpha: float = ALPHA) -> Sketch:
    s = Sketch(relative_accuracy=alpha)
    for v in values:
        s.add(v)
    return s


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("name", DATASETS)
def test_quantiles_within_relative_accuracy(name: str, size: int) -> None:
    data = _dataset(name, size)
    assert (data >= 0).all()
    s = _sketch(data.tolist())
    exact = sorted(data.tolist())
    assert s.count == size
    assert s.min == exact[0] and s.max == exact[-1]
    assert s.sum == pytest.approx(float(np.sum(data)), rel=1e-9)
    for q in QUANTILES:
        _assert_close(s.quantile(q), _exact(exact, q), ALPHA, f"{name} n={size} q={q}")


@pytest.mark.parametrize("alpha", [0.001, 0.02, 0.05])
@pytest.mark.parametrize("name", ["lognormal_heavy", "pareto_heavy", "tiny"])
def test_other_accuracies_keep_their_bound(name: str, alpha: float) -> None:
    data = _dataset(name, 5000).tolist()
    s = _sketch(data, alpha)
    exact = sorted(data)
    for q in QUANTILES:
        _assert_close(s.quantile(q), _exact(exact, q), alpha, f"{name} alpha={alpha} q={q}")


def test_values_on_bin_edges_keep_the_bound() -> None:
    # gamma^k is where log(v)/log(gamma) is an integer, the spot where float rounding picks the bin.
    gamma = (1 + ALPHA) / (1 - ALPHA)
    for k in range(-1000, 1000, 7):
        edge = gamma**k
        for v in (math.nextafter(edge, 0.0), edge, math.nextafter(edge, math.inf)):
            s = _sketch([0.0, v, 1e9])  # the middle rank is an estimate, not the exact min or max
            _assert_close(s.value_at_rank(1), v, ALPHA, f"edge k={k} v={v!r}")


def test_value_at_rank_every_rank_and_monotone() -> None:
    data = _dataset("lognormal_heavy", 2000).tolist()
    s = _sketch(data)
    exact = sorted(data)
    values = [s.value_at_rank(r) for r in range(len(exact))]
    for r, (estimate, truth) in enumerate(zip(values, exact, strict=True)):
        _assert_close(estimate, truth, ALPHA, f"rank {r}")
    assert values == sorted(values)
    assert values[0] == exact[0] and values[-1] == exact[-1]  # the extremes are exact


def test_value_at_rank_rejects_out_of_range() -> None:
    s = _sketch([1.0, 2.0, 3.0])
    for bad in (-1, 3):
        with pytest.raises(ValueError, match=r"\[0, 2\]"):
            s.value_at_rank(bad)
    with pytest.raises(ValueError, match="empty"):
        Sketch().value_at_rank(0)


def test_rank_definition_is_lower_order_statistic() -> None:
    s = _sketch([1.0, 2.0])
    assert s.quantile(0.5) == 1.0  # floor(0.5 * 1) = rank 0
    assert s.quantile(0.999) == 1.0
    assert s.quantile(1.0) == 2.0


@pytest.mark.parametrize("parts", [2, 7])
def test_merge_of_parts_equals_sketch_of_whole(parts: int) -> None:
    data = np.concatenate([_dataset("lognormal_heavy", 30_000), _dataset("integers", 3000)]).tolist()
    cuts = sorted(np.random.default_rng(parts).choice(len(data), parts - 1, replace=False).tolist())
    pieces = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    whole = _sketch(data)
    merged = Sketch()
    for piece in pieces:
        merged.merge(_sketch(piece))
    assert merged.bins() == whole.bins()
    assert (merged.count, merged.zero_count, merged.min, merged.max) == (
        whole.count, whole.zero_count, whole.min, whole.max)
    assert merged.sum == pytest.approx(whole.sum, rel=1e-12)  # float addition order differs
    qs = [i / 1000 for i in range(1001)]
    assert [merged.quantile(q) for q in qs] == [whole.quantile(q) for q in qs]


def test_merge_equals_the_plain_sum_of_bins_on_random_sketches() -> None:
    """``merge`` adds bins in one C-level pass (update over zip/map); it must give exactly the plain per-key sum, the
    extremes and the counters, for overlapping and disjoint keys, empty sides and a sketch merged into itself, as
    the wire decoder's sketches (no ``__init__``) do."""
    from harness.metrics.wire import decode_sketch, encode_sketch

    rng = np.random.default_rng(11)
    for trial in range(200):
        sides = []
        for _ in range(2):
            n = int(rng.integers(0, 60))
            values = rng.lognormal(float(rng.uniform(-8, 3)), float(rng.uniform(0.01, 3)), n).tolist()
            sides.append(_sketch(values + [0.0] * int(rng.integers(0, 2)) + [-1.0] * int(rng.integers(0, 2))))
        a, b = sides if trial % 3 else (sides[0], sides[0])  # every third trial: merge into itself
        if trial % 2:
            a, b = decode_sketch(encode_sketch(a)), b if b is not a else None
            b = a if b is None else decode_sketch(encode_sketch(b))
        plain = dict(a.bins())
        for key, count in b.bins().items():
            plain[key] = plain.get(key, 0) + count
        expect = (dict(sorted(plain.items())), a.count + b.count, a.zero_count + b.zero_count,
                  a.overflow + b.overflow, min(a.min, b.min) if a.count and b.count else (a.min if a.count else b.min),
                  max(a.max, b.max) if a.count and b.count else (a.max if a.count else b.max))
        a.merge(b)
        got = (a.bins(), a.count, a.zero_count, a.overflow, a.min, a.max)
        assert got[:4] == expect[:4] and all(x == y or (math.isnan(x) and math.isnan(y))
                                             for x, y in zip(got[4:], expect[4:], strict=True)), trial


def test_merge_leaves_input_unchanged() -> None:
    a = _sketch([0.1, 0.2, 0.0, -1.0])
    b = _sketch([0.3, 5.0, math.nan])
    before = (b.bins(), b.count, b.zero_count, b.overflow, b.sum, b.min, b.max)
    a.merge(b)
    assert (b.bins(), b.count, b.zero_count, b.overflow, b.sum, b.min, b.max) == before
    assert (a.count, a.overflow, a.min, a.max) == (5, 2, 0.0, 5.0)
    a.add(7.0)  # later changes to a never reach b
    assert b.max == 5.0


def test_merge_into_itself_doubles() -> None:
    s = _sketch([0.1, 0.2, 0.3])
    s.merge(s)
    assert s.count == 6 and set(s.bins().values()) == {2}


def test_merge_with_different_accuracy_raises_naming_both() -> None:
    with pytest.raises(SketchMismatch, match=r"0\.01.*0\.02") as info:
        Sketch(relative_accuracy=0.01).merge(Sketch(relative_accuracy=0.02))
    assert isinstance(info.value, KneecapError)
    with pytest.raises(TypeError, match="dict"):
        Sketch().merge({})  # type: ignore[arg-type]


def test_overflow_counts_negative_nan_inf_and_adds_nothing() -> None:
    s = Sketch()
    s.add(0.5)
    for bad in (-1.0, -1e-12, math.nan, math.inf, -math.inf):
        s.add(bad)
    s.add(-3.0, 4)
    assert s.overflow == 9
    assert (s.count, s.sum, s.min, s.max) == (1, 0.5, 0.5, 0.5)
    assert s.quantile(0.99) == 0.5


def test_zero_bin_holds_zeros_and_values_below_cutoff() -> None:
    s = _sketch([0.0, -0.0, 1e-12, 0.5])
    assert (s.zero_count, s.count, s.overflow) == (3, 4, 0)
    # Ranks 1 and 2 (0.0 and 1e-12) fall in the zero bin and read back as 0: off by < 1e-9 absolute.
    assert [s.value_at_rank(r) for r in range(4)] == [0.0, 0.0, 0.0, 0.5]


def test_empty_sketch() -> None:
    s = Sketch()
    assert s.count == 0 and s.overflow == 0 and s.sum == 0.0
    for value in (s.quantile(0.5), s.quantile(0.0), s.min, s.max, s.mean):
        assert math.isnan(value)
    assert s.bins() == {}


def test_bad_quantile_raises() -> None:
    s = _sketch([1.0])
    for bad in (-0.01, 1.01, math.nan, 99):
        with pytest.raises(ValueError, match=r"\[0, 1\]"):
            s.quantile(bad)


def test_add_with_count_equals_repeated_adds() -> None:
    a, b = Sketch(), Sketch()
    a.add(0.25, 5)
    a.add(0.0, 2)
    for _ in range(5):
        b.add(0.25)
    b.add(0.0)
    b.add(0.0)
    assert (a.bins(), a.count, a.zero_count, a.sum) == (b.bins(), b.count, b.zero_count, b.sum)
    assert a.mean == pytest.approx(1.25 / 7)
    a.add(0.25, np.int64(3))  # numpy ints are accepted as counts
    assert a.count == 10


def test_bool_count_is_stored_as_int() -> None:
    s = Sketch()
    s.add(0.5, True)  # type: ignore[arg-type]
    assert s.bins() == {-34: 1} and type(next(iter(s.bins().values()))) is int


@pytest.mark.parametrize(("count", "error"), [(0, ValueError), (-2, ValueError), (2.5, TypeError), (1.0, TypeError)])
def test_add_rejects_bad_counts(count: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        Sketch().add(1.0, count)  # type: ignore[arg-type]


@pytest.mark.parametrize("alpha", [0.0, 1.0, -0.1, math.nan])
def test_constructor_rejects_bad_accuracy(alpha: float) -> None:
    with pytest.raises(ValueError, match="relative_accuracy"):
        Sketch(relative_accuracy=alpha)


def test_copy_is_independent_and_clear_resets() -> None:
    s = _sketch([0.1, 0.0, 2.0, -5.0])
    c = s.copy()
    s.add(9.0)
    assert (c.count, c.max, c.overflow, c.zero_count) == (3, 2.0, 1, 1)
    s.clear()
    assert (s.count, s.overflow, s.zero_count, s.sum, s.bins()) == (0, 0, 0, 0.0, {})
    assert math.isnan(s.quantile(0.5)) and s.relative_accuracy == ALPHA
    s.add(3.0)
    assert s.min == s.max == 3.0


def test_a_kept_value_lasts_while_the_samples_do() -> None:
    s, made = _sketch([0.1, 0.2]), []

    def make(sk: Sketch) -> float:
        made.append(sk.count)
        return sk.quantile(0.5)

    assert s.remembered("p50", make) == s.remembered("p50", make) == pytest.approx(0.1, rel=ALPHA)
    s.add(-1.0)  # overflow: no sample the value reads
    assert s.remembered("p50", make) and made == [2]
    s.remembered("other", make)  # another reader's tag: made again, and it replaces the first
    s.add(0.3)
    s.remembered("p50", make)
    s.clear()  # the same count again, other samples
    s.add(5.0)
    s.add(6.0)
    s.add(7.0)
    assert s.remembered("p50", make) == pytest.approx(6.0, rel=ALPHA) and made == [2, 2, 3, 3]
    other = _sketch([9.0])
    s.merge(other)
    assert s.remembered("p50", make) == pytest.approx(6.0, rel=ALPHA) and made == [2, 2, 3, 3, 4]


def test_a_summary_is_kept_on_its_sketch_and_each_caller_gets_a_copy() -> None:
    s = _sketch([i / 1000 for i in range(1, 1001)])
    first = summarize_sketch(s)
    first["p99_ci"][0] = -1.0  # a caller changing its copy (the step summary rewrites its dict)
    first["p50"] = -1.0
    again = summarize_sketch(s)
    assert again == summarize_sketch(s.copy()) and again["p99_ci"][0] > 0 and again["p50"] > 0
    assert summarize_sketch(s, 1.0)["p50"] == pytest.approx(again["p50"] / 1000, abs=1e-3)  # another scale: made anew
    s.add(5.0)
    assert summarize_sketch(s)["max"] == 5000.0 and summarize_sketch(s)["count"] == 1001


def test_exported_members() -> None:
    assert set(harness.metrics.__all__) == {"Sketch", "SketchMismatch", "encode_sketch", "decode_sketch"}
    assert issubclass(SketchMismatch, KneecapError)
