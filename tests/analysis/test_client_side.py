"""The client's own side of a step: connections paid, worker CPU per token, GC pauses (analysis/steps.py). Pure."""

from __future__ import annotations

import msgpack
import pytest

from harness.analysis.steps import StepInfo, connection_warning, step_result
from harness.metrics.aggregate import Bucket
from harness.metrics.record import RequestRecord


def _bucket(n: int, new: int, fail: int = 0) -> Bucket:
    b = Bucket()
    for i in range(n):
        b.add(RequestRecord(start=0.0, ttft_s=0.05, e2e_s=0.5, chunk_times=[0.05, 0.5], output_tokens=10,
                            new_connection=i < new))
    for _ in range(fail):  # a failed request that paid a connect counts too: the user waited for it
        b.add(RequestRecord(start=0.0, error="reset", new_connection=True))
    return b


def test_new_connections_are_counted_merged_and_shared():
    a, b = _bucket(10, 2), _bucket(10, 10, fail=5)
    assert (a.new_connections, b.new_connections) == (2, 15)
    a.merge(b)
    r = step_result(StepInfo(0, 4, 0.0), a, None, now=10.0)
    assert (r.requests, r.new_connections, r.new_connection_share) == (25, 17, 0.68)
    assert r.to_json()["new_connection_share"] == 0.68 and r.to_json()["new_connections"] == 17
    assert step_result(StepInfo(1, 4, 0.0), Bucket(), None, now=10.0).new_connection_share is None


def test_the_count_rides_the_wire_only_when_there_is_one():
    kept_alive = _bucket(5, 0)
    assert "conn" not in kept_alive.to_wire()  # older payloads keep their bytes
    closing = _bucket(5, 5)
    wire = msgpack.unpackb(msgpack.packb(closing.to_wire()), strict_map_key=False)
    assert wire["conn"] == 5 and Bucket.from_wire(wire).new_connections == 5
    assert Bucket.from_wire(kept_alive.to_wire()).new_connections == 0


def test_the_warning_only_when_most_requests_paid_a_connect():
    kept = [step_result(StepInfo(i, 4, 0.0), _bucket(100, 4), None, now=10.0) for i in range(3)]
    assert connection_warning(kept) is None
    closing = [step_result(StepInfo(i, 4, 0.0), _bucket(100, 97), None, now=10.0) for i in range(3)]
    text = connection_warning(closing)
    assert text.startswith("97% of requests paid a new connection") and "nothing to fix on the client" in text
    assert connection_warning([]) is None


def _one_step(r: object) -> object:
    """A summary of one step, ``r``, without a knee: for the report's tables."""
    from harness.report.validate import as_summary
    from tests.kit.summaries import written

    s = written()
    return as_summary({**s, "steps": [r.to_json()], "knee": {**s["knee"], "found": False, "users": None, "reason": "-"},
                       "slo": {"thresholds": [], "passed": None, "max_load_within_slo": None}})


def test_step_point_and_report_column():
    # imported here: at collection time influxdb_client would import ssl before Locust's tests monkey-patch it
    from harness.report.html import report_html
    from harness.sinks.points import step_points

    r = step_result(StepInfo(2, 8, 0.0), _bucket(10, 10), None, now=10.0)
    (line,) = [p for p in step_points(r, tags={"run": "x"}, ts_ms=1) if p.startswith("kneecap_step_client")]
    assert "new_connection_share=1" in line and "new_connections=10i" in line and "step=2" in line
    page = report_html(_one_step(r))
    assert "<th>new conn</th>" in page and "<td>100.0%</td>" in page


def _gen(cpu_s: dict[int, float], gc_max: float | None = None, step: int = 0):
    from harness.metrics.protocol import GeneratorSample, Report
    from harness.metrics.sketch import Sketch

    lag = Sketch()
    lag.add(0.001)
    return Report(step=step, gen=GeneratorSample(lag, 30.0, cpu_s=cpu_s, gc=None if gc_max is None else
                                                 (gc_max, gc_max, 1)))


