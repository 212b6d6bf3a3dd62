"""Which steps count (analysis/counted.py): one rule for the knee, the SLO verdict, the gate, the sweep map and the
console, written per step into summary.json. Pure: a Ledger fed decoded reports, no Locust."""

from __future__ import annotations

import pytest

from harness.analysis.counted import WHY, not_counted, why_not
from harness.analysis.ledger import Ledger
from harness.analysis.summarize import RunFacts, summarize
from harness.analysis.verdict import within_slo
from harness.metrics.aggregate import Bucket
from harness.metrics.protocol import GeneratorSample, Report
from harness.metrics.record import RequestRecord
from harness.metrics.sketch import Sketch
from harness.scenario import default_scenario


def test_the_first_reason_is_named():
    assert why_not(requests=0, fleet_changed=True, complete=False, reliable=False) == "empty"
    assert why_not(requests=5, fleet_changed=True, complete=False, reliable=False) == "fleet_changed"
    assert why_not(requests=5, fleet_changed=False, complete=False, reliable=False) == "incomplete"
    assert why_not(requests=5, fleet_changed=False, complete=True, reliable=False) == "unreliable"
    assert why_not(requests=5, fleet_changed=False, complete=True, reliable=True) is None
    assert set(WHY) == {"empty", "fleet_changed", "incomplete", "unreliable"}


@pytest.mark.parametrize(("judged", "best"), [
    ([(4, 0, True), (8, 1, True), (12, 2, False), (16, 3, True)], (8, 1)),  # past a failure nothing is within
    ([(4, 0, False), (8, 1, True)], None),  # the lightest load failed
    ([(8, 2, True), (4, 0, True), (8, 1, True)], (8, 2)),  # a level run twice: its last step
    ([(4, 0, True), (8, 1, True), (8, 3, False)], (4, 0)),  # ... and both must pass
    ([], None),
])
def test_the_largest_load_within_slo_needs_every_lighter_counted_step_to_pass(judged, best):
    assert within_slo(judged) == best


def _report(step: int, ttft_s: float, n: int, lag_s: float) -> Report:
    b = Bucket()
    for _ in range(n):
        b.add(RequestRecord(start=0.0, ttft_s=ttft_s, e2e_s=ttft_s + 0.02, chunk_times=[ttft_s, ttft_s + 0.02],
                            output_tokens=2))
    lag = Sketch()
    for _ in range(50):
        lag.add(lag_s)
    return Report(step=step, buckets=[(step, "measure", b)], gen=GeneratorSample(lag, 30.0))


def _run(steps: list[tuple[float, float, float]], *, last_done: bool = True):
    """A three-level run on a Ledger: per step (users, TTFT s, loop lag s), 40 requests each."""
    sc = default_scenario({"slo.ttft": "p(99)<100", "load.step.min_requests": 10, "load.step.warmup_s": 0,
                           "load.step.min_duration_s": 10})
    ledger = Ledger(sc)
    for i, (users, ttft, lag) in enumerate(steps):
        ledger.begin_step(users, now=20.0 * i, wall=20.0 * i)
        ledger.merge("w", _report(i, ttft, 40, lag), now=20.0 * i + 15)
        last = i == len(steps) - 1
        ledger.end_step(20.0 * i + (15 if last_done or not last else 5), "min" if last_done or not last else "stopped")
    ledger.judge(1, final=True)
    results = ledger.results(100.0)
    return summarize(ledger, results, RunFacts(run_id="r", host="h", started_at=0.0, ended_at=100.0))


def test_a_step_whose_generator_lagged_can_neither_pass_nor_fail_an_slo():
    s = _run([(4, 0.05, 0.001), (8, 0.5, 0.05), (12, 0.06, 0.001)])  # step 1 lagged 50 ms: its slow TTFT is ours
    js = [r.to_json() for r in s.steps]
    assert [(j["counted"], j["why"], j["slo_passed"]) for j in js] == \
        [(True, None, True), (False, "unreliable", None), (True, None, True)]
    assert (s.slo.passed, s.slo.max_load_within_slo, s.exit_code) == (True, 12, 0)
    assert [not_counted(r) for r in s.steps] == [None, "unreliable", None]


def test_a_counted_failure_bounds_the_load_within_slo_and_fails_the_run_below_the_knee():
    s = _run([(4, 0.05, 0.001), (8, 0.5, 0.001), (12, 0.06, 0.001)])
    assert s.knee.found and s.knee.load == 4  # passed: every SLO held up to the knee
    assert (s.slo.passed, s.slo.max_load_within_slo, s.exit_code) == (True, 4, 0)
    s = _run([(4, 0.5, 0.001), (8, 0.06, 0.001)])
    assert not s.knee.found and (s.slo.passed, s.slo.max_load_within_slo, s.exit_code) == (False, None, 3)


def test_a_step_cut_short_is_not_counted_and_a_run_of_only_such_steps_has_no_valid_result():
    s = _run([(4, 0.05, 0.001), (8, 0.5, 0.001)], last_done=False)  # stopped 5 s into a 10 s step
    assert [r.to_json()["why"] for r in s.steps] == [None, "incomplete"]
    assert (s.slo.passed, s.slo.max_load_within_slo, s.exit_code) == (True, 4, 0)
    only = _run([(4, 0.5, 0.001)], last_done=False)
    assert (only.slo.passed, only.exit_code) == (None, 4)


def test_the_knee_s_reason_says_what_p95_says_when_p99_had_too_few_tail_requests():
    from types import SimpleNamespace

    from harness.analysis.summarize import _tail_why

    tail = {"attributions": [
        {"metric": "ttft_s", "quantile": 0.99, "verdict": "too_few", "line": "p99 TTFT: too few tail requests"},
        {"metric": "ttft_s", "quantile": 0.95, "verdict": "cause", "line": "p95 TTFT requests had longer prompts"}]}
    after = SimpleNamespace(classes=None, tail=tail)
    assert _tail_why(after, "ttft", None) == "past it, p95 TTFT requests had longer prompts"  # type: ignore[arg-type]
    tail["attributions"][0]["verdict"] = "cause"
    assert _tail_why(after, "ttft", None) == "past it, p99 TTFT: too few tail requests"  # type: ignore[arg-type]
