"""summary.json as the master writes it, built from the real result types (no hand-made dict), and broken on
purpose: for the tests of the summary's validation, the report and compare commands, and bad input."""

from __future__ import annotations

from harness.analysis.knee import Knee
from harness.analysis.pricing import CostSpec, Tokens, floor_of, run_cost, step_cost
from harness.analysis.results import FleetEvent, RunSummary, SloCheck, SloVerdict
from harness.analysis.steps import Generator, StepInfo, step_result
from harness.metrics.aggregate import Bucket
from harness.metrics.record import RequestRecord
from harness.metrics.sketch import Sketch

__all__ = ["break_", "written"]


def _bucket(n: int, fail: int = 0, open_loop: bool = False) -> Bucket:
    b = Bucket()
    for i in range(n):
        rec = RequestRecord(start=0.0, intended_start=0.0 if open_loop else None, headers_s=0.01,
                            ttft_s=0.05 + i / 1000, e2e_s=0.5, chunk_times=[0.05, 0.06, 0.07], output_tokens=3,
                            prompt_tokens=100, prompt_tokens_target=100)
        b.add(rec)
    for _ in range(fail):
        b.add(RequestRecord(start=0.0, error="http_5xx", error_detail="500 Internal Server Error"))
    if open_loop:
        b.arrivals, b.dropped = n + fail + 2, 2
    return b


def written(mode: str = "closed", cost: bool = False) -> dict:
    """A summary.json exactly as the master writes it (the real result types, not a hand-made dict); ``cost``: with
    the cost view of a scenario with a ``cost:`` block."""
    lag = Sketch()
    lag.add(0.002)
    gen = Generator(lag=lag, cpu_max_pct=40.0)
    steps = []
    for i, level in enumerate((4, 8, 12)):
        info = StepInfo(index=i, level=level, started=10.0 * i, warmup_s=1.0, ended=10.0 * i + 9,
                        workers_lost=["w2"] if i == 2 else [])
        r = step_result(info, _bucket(50 * (i + 1), fail=i, open_loop=mode == "open"), gen, now=100.0, mode=mode)
        r.complete, r.stationary, r.slo_passed = True, True, i < 2
        r.slo = [SloCheck(threshold="ttft: p(95)<500", observed=80.0, passed=True, abort_on_fail=False)]
        r.server = {"waiting_max": 2.0, "waiting_mean": None, "running_max": 8.0, "kv_cache_usage_max": None,
                    "preemptions": 0}
        steps.append(r)
    steps.append(step_result(StepInfo(index=3, level=16, started=40.0, warmup_s=1.0), Bucket(), None, now=40.5,
                             mode=mode))  # cut short: no data
    spec = CostSpec(per_hour=4.2, input_per_mtok=0.5, output_per_mtok=1.5)
    for r in steps if cost else ():
        r.cost = step_cost(spec, index=r.index, level=r.level, tokens=Tokens(input=100 * r.ok, output=3 * r.ok),
                           output_tokens_per_s=r.throughput.output_tokens_per_s, floor=floor_of([], r.slo))
    summary = RunSummary(run_id="r1", scenario="s", host="http://127.0.0.1:8000", model="m", started_at=1.7e9,
                      ended_at=1.7e9 + 60, mode=mode, stop_reason="knee confirmed at 8", workers=2, steps=steps,
                      knee=Knee(True, confirmed=True, step_index=1, load=8, p99_before_ms=80.0, p99_after_ms=900.0,
                                throughput_before=100.0, throughput_after=101.0, confidence="high", reason="why"),
                      knee_metric="ttft", knee_reason="why", exit_code=5,
                      slo=SloVerdict(thresholds=["ttft: p(95)<500"], passed=True, max_load_within_slo=8),
                      fleet_events=[FleetEvent(kind="lost", worker="w2", at=1.7e9 + 30, steps=[2])],
                      influx={"written": 10, "unwritten": 0, "spool_file": None, "last_error": None},
                      merge_errors=1)
    if cost:
        summary.cost = run_cost(spec, [r.cost for r in steps], judged={0: True, 1: True}, knee_index=1,
                                max_load_within_slo=8, slo_given=True)
    return summary.to_json()


def break_(path: str, value: object) -> dict:
    s = written()
    *parents, last = path.split(".")
    node = s
    for key in parents:
        node = node[int(key)] if key.isdigit() else node[key]
    if value is KeyError:
        del node[last]
    else:
        node[last] = value
    return s