def test_worker_cpu_is_charged_to_the_step_it_was_spent_in_and_divided_by_its_tokens():
    from harness.analysis.ledger import Ledger
    from harness.scenario import default_scenario

    ledger = Ledger(default_scenario())
    for level in (4, 8):
        ledger.begin_step(level, now=10.0 * level, wall=0.0)
    # two workers; one report straddles the step change: 0.4 s of it belongs to step 0
    ledger.merge("a", _gen({0: 0.4, 1: 1.6}, gc_max=0.003, step=1), now=90.0)
    ledger.merge("b", _gen({1: 2.0}, gc_max=0.012, step=1), now=90.0)
    ledger.merge("b", _gen({}, step=1), now=91.0)  # an older worker: no CPU, no GC figures
    g0, g1 = ledger.states[0].generator, ledger.states[1].generator
    assert g0.cpu_s == 0.4 and g1.cpu_s == 3.6 and g1.gc_max_s == 0.012 and g0.gc_max_s is None
    h = g1.health(output_tokens=36_000)  # 3.6 s of CPU over 36 k tokens: 100 µs per token
    assert (h.cpu_s, h.output_tokens, h.cpu_us_per_token, h.gc_pause_max_ms) == (3.6, 36_000, 100.0, 12.0)
    assert g1.health().cpu_us_per_token is None  # no tokens: no cost per token


def test_the_step_divides_by_warmup_and_measured_tokens():
    from harness.analysis.steps import GeneratorTally

    warm, measured = _bucket(10, 0), _bucket(30, 0)  # 10 tokens each
    r = step_result(StepInfo(0, 4, 0.0, warmup_s=1.0), measured, GeneratorTally(cpu_s=0.02), now=10.0, warmup=warm)
    assert r.generator.output_tokens == 400 and r.generator.cpu_us_per_token == 50.0
    js = r.to_json()["generator"]
    assert js["cpu_s"] == 0.02 and js["gc_pause_max_ms"] is None
    old = step_result(StepInfo(0, 4, 0.0), measured, GeneratorTally(), now=10.0).generator
    assert old.cpu_s is None and old.cpu_us_per_token is None


def test_processes_block_and_the_console_line():
    import msgspec

    from harness.analysis.cost.client_cpu import RoleCpu, cost_line, processes_block, step_totals
    from harness.summary import Summary
    from tests.kit.summaries import written

    step = msgspec.convert(written(), Summary).steps[0]

    def with_gen(**kw: object) -> object:
        return msgspec.structs.replace(step, generator=msgspec.structs.replace(step.generator, **kw))

    steps = [with_gen(cpu_s=1.5, output_tokens=30_000), with_gen(cpu_s=2.5, output_tokens=70_000),
             with_gen(cpu_s=msgspec.UNSET, output_tokens=msgspec.UNSET)]  # a step cut short, or an older summary's
    tokens, in_steps = step_totals(steps)
    assert (tokens, in_steps) == (100_000, 4.0)
    roles = [RoleCpu(role="parent", user_s=0.5, sys_s=0.1), RoleCpu(role="master", user_s=1.0, sys_s=0.2),
             RoleCpu(role="worker-0", user_s=2.5, sys_s=0.5), RoleCpu(role="worker-1", user_s=1.8, sys_s=0.2),
             RoleCpu(role="sim", user_s=9.0, sys_s=1.0), RoleCpu(role="report", user_s=0.2, sys_s=0.0)]
    block = processes_block(roles, output_tokens=tokens, workers_cpu_in_steps=in_steps)
    assert block["client_cpu_s"] == 7.0 and block["roles"]["sim"]["cpu_s"] == 10.0  # the server is not the client
    assert block["cpu_us_per_token"] == {"workers_in_steps": 40.0, "workers": 50.0, "client_tree": 70.0}
    assert cost_line(block) == ("client CPU: 40 µs per streamed token (workers, in the steps), 70 µs whole client "
                                "tree (start-up included) over 100000 tokens; simulator 10.0 s")
    none = processes_block(roles[:2], output_tokens=0, workers_cpu_in_steps=None)
    assert none["cpu_us_per_token"]["client_tree"] is None and "no output tokens" in cost_line(none)


def test_generator_and_step_points_carry_the_cost():
    from harness.analysis.steps import GeneratorTally
    from harness.sinks.points import generator_point, step_points

    line = generator_point("w1", 1.0, 2.0, 40.0, tags={"run": "x"}, ts_ms=1, window=3, cpu_s=1.5,
                           gc_pause_max_ms=0.8)
    assert "cpu_s=1.5" in line and "gc_pause_max_ms=0.8" in line
    assert "cpu_s" not in generator_point("w1", 1.0, 2.0, 40.0, tags={}, ts_ms=1, window=3)  # an older worker
    r = step_result(StepInfo(0, 4, 0.0), _bucket(10, 1), GeneratorTally(cpu_s=0.005, gc_max_s=0.002), now=10.0)
    (client,) = [p for p in step_points(r, tags={}, ts_ms=1) if p.startswith("kneecap_step_client")]
    assert "cpu_us_per_token=50" in client and "gc_pause_max_ms=2" in client and "output_tokens=100i" in client
    assert "shared_stamp_share=0" in client


