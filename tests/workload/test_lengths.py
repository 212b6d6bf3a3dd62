"""Length distributions on plain data: quantiles match the spec, joint sampling keeps the correlation,
seeds reproduce across processes."""

from __future__ import annotations

import math
import random
import statistics
import subprocess
import sys

import pytest

from harness.workload.lengths import (
    Empirical,
    Fixed,
    Gamma,
    JointEmpirical,
    LogNormal,
    Mixture,
    Normal,
    QuantileCurve,
    Uniform,
)
from harness.workload.sampler import RequestSampler, worker_rng

N = 20_000


def draws(dist, n: int = N, seed: int = 1) -> list[int]:
    rng = random.Random(seed)
    return sorted(dist.sample(rng) for _ in range(n))


def q(values: list[int], p: float) -> float:
    return values[int(p * (len(values) - 1))]


def test_fixed_and_uniform():
    assert set(draws(Fixed(17), 100)) == {17}
    u = draws(Uniform(10, 20))
    assert u[0] == 10 and u[-1] == 20 and abs(statistics.mean(u) - 15) < 0.1


def test_lognormal_by_median_and_by_moments():
    v = draws(LogNormal(900, 0.8).bounded(1, 10**9))
    # ln-quantiles of a lognormal: median·exp(sigma·z)
    for p, z in ((0.5, 0.0), (0.9, 1.2816), (0.99, 2.3263)):
        assert q(v, p) == pytest.approx(900 * math.exp(0.8 * z), rel=0.05)
    m = draws(LogNormal.from_mean_std(500, 300))
    assert statistics.mean(m) == pytest.approx(500, rel=0.03)
    assert statistics.stdev(m) == pytest.approx(300, rel=0.08)


def test_normal_is_truncated_into_bounds():
    v = draws(Normal(100, 50).bounded(80, 300))
    assert v[0] >= 80 and v[-1] <= 300
    assert q(v, 0.5) > 100  # truncation from below shifts the median up (not a pile-up at 80)
    assert v.count(80) < 0.02 * N


def test_gamma_moments():
    v = draws(Gamma.from_mean_std(250, 120))
    assert statistics.mean(v) == pytest.approx(250, rel=0.03)
    assert statistics.stdev(v) == pytest.approx(120, rel=0.05)


def test_mixture_weights():
    v = draws(Mixture([(0.8, Fixed(10)), (0.2, Fixed(1000))]))
    assert v.count(10) / N == pytest.approx(0.8, abs=0.015)


def test_clipping_applies_to_every_distribution():
    v = draws(LogNormal(900, 2.0).bounded(16, 8000))
    assert v[0] == 16 and v[-1] == 8000


def test_empirical_values_and_quantile_curve():
    e = draws(Empirical([1, 2, 3, 100]))
    assert set(e) == {1, 2, 3, 100} and e.count(100) / N == pytest.approx(0.25, abs=0.015)
    c = draws(QuantileCurve([(0, 100), (0.5, 1500), (0.9, 4000), (1, 7000)]))
    assert q(c, 0.5) == pytest.approx(1500, rel=0.03) and q(c, 0.9) == pytest.approx(4000, rel=0.03)
    assert c[0] >= 100 and c[-1] <= 7000


def test_joint_sampling_keeps_pairs_and_correlation():
    rng = random.Random(3)
    pairs = []
    for _ in range(2000):
        n_in = int(rng.lognormvariate(7, 1))
        pairs.append((n_in, max(1, 4000 // (n_in // 100 + 1))))  # long contexts → short answers
    joint = JointEmpirical(pairs)
    sampled = [joint.sample(rng) for _ in range(5000)]
    assert set(sampled) <= set(pairs)
    corr = statistics.correlation([math.log(a) for a, _ in sampled], [math.log(b) for _, b in sampled])
    want = statistics.correlation([math.log(a) for a, _ in pairs], [math.log(b) for _, b in pairs])
    assert corr < -0.5 and corr == pytest.approx(want, abs=0.05)
    jittered = JointEmpirical(pairs, jitter=0.1)
    s = [jittered.sample(rng) for _ in range(5000)]
    assert len(set(s) - set(pairs)) > 1000
    assert statistics.correlation([math.log(a) for a, _ in s], [math.log(b) for _, b in s]) < -0.5


@pytest.mark.integration
def test_worker_streams_are_reproducible_and_independent():
    def first3(worker: int) -> list[float]:
        r = worker_rng(42, worker, "lengths")
        return [r.random() for _ in range(3)]

    a = first3(0)
    assert a == first3(0) and a != first3(1)
    code = ("from harness.workload.sampler import worker_rng;"
            "r = worker_rng(42, 0, 'lengths'); print([r.random() for _ in range(3)])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "123", "PATH": ""}).stdout
    assert out.strip() == str(a)


def test_sampler_same_seed_same_requests_and_fits_context():
    def run(worker: int) -> list[tuple[int, int]]:
        s = RequestSampler(input_tokens=LogNormal(3000, 1.0), output_tokens=Fixed(900), joint=None, api="chat",
                           seed=9, worker=worker, max_context=4096)
        return [(r.prompt.target_tokens, r.max_tokens) for r in (s.next() for _ in range(200))]

    first = run(0)
    assert first == run(0) and first != run(1)
    assert all(i + o <= 4096 and o == 900 for i, o in first)
