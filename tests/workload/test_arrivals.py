"""Arrival schedules on plain data: rates, burstiness, trace replay, and the fleet split."""

from __future__ import annotations

import itertools
import math
import random
import statistics

import pytest

from harness.workload.arrivals import arrival_times, trace_gaps


def take(n, **kw) -> list[float]:
    return list(itertools.islice(arrival_times(rng=random.Random(1), **kw), n))


def gaps(times):
    return [b - a for a, b in itertools.pairwise(times)]


def test_poisson_rate_and_exponential_gaps():
    t = take(20_000, process="poisson", rate=50.0)
    g = gaps(t)
    assert 20_000 / t[-1] == pytest.approx(50, rel=0.02)
    assert statistics.pstdev(g) / statistics.mean(g) == pytest.approx(1.0, abs=0.03)  # CV of an exponential
    assert sum(x < 0.02 for x in g) / len(g) == pytest.approx(1 - math.exp(-1), abs=0.01)


def test_constant_is_exact():
    g = gaps(take(1000, process="constant", rate=40.0))
    assert max(g) == pytest.approx(0.025) and min(g) == pytest.approx(0.025)


def test_gamma_burstiness():
    g = gaps(take(20_000, process="gamma", rate=10.0, cv=3.0))
    assert statistics.mean(g) == pytest.approx(0.1, rel=0.05)
    assert statistics.pstdev(g) / statistics.mean(g) == pytest.approx(3.0, rel=0.1)


def test_trace_replay_keeps_burstiness_at_the_target_rate():
    rng = random.Random(2)
    source = [rng.choice([0.001, 0.001, 0.001, 2.0]) for _ in range(5000)]
    g = gaps(take(20_000, process="trace", rate=25.0, gaps=source))
    assert statistics.mean(g) == pytest.approx(1 / 25, rel=0.02)
    cv = statistics.pstdev(source) / statistics.mean(source)
    assert statistics.pstdev(g) / statistics.mean(g) == pytest.approx(cv, rel=0.05)


@pytest.mark.parametrize("process", ["poisson", "constant", "gamma"])
def test_workers_split_one_schedule_exactly(process):
    whole = take(3000, process=process, rate=30.0, cv=2.0)
    parts = [take(1000, process=process, rate=30.0, cv=2.0, stride=3, offset=o) for o in range(3)]
    assert sorted(itertools.chain(*parts)) == whole


def test_bad_inputs():
    with pytest.raises(ValueError, match="rate must be > 0"):
        take(1, process="poisson", rate=0)
    with pytest.raises(ValueError, match="unknown arrival process"):
        take(1, process="bursty", rate=1)
    with pytest.raises(ValueError, match="two distinct timestamps"):
        trace_gaps([5.0, 5.0])
