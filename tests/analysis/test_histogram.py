"""Step deltas and bucket quantiles of server histograms: known buckets, the true quantile always inside the
stated bounds, resets, empty deltas, changed bucket layouts."""

from __future__ import annotations

import bisect
import math
import random
from fractions import Fraction

import pytest

from harness.analysis.histogram import Quantile, delta, mean, quantile
from harness.client.server_metrics import Histogram, parse_server_metrics

INF = math.inf
VLLM_TTFT = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
             80.0, 160.0, 640.0, 2560.0, INF)
SGLANG_QUEUE = (0.0, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15, 20, 30, 60, 100, INF)
TGI = (*(0.0001 * 1.5 ** (k + 1) for k in range(35)), INF)
COARSE = (0.5, 1.0, INF)


def hist(bounds: tuple[float, ...], values: list[float]) -> Histogram:
    """The cumulative histogram a server would expose after observing ``values``."""
    counts = [0] * len(bounds)
    for v in values:
        counts[bisect.bisect_left(bounds, v)] += 1  # le: a value on a bound belongs to that bucket
    cum, total = [], 0
    for c in counts:
        total += c
        cum.append(float(total))
    return Histogram(bounds=bounds, counts=tuple(cum), sum=float(sum(values)), count=float(len(values)))


def true_quantile(values: list[float], q: Fraction) -> float:
    """Nearest rank: the k-th smallest, k = ceil(q·n), at least 1."""
    xs = sorted(values)
    k = max(1, math.ceil(q * len(xs)))
    return xs[k - 1]


def test_known_buckets_give_known_quantiles() -> None:
    h = Histogram(bounds=(1.0, 2.0, 4.0, INF), counts=(10.0, 20.0, 20.0, 20.0), sum=25.0, count=20.0)
    assert quantile(h, 0.5) == Quantile(estimate=1.0, low=0.0, high=1.0)  # rank 10: the top of the first bucket
    assert quantile(h, 0.75) == Quantile(estimate=1.5, low=1.0, high=2.0)  # halfway into (1, 2]
    assert quantile(h, 0.25) == Quantile(estimate=0.5, low=0.0, high=1.0)
    assert quantile(h, 1.0) == Quantile(estimate=2.0, low=1.0, high=2.0)  # empty buckets above are skipped
    assert quantile(h, 0.75).error == 0.5
    assert mean(h) == 1.25


def test_q_zero_takes_the_first_bucket_with_an_observation() -> None:
    h = Histogram(bounds=(1.0, 2.0, INF), counts=(0.0, 4.0, 4.0), sum=6.0, count=4.0)
    assert quantile(h, 0.0) == Quantile(estimate=1.0, low=1.0, high=2.0)


def test_the_inf_bucket_is_bounded_below_only() -> None:
    h = Histogram(bounds=(1.0, 2.0, INF), counts=(5.0, 8.0, 10.0), sum=40.0, count=10.0)
    q = quantile(h, 0.95)
    assert q == Quantile(estimate=2.0, low=2.0, high=None)
    assert q.error is None
    only_inf = Histogram(bounds=(INF,), counts=(3.0,), sum=3.0, count=3.0)
    assert quantile(only_inf, 0.5) == Quantile(estimate=0.0, low=0.0, high=None)


def test_a_zero_first_bound_holds_only_zero() -> None:
    h = Histogram(bounds=(0.0, 0.1, INF), counts=(6.0, 10.0, 10.0), sum=0.2, count=10.0)
    assert quantile(h, 0.5) == Quantile(estimate=0.0, low=0.0, high=0.0)
    assert quantile(h, 0.8) == Quantile(estimate=pytest.approx(0.05), low=0.0, high=0.1)


def test_float_ranks_do_not_skip_a_bucket() -> None:
    # 0.7 × 10 is 7.000000000000001 in floats; the 7th observation is in the first bucket.
    h = Histogram(bounds=(1.0, 2.0, INF), counts=(7.0, 10.0, 10.0), sum=12.0, count=10.0)
    assert quantile(h, 0.7).high == 1.0


def test_bad_q_is_refused() -> None:
    h = Histogram(bounds=(1.0, INF), counts=(1.0, 1.0), sum=0.5, count=1.0)
    for q in (-0.1, 1.5, math.nan):
        with pytest.raises(ValueError, match="within"):
            quantile(h, q)


