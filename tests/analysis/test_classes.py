"""Each class of a mix measured apart (``analysis/mix/classes.py``): from row columns, by their definitions. Pure."""

from __future__ import annotations

import math
import random

import pytest
import yaml

from harness.analysis.mix.classes import class_point, class_steps, probe_step
from harness.analysis.why.rows import columns
from harness.metrics.aggregate import ci_ranks
from harness.metrics.record import RequestRecord
from harness.metrics.rows import encode_row
from harness.scenario import ScenarioError, parse_scenario
from harness.spec.slo import parse_threshold
from harness.workload.mix import TrafficClass, Workload

W = Workload(input_tokens=None, output_tokens=None, joint=None)


def _rows(seed: int = 1, n: int = 400):
    rng, rows, truth = random.Random(seed), [], {0: [], 1: []}
    for i in range(n):
        cls = 0 if rng.random() < 0.7 else 1
        ttft = rng.lognormvariate(math.log(0.05 if cls == 0 else 0.4), 0.3)
        failed = rng.random() < (0.0 if cls == 0 else 0.05)
        rec = RequestRecord(start=0.0, ttft_s=ttft, e2e_s=ttft + 1.0, ttfo_s=ttft, output_tokens=51,
                            prompt_tokens=100, chunk_times=[ttft, ttft + 1.0], class_index=cls,
                            error="reset" if failed else None)
        rows.append(encode_row(rec, i / 100, worker=0))
        truth[cls].append(None if failed else round(ttft * 1e4))
    return rows, truth


def test_each_class_gets_its_own_order_statistics_share_and_failures():
    rows, truth = _rows()
    chat = TrafficClass(name="chat", weight=7, workload=W)
    rag = TrafficClass(name="rag", weight=3, workload=W, slo=(parse_threshold("ttft", "p(95)<1000"),
                                                              parse_threshold("error_rate", "rate<0.01")))
    a, b = class_steps(columns(rows), [chat, rag], rows_seen=len(rows))
    for got, values in ((a, truth[0]), (b, truth[1])):
        ok = sorted(v for v in values if v is not None)
        assert got.requests == len(values) and got.failed == len(values) - len(ok)
        assert got.share == round(len(values) / len(rows), 6) and got.sampled is None
        for q, key in ((0.5, "p50"), (0.95, "p95"), (0.99, "p99")):
            assert got.latency_ms["ttft"][key] == round(ok[math.floor(q * (len(ok) - 1))] / 10, 3)
        assert got.tokens_per_s_per_user["p50"] == 50.0  # 50 tokens after the first over exactly 1 s
    assert (a.weight_share, b.weight_share) == (0.7, 0.3) and a.slo == [] and a.slo_passed is None
    ttft, errors = b.slo
    ranked = sorted(v for v in truth[1] if v is not None)
    r = math.floor(0.95 * (len(truth[1]) - 1))  # failures rank above every latency
    assert ttft.observed == ("inf" if r >= len(ranked) else round(ranked[r] / 10, 3))
    assert errors.observed == round(b.failed / b.requests, 6) and errors.passed is (b.failed / b.requests < 0.01)
    assert b.slo_passed is (ttft.passed and errors.passed)


def test_sampled_rows_say_so_and_a_class_without_requests_is_empty():
    rows, _ = _rows(n=50)
    rows = [r for r in rows if r[-1] == 0]
    a, b = class_steps(columns(rows), [TrafficClass(name="a", weight=1, workload=W),
                                       TrafficClass(name="b", weight=1, workload=W)], rows_seen=1000)
    assert a.sampled == f"from a uniform sample of {len(rows)} of the step's 1,000 requests"
    assert b.requests == 0 and b.share == 0.0 and b.error_rate is None and b.latency_ms == {}
    assert b.tokens_per_s_per_user is None


def test_a_knee_on_one_class_ranks_that_class_alone_with_its_failures_as_misses():
    rows, truth = _rows(seed=3)
    p = class_point(columns(rows), 1, "ttft", index=2, load=8, reliable=True, duration_s=10.0)
    values = sorted(v for v in truth[1] if v is not None)
    n = len(truth[1])
    r = math.floor(0.99 * (n - 1))
    assert p.n == n and (p.index, p.load, p.reliable) == (2, 8, True)
    assert p.p99 == (math.inf if r >= len(values) else values[r] / 10)
    lo, hi = ci_ranks(n, 0.99)
    assert p.ci == tuple(math.inf if k >= len(values) else values[k] / 10 for k in (lo, hi))
    assert p.throughput == pytest.approx(51 * len(values) / 10.0)  # the class's own output tokens/s


