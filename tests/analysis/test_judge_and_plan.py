"""Step judging (failures as misses, SLO verdicts, stationarity) and load plans, on plain data."""

from __future__ import annotations

import math

import pytest

from harness.analysis.judge import evaluate_slo, is_stationary, miss_quantile, miss_quantile_ci
from harness.analysis.knee import KneeFinding
from harness.analysis.plan import StepPlan, stop_reason
from harness.metrics.aggregate import Bucket
from harness.metrics.record import RequestRecord
from harness.metrics.sketch import Sketch
from harness.spec.slo import parse_threshold


def sketch(values) -> Sketch:
    s = Sketch()
    for v in values:
        s.add(v)
    return s


def test_failures_rank_above_every_success():
    s = sketch([i / 1000 for i in range(1, 99)])  # 98 successes: 1..98 ms
    assert miss_quantile(s, 0.5, 0) == pytest.approx(0.049, rel=0.01)
    assert miss_quantile(s, 0.99, 2) == math.inf  # 2 of 100 failed: p99 is a miss
    assert miss_quantile(s, 0.97, 2) == pytest.approx(0.097, rel=0.01)
    assert miss_quantile(s, 0.01, 2, high=False) == 0.0  # speed floor: failures stream at 0 tokens/s
    assert miss_quantile(None, 0.5, 0) != miss_quantile(None, 0.5, 0)  # nan: no data
    lo, hi = miss_quantile_ci(sketch([i / 1000 for i in range(1, 1001)]), 0.99, 0)
    # ranks 983 and 997 of 1000 (984, 998 ms): each within the 1% bound, possibly the same 2%-wide bin
    assert 0.974 <= lo <= hi <= 1.008


def bucket(ttfts_ms, failures=0, speed=None) -> Bucket:
    """Two-token requests: tokens/s per user = 1 / (e2e − ttft)."""
    b = Bucket()
    for i, t in enumerate(ttfts_ms):
        gap = 1 / speed[i] if speed is not None else 1.0
        b.add(RequestRecord(start=0.0, ttft_s=t / 1000, e2e_s=t / 1000 + gap, chunk_times=[t / 1000, t / 1000 + gap],
                            output_tokens=2, prompt_tokens=10))
    for _ in range(failures):
        b.add(RequestRecord(start=0.0, error="ttft_timeout"))
    return b


def test_slo_verdicts_count_failures_as_misses():
    ths = (parse_threshold("ttft", "p(95)<500"), parse_threshold("error_rate", "rate<0.05"))
    ok = evaluate_slo(ths, bucket([100] * 100))
    assert [r.passed for r in ok] == [True, True] and ok[0].observed == pytest.approx(100, rel=0.01)
    bad = evaluate_slo(ths, bucket([100] * 90, failures=10))
    assert [r.passed for r in bad] == [False, False] and bad[0].observed == "inf"
    assert bad[1].observed == pytest.approx(0.1)


def test_speed_floor():
    th = (parse_threshold("tokens_per_s_per_user", "p(5)>20"),)
    assert evaluate_slo(th, bucket([100] * 100, speed=[30.0] * 100))[0].passed
    assert not evaluate_slo(th, bucket([100] * 100, speed=[30.0] * 90 + [5.0] * 10))[0].passed


def test_stationarity():
    assert is_stationary(sketch([0.1] * 50), sketch([0.11] * 50))
    assert not is_stationary(sketch([0.1] * 50), sketch([0.3] * 50))
    assert is_stationary(sketch([0.001] * 50), sketch([0.0025] * 50))  # tiny absolute change
    assert is_stationary(sketch([0.1] * 5), sketch([0.3] * 50)) is None


def test_staircase_levels_and_step_hold():
    plan = StepPlan.staircase(4, 4, 16, warmup_s=5, min_duration_s=20, min_requests=200, max_duration_s=60)
    assert plan.levels == (4, 8, 12, 16) and plan.level(4) is None
    assert not plan.step_done(24, 500)  # warm-up excluded: 19 s measured
    assert not plan.step_done(30, 150)  # not enough requests yet
    assert plan.step_done(26, 200)
    assert plan.step_done(65, 3)  # capped by the maximum duration
    assert StepPlan.constant(10, 30, 2).levels == (10,)


def test_the_next_time_mark_is_the_min_duration_then_the_max():
    """The shape waits for it when it comes before Locust's next tick (``load/shapes.py``)."""
    plan = StepPlan.staircase(4, 4, 16, warmup_s=5, min_duration_s=20, min_requests=200, max_duration_s=60)
    assert plan.next_mark_s(0) == 25 and plan.next_mark_s(24.5) == 0.5  # warm-up, then 20 s measured
    assert plan.next_mark_s(30) == 35 and plan.next_mark_s(64.75) == 0.25  # past the min: the max
    assert plan.next_mark_s(65) is None and plan.next_mark_s(100) is None
    assert plan.next_mark_s(2, warmup_s=0) == 18  # a step with its own warm-up (a drain)
    assert StepPlan.constant(10, 30, 2).next_mark_s(31.5) == 0.5


def test_stop_reasons():
    assert stop_reason(KneeFinding(True, confirmed=True, load=16), [0.0], []) == "knee confirmed at 16"
    assert stop_reason(KneeFinding(True, confirmed=False, load=16), [0.0], []) is None
    assert "error storm" in stop_reason(KneeFinding(False), [0.0, 0.8], [])
    assert "abort_on_fail" in stop_reason(KneeFinding(False), [0.0], ["ttft: p(99)<1000"])


@pytest.mark.parametrize("mode, peak, cores, workers", [
    ("staircase", 128, 2, 1),    # the embedded default: one worker times 128 streams
    ("constant", 4, 8, 1),
    ("search", 401, 2, 2),       # past one worker's streams
    ("staircase", 5000, 4, 4),   # never more than the cores
    ("open_staircase", 8, 2, 2),  # an open loop's peak in flight is unknown: one per core
    ("staircase", 64, 1, 1),
])
def test_local_workers_follow_the_plans_peak_users(mode, peak, cores, workers):
    from harness.spec.load import LoadPlan

    assert LoadPlan(mode=mode, start=1, max=peak).local_workers(cores) == workers