def test_the_report_tabulates_the_generators_cost():
    from harness.analysis.steps import GeneratorTally
    from harness.metrics.sketch import Sketch
    from harness.report.html import report_html

    lag = Sketch()
    lag.add(0.002)
    r = step_result(StepInfo(0, 4, 0.0), _bucket(10, 1), GeneratorTally(lag=lag, cpu_s=0.005, gc_max_s=0.002), now=10.0)
    page = report_html(_one_step(r))
    assert "<th>CPU µs/token</th>" in page and "<td>50.0</td>" in page and "<th>GC pause max</th>" in page
    assert "<th>late stamps %</th>" in page


def test_the_loop_lag_reaches_the_knees_p99_only_through_late_times():
    """A step's loop lag widens the knee's margin (``knee._above``) only when it could have moved the p99: more than
    1% of its requests had chunk times a late receive shared, or a worker's receives were not dated by the kernel.
    A client that lagged 4.5 ms while every request kept its kernel times (an embeddings step: one receive each)
    moved none of them, and its true knee must not be hidden (the fresh-clone run of 2026-12-03 missed one so)."""
    from harness.analysis.ledger import Ledger
    from harness.metrics.protocol import GeneratorSample, Report
    from harness.metrics.sketch import Sketch
    from harness.scenario import default_scenario

    def lagged(kernel_stamps: bool = True) -> Report:
        lag = Sketch()
        for _ in range(100):
            lag.add(0.0045)
        return Report(step=0, gen=GeneratorSample(lag, 30.0, kernel_stamps=kernel_stamps))

    def step(shared: int, kernel_stamps: bool = True) -> float:
        ledger = Ledger(default_scenario())
        ledger.begin_step(4, now=0.0, wall=0.0)
        bucket = _bucket(200, 0)
        bucket.extra["shared_stamps"] = shared
        ledger.fleet.steps[(0, "measure")] = bucket
        ledger.merge("a", lagged(kernel_stamps), now=1.0)
        point = ledger.point(ledger.states[0], now=5.0)
        assert point.load == 4 and point.n == 200
        return point.lag_ms

    assert step(shared=0) == 0.0 and step(shared=2) == 0.0  # 1% and under: the p99 kept its times
    assert step(shared=3) == pytest.approx(4.5, rel=0.02)  # 1.5%: the p99 may be a late time
    assert step(shared=0, kernel_stamps=False) == pytest.approx(4.5, rel=0.02)  # every late read is a late time
    wire = msgpack.unpackb(msgpack.packb(lagged(False).to_wire()), strict_map_key=False)
    assert wire["gen"]["ks"] is False and Report.from_wire(wire).gen.kernel_stamps is False
    assert "ks" not in lagged().to_wire()["gen"]  # kernel stamps: the payload keeps its bytes


def test_an_open_loop_step_whose_requests_went_out_late_is_not_reliable():
    """Open loop, a step's latencies count from each request's intended start: a generator that sent late (its
    send-lag p99 past the loop-lag limit) added latency the server did not, whatever its loop lag said."""
    def step(late_s: float | None) -> dict:
        b = Bucket()
        for i in range(200):  # 4 of 200 late: the p99
            intended = None if late_s is None else 1.0 - (late_s if i >= 196 else 0.001)
            b.add(RequestRecord(start=1.0, intended_start=intended, ttft_s=0.05, e2e_s=0.5, chunk_times=[0.05, 0.5],
                                output_tokens=10))
        g = step_result(StepInfo(0, 40, 0.0), b, None, now=10.0).generator
        return {"reliable": g.reliable, "send": g.send_lag_p99_ms}

    assert step(0.015) == {"reliable": False, "send": pytest.approx(15, rel=0.02)}
    assert step(0.005) == {"reliable": True, "send": pytest.approx(5, rel=0.02)}
    assert step(None) == {"reliable": True, "send": None}  # a closed loop has no send lag