@pytest.mark.parametrize("knee, message", [
    ("{metric: ttft, class: bach}", "load.knee.class: no class 'bach' in workload.mix; did you mean 'batch'?"),
    ("{metric: itl, class: batch}", "load.knee.metric: itl is not measured per class"),
])
def test_a_knee_on_a_class_names_a_class_of_the_mix(knee, message):
    text = (f"name: x\nworkload: {{mix: [{{name: batch, weight: 1, input_tokens: 5, output_tokens: 5}}]}}\n"
            f"load: {{knee: {knee}}}\n")
    with pytest.raises(ScenarioError) as err:
        parse_scenario(yaml.safe_load(text))
    assert message in str(err.value), str(err.value)
    with pytest.raises(ScenarioError, match="a knee follows one class of a mix"):
        parse_scenario(yaml.safe_load("name: x\nworkload: {input_tokens: 5, output_tokens: 5}\n"
                                      "load: {knee: {class: batch}}\n"))


def test_each_class_is_one_influx_point_tagged_with_its_name_and_the_schemas_fields():
    # imported here: at collection time influxdb_client would import ssl before Locust's tests monkey-patch it
    from harness.analysis.steps import StepInfo, step_result
    from harness.metrics.aggregate import Bucket
    from harness.sinks.points import step_points
    from harness.sinks.schema import MEASUREMENTS

    rows, _ = _rows()
    rag = TrafficClass(name="rag", weight=3, workload=W, slo=(parse_threshold("ttft", "p(95)<1"),))
    r = step_result(StepInfo(1, 8, 0.0), Bucket(), None, now=10.0)
    r.classes = [c.to_json() for c in class_steps(columns(rows), [TrafficClass(name="chat", weight=7, workload=W),
                                                                  rag], rows_seen=len(rows))]
    lines = [p for p in step_points(r, tags={"run": "x"}, ts_ms=1) if p.startswith("kneecap_step_class")]
    assert [line.split(",class=")[1].split(",")[0] for line in lines] == ["chat", "rag"]
    spec = MEASUREMENTS["kneecap_step_class"]
    for line in lines:
        fields = {kv.split("=")[0] for kv in line.split(" ")[1].split(",")}
        assert fields <= set(spec["fields"]) and {"requests", "share", "ttft_p99", "e2e_p95"} <= fields, line
    assert "slo_passed=0i" in lines[1] and "slo_passed" not in lines[0]


def test_probes_are_one_class_of_their_own_and_their_block_is_checked():
    rows, truth = _rows(seed=4, n=60)
    p = probe_step(columns(rows))
    assert p.name == "probe" and p.requests == 60 and p.share is None and p.weight_share is None
    ok = sorted(v for vs in truth.values() for v in vs if v is not None)
    assert p.latency_ms["ttft"]["p50"] == round(ok[math.floor(0.5 * (len(ok) - 1))] / 10, 3)
    s = parse_scenario(yaml.safe_load("name: x\nworkload: {input_tokens: 5, output_tokens: 5}\n"
                                      "load: {probes: {rate: 2}}\n"))
    assert (s.load.probes.rate, s.load.probes.input_tokens, s.load.probes.max_tokens) == (2, 16, 1)
    with pytest.raises(ScenarioError) as err:
        parse_scenario(yaml.safe_load("name: x\nworkload: {input_tokens: 5, output_tokens: 5}\n"
                                      "load: {probes: {rate: 0, max_token: 3}}\n"))
    assert "load.probes: unknown key 'max_token'; did you mean 'max_tokens'?" in str(err.value)
    assert "load.probes.rate: must be > 0, got 0" in str(err.value)


def test_a_class_of_fixed_users_has_no_weight_share_and_the_weights_share_the_rest():
    rows, truth = _rows()
    chat = TrafficClass(name="chat", weight=2, workload=W)
    batch = TrafficClass(name="batch", weight=0.0, users=4, workload=W)
    a, b = class_steps(columns(rows), [chat, batch], rows_seen=len(rows))
    assert (b.weight_share, b.users, a.users) == (None, 4, None)
    # the one weighted class was asked for every request the weighted users made: its own share
    assert a.weight_share == round(len(truth[0]) / len(rows), 6) == a.share
