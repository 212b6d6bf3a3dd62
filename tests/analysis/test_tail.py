"""Tail attribution on synthetic steps with one injected cause each, and on steps with none."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest

from harness.analysis.why.attribute import StepTails, TailParams, TailRow, explain_tail


def step(seed: int, cause: str | None = None, n: int = 10_000, duration_s: float = 60.0) -> list[TailRow]:
    """One step of ``n`` requests; every feature independent of latency except through ``cause``."""
    rng = np.random.default_rng(seed)
    t = np.sort(rng.uniform(0, duration_s, n))
    prompt = rng.lognormal(math.log(1000), 0.3, n).round()
    output = rng.lognormal(math.log(200), 0.3, n).round()
    cached = (rng.random(n) < 0.5) * (prompt // 2)
    new_conn = rng.random(n) < 0.05
    waiting = (rng.random(n) < 0.2) * rng.poisson(10, n)
    ttft = rng.lognormal(math.log(0.1), 0.2, n)
    if cause == "prompt":
        long = rng.random(n) < 0.03
        prompt = np.where(long, prompt * 10, prompt)
        ttft = ttft + prompt * 2e-5  # prefill: 20 ms per 1,000 tokens
    elif cause == "stalls":
        ttft = ttft + 0.2 * ((t % 5.0) < 0.2)  # every 5 s, 200 ms where everything is 200 ms late
    elif cause == "queueing":
        ttft = ttft + 0.02 * waiting
    elif cause == "connect":
        ttft = ttft + 0.05 * new_conn
    tpot = rng.lognormal(math.log(0.02), 0.1, n)
    e2e = ttft + rng.lognormal(math.log(4.0), 0.3, n)
    ttfo = ttft + rng.lognormal(math.log(0.5), 0.3, n)
    worker = rng.integers(0, 4, n)
    in_flight = rng.poisson(20, n)
    turn = rng.integers(1, 10, n)
    after_error = rng.random(n) < 0.01
    return [TailRow(ttft_s=float(ttft[i]), tpot_s=float(tpot[i]), e2e_s=float(e2e[i]), ttfo_s=float(ttfo[i]),
                    prompt_tokens=int(prompt[i]), output_tokens=int(output[i]), cached_tokens=int(cached[i]),
                    new_connection=bool(new_conn[i]), worker=f"w{worker[i]}", t_in_step_s=float(t[i]),
                    in_flight=int(in_flight[i]), server_waiting=int(waiting[i]), turn=int(turn[i]),
                    after_error=bool(after_error[i]))
            for i in range(n)]


def ttft(result: StepTails, q: float):
    a = result.get("ttft_s", q)
    assert a is not None
    return a


def test_long_prompts_are_prefill():
    result = explain_tail(step(1, "prompt"))
    for q in (0.99, 0.95):
        a = ttft(result, q)
        assert a.verdict == "cause" and a.causes[0] == "prompt_tokens", a.line
        assert "longer prompts" in a.line and a.line.split(" (also")[0].endswith("the tail is prefill-bound"), a.line
    a = ttft(result, 0.99)
    assert a.line.startswith("p99 TTFT requests had ") and a.tests[0].tail_value / a.tests[0].rest_value > 5


def test_periodic_stalls_are_outside_noise():
    result = explain_tail(step(2, "stalls"))
    for q in (0.99, 0.95):
        a = ttft(result, q)
        assert a.verdict == "time" and a.causes == ["t_in_step_s"], a.line
        assert "spread over time, not over request features" in a.line and "shared infrastructure?" in a.line


def test_server_queue_is_queueing():
    result = explain_tail(step(3, "queueing"))
    for q in (0.99, 0.95):
        a = ttft(result, q)
        assert a.verdict == "cause" and a.causes[0] == "server_waiting", a.line
        assert "waited at the server (0 for the rest): queueing" in a.line, a.line


def test_new_connections_are_connect_cost():
    result = explain_tail(step(4, "connect"))
    for q in (0.99, 0.95):
        a = ttft(result, q)
        assert a.verdict == "cause" and a.causes[0] == "new_connection", a.line
        assert "were first on a new connection" in a.line and "connect/TLS, +" in a.line, a.line
    cost = int(ttft(result, 0.99).line.split("connect/TLS, +")[1].split(" ms")[0])
    assert 35 <= cost <= 65  # the injected +50 ms, as medians over the uniform sample see it


def test_no_cause_says_so_in_nine_of_ten_seeds():
    clean = 0
    for seed in range(10):
        result = explain_tail(step(100 + seed))
        assert len(result.attributions) == 8
        clean += all(a.verdict == "none" for a in result.attributions)
    assert clean >= 9
    assert "no single cause" in result.attributions[0].line and "Holm–Bonferroni" in result.attributions[0].line


def test_small_tails_are_too_few():
    result = explain_tail(step(5, "prompt", n=300))
    a = ttft(result, 0.99)
    assert a.verdict == "too_few" and a.tests == [] and a.n_tail < 8
    assert a.line == f"p99 TTFT: too few tail requests to attribute ({a.n_tail} above p99 of 300)"
    assert ttft(result, 0.95).verdict != "too_few"


def test_missing_values():
    rows = step(6, "prompt")
    rng = np.random.default_rng(0)
    drop = rng.random(len(rows)) < 0.3
    rows = [TailRow(ttft_s=None if i % 50 == 0 else r.ttft_s, e2e_s=math.nan if i % 40 == 0 else r.e2e_s,
                    prompt_tokens=None if drop[i] else r.prompt_tokens, output_tokens=r.output_tokens,
                    new_connection=r.new_connection, worker=r.worker if i % 7 else None, t_in_step_s=r.t_in_step_s)
            for i, r in enumerate(rows)]
    result = explain_tail(rows)
    metrics = {a.metric for a in result.attributions}
    assert metrics == {"ttft_s", "e2e_s"}  # no request has TPOT or TTFO
    a = ttft(result, 0.99)
    assert a.n == len(rows) - len(rows) // 50 and a.causes[0] == "prompt_tokens", a.line
    tested = {t.feature for t in a.tests}
    assert "server_waiting" not in tested and "turn" not in tested and "worker" in tested
    assert "over 5 tests" in a.correction  # prompt and output tokens, new connection, worker, time
    json.dumps(result.to_dict(), allow_nan=False)


def test_an_empty_step_and_one_without_features():
    assert explain_tail([]).attributions == []
    rows = [TailRow(ttft_s=0.1 + 0.001 * (i % 97)) for i in range(1000)]
    a = ttft(explain_tail(rows), 0.95)
    assert a.verdict == "none" and a.tests == [] and "0 features tested" in a.line


def test_large_steps_sample_the_rest_deterministically():
    rows = step(7, "connect", n=30_000)
    params = TailParams(max_rest=3_000)
    one, two = explain_tail(rows, params), explain_tail(rows, params)
    assert one.to_dict() == two.to_dict()
    a = ttft(one, 0.95)
    assert a.sampled is not None and "uniform sample of" in a.sampled and a.n_rest <= 3_000
    assert a.n_tail == sum(r.ttft_s > a.threshold_s for r in rows) and a.causes[0] == "new_connection"
    assert ttft(explain_tail(step(7, n=2_000)), 0.95).sampled is None


def test_to_dict_is_plain_json():
    d = explain_tail(step(8, "queueing")).to_dict()
    first = d["attributions"][0]
    assert first["metric"] == "ttft_s" and first["quantile"] == 0.99 and first["verdict"] == "cause"
    assert {"feature", "test", "p", "p_holm", "effect", "phrase", "cause"} <= set(first["tests"][0])
    json.dumps(d, allow_nan=False)


def test_the_other_causes_each_on_its_own_metric():
    """One worker slow on TTFT, TPOT slowed after errors, E2E by long answers, TTFO by cache misses."""
    rng = np.random.default_rng(10)
    rows = [TailRow(**{**{f: getattr(r, f) for f in TailRow.__slots__},
                       "ttft_s": r.ttft_s + (0.06 if r.worker == "w2" else 0),
                       "tpot_s": r.tpot_s + (0.02 if r.after_error else 0),
                       "e2e_s": r.ttft_s + 0.02 * r.output_tokens * rng.uniform(0.9, 1.1),
                       "ttfo_s": r.ttfo_s + (0 if r.cached_tokens else 0.3 * rng.random())})
            for r in step(9)]
    result = explain_tail(rows)
    expected = {"ttft_s": ("worker", "one worker (client host?)"), "tpot_s": ("after_error", "after errors"),
                "e2e_s": ("output_tokens", "long answers"), "ttfo_s": ("cached_tokens", "cache misses")}
    for metric, (feature, words) in expected.items():
        a = result.get(metric, 0.99)
        assert a is not None and a.causes[:1] == [feature] and words in a.line, a.line if a else metric
    assert "came from worker w2" in result.get("ttft_s", 0.99).line


def test_bad_parameters_are_named_all_at_once():
    with pytest.raises(ValueError, match=r"quantiles: each must be in \(0, 1\), got 99.*min_tail: must be >= 2"):
        TailParams(quantiles=(99,), min_tail=1)
    with pytest.raises(ValueError, match=r"unknown metrics \['ttft'\]; choose from \['ttft_s'"):
        explain_tail([], metrics=("ttft",))


def test_rows_and_their_columns_give_the_same_answer():
    """TailRows are read by column for the metrics and only at the rows tested for the features."""
    rows = [TailRow(**{**{f: getattr(r, f) for f in TailRow.__slots__}, "ttft_s": None if i % 61 == 0 else r.ttft_s,
                       "prompt_tokens": None if i % 13 == 0 else r.prompt_tokens})
            for i, r in enumerate(step(13, "prompt"))]
    params = TailParams(max_rest=2_000)
    by_rows = explain_tail(rows, params)
    assert by_rows.to_dict() == explain_tail({f: [getattr(r, f) for r in rows] for f in TailRow.__slots__},
                                             params).to_dict()
    assert by_rows.to_dict() == explain_tail(iter(rows), params).to_dict()
    assert ttft(by_rows, 0.99).sampled is not None


def test_a_tail_barely_above_the_rest_has_nothing_to_explain():
    """Jitter alone: the p95 requests are the distribution's own spread (their median a few % above the rest's), so
    no feature is tested and no cause named, however the send times happen to cluster (``TailParams.min_lead``)."""
    rng = random.Random(2)
    rows = [TailRow(e2e_s=0.26 * (1 + 0.03 * rng.random() + (0.01 if i < 300 else 0)), prompt_tokens=rng.randrange(100),
                    worker=0, t_in_step_s=i * 0.01) for i in range(2000)]
    a = explain_tail(rows).get("e2e_s", 0.95)
    assert a.verdict == "none" and a.causes == [] and a.tests == [], a.line
    assert "the tail is 2% above the rest (median 269.4 vs 264.0 ms)" in a.line and "nothing stands out" in a.line
