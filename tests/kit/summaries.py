"""summary.json for the tests of its validation and read model, the report and compare commands, and bad input:
as the master writes it (``written``, from the real result types), with a mix's two classes on every step
(``with_classes``: the report's class tables and the live dashboard), broken on purpose (``break_``), as schema 1
wrote it (``version1``), and a version 2 file written by hand (``hand_made_v2``)."""

from __future__ import annotations

import copy

from harness.analysis.cost.pricing import floor_of, run_cost, step_cost
from harness.analysis.knee import KneeFinding
from harness.analysis.results import RunSummary, SloVerdict
from harness.analysis.steps import GeneratorTally, StepInfo, step_result
from harness.metrics.aggregate import Bucket
from harness.metrics.record import RequestRecord
from harness.metrics.sketch import Sketch
from harness.spec.cost import CostSpec
from harness.summary import FleetEvent, SloCheck, Tokens

__all__ = ["break_", "hand_made_v2", "version1", "with_classes", "written"]


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
    gen = GeneratorTally(lag=lag, cpu_max_pct=40.0)
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
                      knee=KneeFinding(True, confirmed=True, step_index=1, load=8, p99_before_ms=80.0,
                                       p99_after_ms=900.0, throughput_before=100.0, throughput_after=101.0,
                                       confidence="high", reason="why"),
                      knee_metric="ttft", knee_reason="why", exit_code=5,
                      slo=SloVerdict(thresholds=["ttft: p(95)<500"], passed=True, max_load_within_slo=8),
                      fleet_events=[FleetEvent(kind="lost", worker="w2", at=1.7e9 + 30, steps=[2])],
                      influx={"written": 10, "unwritten": 0, "spool_file": None, "last_error": None},
                      merge_errors=1)
    if cost:
        summary.cost = run_cost(spec, [r.cost for r in steps], judged={0: True, 1: True}, knee_index=1,
                                max_load_within_slo=8, slo_given=True)
    return summary.to_json()


def with_classes(ttft_p95: float) -> dict:
    """``written()`` with two classes of a mix on every step: chat (75 requests, TTFT p95 ``ttft_p95`` ms) and rag
    (25 requests, one failed, its error-rate SLO failed)."""
    s = written()
    for st in s["steps"]:
        st["classes"] = [
            {"name": "chat", "weight_share": 0.75, "requests": 75, "share": 0.75, "failed": 0, "error_rate": 0.0,
             "latency_ms": {"ttft": {"count": 75, "p50": 10.0, "p90": 20.0, "p95": ttft_p95, "p99": 40.0},
                            "tpot": {"count": 75, "p50": 5.0, "p90": 6.0, "p95": 7.0, "p99": 8.0}},
             "tokens_per_s_per_user": None, "output_tokens": 100, "slo": [], "slo_passed": None, "sampled": None},
            {"name": "rag", "weight_share": 0.25, "requests": 25, "share": 0.25, "failed": 1, "error_rate": 0.04,
             "latency_ms": {}, "tokens_per_s_per_user": None, "output_tokens": 0,
             "slo": [{"threshold": "error_rate: rate<0.01", "observed": 0.04, "passed": False,
                      "abort_on_fail": False}], "slo_passed": False, "sampled": None}]
    return s


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


def version1(summary: dict) -> dict:
    """The same run as schema 1 wrote it: without the fields version 2 added."""
    s = copy.deepcopy(summary)
    s["schema"] = "kneecap.summary/1"
    for key in ("degraded", "fleet_events"):
        del s[key]
    del s["knee"]["tail"]
    for st in s["steps"]:
        for key in ("fleet_changed", "workers_lost", "workers_joined"):
            del st[key]
        for stats in st["latency_ms"].values():
            stats.pop("p99_slo", None)
    return s


def _step_v2(index: int, users: int, p99: float | None, tokens: float, server: bool = True) -> dict:
    lat = {} if p99 is None else {m: {"count": 100, "mean": p99 / 2, "p50": p99 / 2, "p90": p99 * 0.8,
                                      "p95": p99 * 0.9, "p99": p99, "p999": p99, "max": p99,
                                      "p99_ci": [p99 * 0.9, p99 * 1.1]} for m in ("ttft", "tpot", "e2e")}
    return {"index": index, "users": users, "duration_s": 20.0, "warmup_s": 5.0, "requests": 0 if p99 is None else 100,
            "ok": 0 if p99 is None else 100, "failures": {} if p99 is None else {"http_5xx": 2}, "warmup_requests": 10,
            "latency_ms": lat, "tokens_per_s_per_user": {"count": 0}, "output_tokens_counted": 0,
            "prompt_length_error": None, "fleet_changed": False, "workers_lost": [], "workers_joined": [],
            "complete": p99 is not None, "slo": [],
            "throughput": {"requests_per_s": 10.0, "output_tokens_per_s": tokens, "input_tokens_per_s": 1.0,
                           "goodput_per_s": 9.0},
            "generator": {"lag_p99_ms": None if p99 is None else 1.0, "lag_max_ms": None, "cpu_max_pct": 0.0,
                          "reliable": True},
            "stationary": None, "slo_passed": None if p99 is None else True,
            **({"server": {"waiting_mean": None if p99 is None else 1.0, "running_max": 8.0,
                           "kv_cache_usage_max": None, "waiting_max": 2.0, "preemptions": None}} if server else {})}


def hand_made_v2(knee_users: int) -> dict:
    """A version 2 summary written by hand (four steps, the last cut short with no data; a knee at ``knee_users``)."""
    return {"schema": "kneecap.summary/2", "run_id": "r", "scenario": "s", "model": "m", "host": "h", "mode": "closed",
            "workers": 2, "started_at": 0, "ended_at": 60, "exit_code": 0, "stop_reason": "knee confirmed",
            "degraded": False, "fleet_events": [],
            "steps": [_step_v2(0, 8, 50.0, 1000), _step_v2(1, 16, 60.0, 1900), _step_v2(2, 24, 900.0, 2000),
                      _step_v2(3, 32, None, 0.0)],
            "knee": {"found": True, "confirmed": True, "step_index": 1, "users": knee_users, "confidence": "high",
                     "metric": "ttft", "tail": "p99_slo", "reason": "why", "p99_before_ms": 60.0, "p99_after_ms": 900.0,
                     "throughput_before": 1900.0, "throughput_after": 2000.0},
            "slo": {"thresholds": ["ttft: p(95)<500"], "passed": True, "max_load_within_slo": 16}}