@pytest.mark.parametrize("bounds", [VLLM_TTFT, SGLANG_QUEUE, TGI, COARSE], ids=["vllm", "sglang", "tgi", "coarse"])
def test_true_quantile_is_always_within_the_stated_bounds(bounds: tuple[float, ...]) -> None:
    rng = random.Random(15)
    finite = [b for b in bounds if not math.isinf(b)]
    datasets = {
        "lognormal": lambda n: [rng.lognormvariate(-1.0, 1.2) for _ in range(n)],
        "exponential": lambda n: [rng.expovariate(3.0) for _ in range(n)],
        "uniform": lambda n: [rng.uniform(0.0, 3.0) for _ in range(n)],
        "bimodal": lambda n: [rng.gauss(0.05, 0.01) if rng.random() < 0.9 else rng.gauss(4.0, 1.0) for _ in range(n)],
        "on_bounds": lambda n: [rng.choice(finite) for _ in range(n)],  # every value exactly on a bound
        "zeros_and_tail": lambda n: [0.0 if rng.random() < 0.5 else rng.paretovariate(1.1) for _ in range(n)],
        "constant": lambda n: [0.3] * n,
    }
    qs = [Fraction(s) for s in ("0", "0.01", "0.25", "0.5", "0.7", "0.9", "0.95", "0.99", "0.999", "1")]
    for name, make in datasets.items():
        for n in (1, 2, 7, 100, 1000):
            values = [max(0.0, v) for v in make(n)]
            h = hist(bounds, values)
            for q in qs + [Fraction(rng.random()) for _ in range(5)]:
                got = quantile(h, float(q))
                truth = true_quantile(values, q)
                assert got is not None
                high = INF if got.high is None else got.high
                assert got.low <= truth <= high, (name, n, q, truth, got)
                assert got.low <= got.estimate <= high, (name, n, q, got)


def test_delta_is_the_step_between_two_scrapes() -> None:
    rng = random.Random(3)
    first = [rng.expovariate(2.0) for _ in range(500)]
    step = [rng.expovariate(0.5) for _ in range(300)]
    before, after = hist(VLLM_TTFT, first), hist(VLLM_TTFT, first + step)
    d = delta(before, after)
    expect = hist(VLLM_TTFT, step)
    assert d is not None and d.bounds == expect.bounds and d.counts == expect.counts and d.count == 300
    assert mean(d) == pytest.approx(sum(step) / 300)
    assert quantile(d, 0.99) == quantile(expect, 0.99)


def test_a_reset_gives_none() -> None:
    before = hist(COARSE, [0.1, 0.2, 0.7, 3.0])
    after = hist(COARSE, [0.1])  # the server restarted and has seen one request since
    assert delta(before, after) is None
    # Only the total went down (a racy scrape): still a reset.
    assert delta(before, Histogram(bounds=COARSE, counts=before.counts, sum=before.sum, count=3.0)) is None


def test_an_empty_delta_has_no_quantile_or_mean() -> None:
    h = hist(VLLM_TTFT, [0.1, 0.2])
    d = delta(h, h)
    assert d is not None and d.count == 0 and all(c == 0 for c in d.counts)
    assert quantile(d, 0.5) is None and mean(d) is None
    assert quantile(None, 0.5) is None and mean(None) is None
    assert quantile(Histogram(bounds=(), counts=(), sum=0.0, count=0.0), 0.5) is None


def test_a_missing_snapshot_or_other_buckets_give_none() -> None:
    h = hist(VLLM_TTFT, [0.1, 0.2])
    assert delta(None, h) is None and delta(h, None) is None
    assert delta(hist(COARSE, [0.1]), hist((0.5, 2.0, INF), [0.1, 0.2])) is None
    assert delta(hist(COARSE, [0.1]), hist((0.5, INF), [0.1, 0.2])) is None


def test_dipping_buckets_are_made_monotonic() -> None:
    # A scrape read while the server wrote: a bucket below its predecessor counts as its predecessor.
    h = Histogram(bounds=(1.0, 2.0, 4.0, INF), counts=(6.0, 5.0, 10.0, 10.0), sum=20.0, count=10.0)
    assert quantile(h, 0.65) == Quantile(estimate=2.25, low=2.0, high=4.0)  # 6 below, not 5: 2 + 2 * 0.5 / 4


def test_two_scrapes_give_the_steps_quantile() -> None:
    def scrape(le_1: int, total: int) -> str:
        return (f'vllm:time_to_first_token_seconds_bucket{{le="0.5"}} 0\n'
                f'vllm:time_to_first_token_seconds_bucket{{le="1.0"}} {le_1}\n'
                f'vllm:time_to_first_token_seconds_bucket{{le="+Inf"}} {total}\n'
                f"vllm:time_to_first_token_seconds_sum {total * 0.8}\nvllm:time_to_first_token_seconds_count {total}\n")

    a, b = parse_server_metrics(scrape(10, 10)), parse_server_metrics(scrape(20, 30))
    assert a is not None and b is not None
    d = delta(a.ttft, b.ttft)
    assert d is not None and d.counts == (0.0, 10.0, 20.0)
    assert quantile(d, 0.5) == Quantile(estimate=1.0, low=0.5, high=1.0)  # the step's half at or under 1 s
    assert quantile(d, 0.75) == Quantile(estimate=1.0, low=1.0, high=None)  # the other half: over 1 s, no more known
