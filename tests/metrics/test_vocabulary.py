"""The metric registry (harness/metrics/vocabulary.py) on plain data: its extractors on hand-built records, and
every place that names metrics agreeing with it (SLO grammar, knee, bucket, InfluxDB schema, summary model)."""

from __future__ import annotations

import dataclasses

import pytest

from harness.metrics import vocabulary
from harness.metrics.aggregate import LATENCIES, Bucket
from harness.metrics.extract import FIRST_SEEN
from harness.metrics.record import RequestRecord
from harness.metrics.sessions import SessionRecord
from harness.metrics.vocabulary import KNEE_METRICS, METRIC, METRICS, influx_fields
from harness.scenario import ScenarioError, parse_scenario
from harness.sinks.points import WINDOW_METRICS
from harness.sinks.schema import MEASUREMENTS, PERCENTILE_FIELDS
from harness.spec.slo import LATENCY_METRICS, SESSION_METRICS, SLO_METRICS, parse_threshold, request_meets
from harness.summary import Step, Throughput

SKETCHED = ("latency", "distribution")


def _streamed(**kw) -> RequestRecord:
    """Open loop, sent 0.1 s late; reasons 0.1 → 0.5 s, calls a tool at 0.9 s; four chunks with exact counts, in
    three receives (one the reader made late; one cut inside an event, its rest held 16 KB on the way)."""
    base = dict(start=10.0, intended_start=9.9, headers_s=0.02, ttft_s=0.1, e2e_s=1.1, ttfo_s=0.5,
                reasoning_start_s=0.1, reasoning_tokens=4, tool_call_s=0.9, chunk_times=[0.1, 0.3, 0.5, 1.1],
                chunk_tokens=[1, 3, 2, 4], output_tokens=10, prompt_tokens=200, cached_tokens=50, new_connection=True,
                shared_stamps=2, receives=3, held=1, held_bytes=16384)
    return RequestRecord(**{**base, **kw})


EXPECTED = {  # each extractor on _streamed(): a value, or (values, counts) for several
    "ttft": 0.1, "tpot": 1.0 / 9, "itl": ([0.2, 0.2, 0.6], None), "itl_token": ([0.2 / 3, 0.1, 0.15], [3, 2, 4]),
    "e2e": 1.1, "headers": 0.02, "send_lag": 0.1, "ttft_intended": 0.2, "e2e_intended": 1.2, "ttfo": 0.5,
    "reasoning_time": 0.4, "tpot_content": 0.6 / 5, "tool_call": 0.9, "tokens_per_s_per_user": 9.0,
    "tokens_per_chunk": ([1, 3, 2, 4], None), "error_rate": None, "requests_per_s": None, "ok_per_s": None,
    "output_tokens_per_s": 10, "input_tokens_per_s": 200, "goodput_per_s": None, "new_connections": True,
    "itl_token_unknown": False, "exact_chunk_counts": True, "reasoning_tokens_counted": False, "inputs_per_s": None,
    "continuous_usage_refused": None, "shared_stamps": True, "length_asked": False, "short_answers": False,
    "tokens_asked": 0, "tokens_got": 0, "short_answer_rate": False, "answers_verified": False,
    "answers_changed": False, "answers_changed_rate": False, "answers_checked": False, "answers_failed": False,
    "answers_failed_rate": False, "prefix_ceiling_tokens": None, "prefix_ceiling_of": 0, "streams": True, "receives": 3,
    "content_chunks": 4, "late_chunks": 2, "held_streams": True, "whole_streams": False, "usage_below_chunks": False,
}
SESSION_EXPECTED = {"session_ttft": 0.4, "session_duration": 30.0, "session_model_time": 5.0, "session_context": 1200}


def _same(got, want) -> bool:
    """A value, or a Samples pair (values, counts), equal to the expected one within float rounding."""
    if isinstance(want, tuple):
        return isinstance(got, tuple) and got[0] == pytest.approx(want[0]) and got[1] == want[1]
    return got == pytest.approx(want)


def test_names_and_bucket_keys_are_unique_and_every_metric_is_described():
    assert len({m.name for m in METRICS}) == len(METRICS)
    assert len({m.bucket_key for m in METRICS}) == len(METRICS)
    assert {m.name: m for m in METRICS} == METRIC
    for m in METRICS:
        assert m.unit and m.meaning and "|" not in m.meaning, m.name  # one table cell
        assert m.many == (m.source is not None and m.source.endswith("_samples")), m.name
        assert m.knee <= (m.kind == "latency"), m.name  # the knee follows a p99 in ms


def test_every_extractor_on_a_hand_built_record():
    rec, session = _streamed(), SessionRecord(30.0, 5.0, 3, 3, 0.4, 1200)
    assert set(EXPECTED) | set(SESSION_EXPECTED) == set(METRIC)
    for m in METRICS:
        got = m.extract(session if m.of == "session" else rec)
        want = (SESSION_EXPECTED if m.of == "session" else EXPECTED)[m.name]
        if want is None or isinstance(want, bool):
            assert got is want, m.name
        else:
            assert _same(got, want), (m.name, got)


def test_length_extractors_on_answers_that_asked_for_an_exact_length():
    short = _streamed(exact_length=True, max_tokens=16, finish_reason="stop")  # 10 of 16 tokens
    assert [METRIC[n].extract(short) for n in ("length_asked", "short_answers", "tokens_asked", "tokens_got",
                                               "short_answer_rate")] == [True, True, 16, 10, True]
    full, longer = _streamed(exact_length=True, max_tokens=10), _streamed(exact_length=True, max_tokens=8)
    assert not full.short_answer and not longer.short_answer and longer.tokens_got == 10
    assert not _streamed(max_tokens=16).short_answer  # natural lengths asked: ending early is the model's choice
    bucket = Bucket()
    for rec in (short, full, _streamed(exact_length=True, max_tokens=16, finish_reason="length", output_tokens=12)):
        bucket.add(rec)
    x = bucket.extra
    assert (x["length_asked"], x["short_answers"], x["tokens_asked"], x["tokens_got"]) == (3, 2, 42, 32)
    assert (x["short:stop"], x["short:length"]) == (1, 1)


def test_extractors_say_none_where_a_record_has_no_value():
    closed = _streamed(intended_start=None, chunk_tokens=None, output_tokens=7, output_tokens_counted=True)
    assert [m.name for m in METRICS if m.open_loop] == ["send_lag", "ttft_intended", "e2e_intended"]
    assert all(METRIC[n].extract(closed) is None for n in ("send_lag", "ttft_intended", "e2e_intended",
                                                           "itl_token", "tokens_per_chunk"))
    assert METRIC["itl_token_unknown"].extract(closed) is True  # 7 tokens in 4 chunks, no exact counts
    assert METRIC["send_lag"].extract(_streamed(start=9.8)) == 0.0  # sent early: no lag, not a negative one
    assert METRIC["error_rate"].extract(_streamed(error="reset")) == "reset"  # a miss
    assert METRIC["session_ttft"].extract(SessionRecord(30.0, 5.0, 3, 3, 0.4, 1200, failed=True)) is None


def test_a_bucket_feeds_each_sketch_from_its_extractor():
    b = Bucket()
    rec = _streamed()
    b.add(rec)
    for m in METRICS:
        if m.kind in SKETCHED and m.of != "session":
            s = b.sketches[m.bucket_key]
            values, counts = m.extract(rec) if m.many else ([m.extract(rec)], None)
            assert s.count == sum(counts or [1] * len(values)), m.name
            assert s.sum == pytest.approx(sum(v * c for v, c in zip(values, counts or [1] * len(values),
                                                                    strict=True))), m.name
    failed = Bucket()
    failed.add(_streamed(error="reset"))
    assert list(failed.sketches) == ["send_lag"]  # the one sketch the registry takes from failures too
    assert sum(failed.failures.values()) == 1


def test_a_bucket_counts_what_the_counters_extract():
    recs = [_streamed(), _streamed(chunk_tokens=None, output_tokens=7, reasoning_tokens_counted=True, inputs=3),
            _streamed(error="http_5xx")]
    for rec in recs:
        b = Bucket()
        b.add(rec)
        for m in METRICS:
            if m.kind != "counter" or m.source is None:
                continue
            counted = getattr(b, m.bucket_key) if hasattr(b, m.bucket_key) else b.extra.get(m.bucket_key, 0)
            want = int(m.extract(rec) or 0) if m.of == "all" or rec.ok else 0
            assert counted == want, (m.name, rec.error)


def test_a_bucket_meets_its_sketches_in_the_wire_order_it_always_had():
    assert set(FIRST_SEEN) == {m.name for m in METRICS if m.kind in SKETCHED}


def test_session_sketches_come_from_the_registry():
    b = Bucket()
    b.add_session(SessionRecord(30.0, 5.0, 3, 3, 0.4, 1200))
    assert {k: s.sum for k, s in b.sketches.items()} == pytest.approx(SESSION_EXPECTED)


def test_slo_metrics_are_the_registry_ones():
    assert tuple(m.name for m in METRICS if m.slo) == SLO_METRICS
    assert SLO_METRICS == ("ttft", "tpot", "itl", "e2e", "ttfo", "reasoning_time", "tokens_per_s_per_user",
                           "error_rate", "session_ttft", "session_duration", "short_answer_rate",
                           "answers_changed_rate", "answers_failed_rate")  # as errors list
    assert LATENCY_METRICS == ("ttft", "tpot", "itl", "e2e", "ttfo", "reasoning_time")
    assert SESSION_METRICS == ("session_ttft", "session_duration")
    for m in METRICS:
        text = "rate<0.1" if m.kind == "rate" else "p(99)<100"
        if m.slo:
            assert parse_threshold(m.name, text).metric == m.name
        else:
            with pytest.raises(ValueError, match="unknown SLO metric"):
                parse_threshold(m.name, text)


def test_goodput_limits_each_request_where_the_registry_says():
    slow_gaps = _streamed(e2e_s=2.1)  # TPOT (2.1 − 0.1) / 9 = 222 ms
    for metric, limit, passes in (("itl", "p(99)<200", False), ("itl", "p(99)<250", True),
                                  ("tokens_per_s_per_user", "p(5)>5", False), ("ttft", "p(99)<101", True)):
        meets = request_meets([parse_threshold(metric, limit)])
        assert meets(slow_gaps) is passes, (metric, limit)
    assert request_meets([parse_threshold("error_rate", "rate<0.1"), parse_threshold("session_ttft", "p(9)<1"),
                          parse_threshold("short_answer_rate", "rate<0.01")]) is None


def test_knee_metrics_are_the_registry_ones_and_the_scenario_refuses_others():
    assert KNEE_METRICS == ("ttft", "tpot", "itl", "e2e", "ttfo", "reasoning_time", "session_ttft")
    raw = {"name": "t", "endpoint": {"host": "http://127.0.0.1:1", "model": "m"},
           "load": {"mode": "staircase", "start": 1, "step_by": 1, "max": 2, "knee": {"metric": "headers"}}}
    with pytest.raises(ScenarioError, match=r"load\.knee\.metric: must be one of ttft, tpot, itl, e2e, ttfo"):
        parse_scenario(raw, source="t.yaml")


def test_influx_names_are_in_the_sink_schema():
    for m in METRICS:
        for where in m.influx:
            measurement, _, name = where.partition(".")
            spec = MEASUREMENTS[measurement]
            if name:
                assert name in spec["fields"], (m.name, where)
            else:  # a point per metric: its name in the metric tag, its percentiles as fields
                assert "metric" in spec["tags"] and set(PERCENTILE_FIELDS) <= set(spec["fields"]), (m.name, where)
    assert MEASUREMENTS["kneecap_throughput"]["fields"] == (*influx_fields("kneecap_throughput"), "load", "window")
    assert WINDOW_METRICS == LATENCIES  # the live window merges exactly the sketches the sink writes


def test_summary_model_names_registry_metrics():
    step = Step.__struct_fields__  # the summary's read model, which the validator checks files against
    assert "tokens_per_s_per_user" in step and METRIC["tokens_per_s_per_user"].kind == "distribution"
    assert set(Throughput.__struct_fields__) <= {m.name for m in METRICS if m.kind == "counter"}
    assert LATENCIES == vocabulary.REQUEST_LATENCIES  # what a step's latency_ms holds (its keys are not fixed)


def test_the_registry_is_frozen_data():
    with pytest.raises(dataclasses.FrozenInstanceError):
        METRIC["ttft"].slo = False  # type: ignore[misc]
    assert vocabulary.markdown_table().count("\n") == len(METRICS) + 2


def test_a_short_answer_without_usage_is_told_by_its_finish_reason():
    """Chunks counted are not tokens (speculative decoding sends several a chunk): without usage, an answer that asked
    for 16 and came in 10 chunks is whole if it ended for its length, short if it stopped."""
    whole = _streamed(exact_length=True, max_tokens=16, output_tokens_counted=True, finish_reason="length")
    stopped = dataclasses.replace(whole, finish_reason="stop")
    assert not whole.short_answer and stopped.short_answer
    assert (whole.tokens_asked, whole.tokens_got) == (0, 0)  # no got/asked from a count that is not tokens


# Lists of registry names that are a concept of their own, not a subset of the registry: each with its reason.
OWN_LISTS = {
    "harness/analysis/server.py": "the server's own stages (its histograms' names), not the client's metrics",
    "harness/capacity/intervals.py": "LAGGED: the latencies that end at one chunk's arrival (how they are measured)",
    "harness/capacity/llmd.py": "llm-d's report schema: each of its names beside ours",
    "harness/load/live.py": "the dashboard's two lines a metric (p50, p99)",
    "harness/metrics/extract.py": "FIRST_SEEN: the wire order of a bucket's sketches, frozen by the wire format",
    "harness/metrics/rows.py": "ROW_FIELDS: a request row's columns (the wire format of rows)",
    "harness/report/class_tables.py": "the comparison's two columns a load (TTFT, TPOT)",
}


def test_metric_and_percentile_subsets_come_from_the_registry():
    """No module writes its own list of two or more registry metrics or percentiles (the SLO's, the knee's, a class's,
    the gate's, the dashboard's, the sinks'): it derives it from ``metrics.vocabulary``, so a metric added there
    reaches every list that should have it. The lists that are a concept of their own are named above."""
    import ast
    import pathlib

    from harness.metrics.vocabulary import METRIC, PERCENTILES

    names = set(METRIC) | set(PERCENTILES)
    root = pathlib.Path(__file__).resolve().parents[2]
    found = {}
    for p in sorted((root / "harness").rglob("*.py")):
        rel = p.relative_to(root).as_posix()
        if rel == "harness/metrics/vocabulary.py" or rel.startswith("harness/sim/"):
            continue  # the registry itself; the simulator is a server, with its own names
        for n in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            elts = getattr(n, "elts", ())
            words = [e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            if isinstance(n, ast.Tuple | ast.List | ast.Set) and len(words) == len(n.elts) and \
                    sum(w in names for w in words) >= 2:
                found.setdefault(rel, []).append(n.lineno)
    assert set(found) - set(OWN_LISTS) == set(), {k: v for k, v in found.items() if k not in OWN_LISTS}
    assert set(OWN_LISTS) <= set(found), "a list named here is gone: drop its entry"


def test_the_derived_subsets_match_what_their_readers_can_give():
    from harness.metrics.rows import ROW_FIELDS
    from harness.metrics.vocabulary import (
        CLASS_KNEE_METRICS,
        CLASS_LATENCIES,
        CLASS_SLO_METRICS,
        GATE_DEFAULT,
        GATE_LATENCIES,
        KNEE_METRICS,
        LIVE,
        SLO_METRICS,
        WHOLE_ANSWER_SLO_METRICS,
    )

    assert set(CLASS_LATENCIES) <= set(ROW_FIELDS)  # a class's latencies come from its rows
    assert set(CLASS_KNEE_METRICS) <= set(KNEE_METRICS) and set(CLASS_SLO_METRICS) <= set(SLO_METRICS)
    assert set(GATE_DEFAULT) < set(GATE_LATENCIES) and "itl" not in GATE_DEFAULT  # itl per token is TPOT again
    assert set(LIVE) <= set(KNEE_METRICS) and set(WHOLE_ANSWER_SLO_METRICS) == {
        "e2e", "error_rate", "short_answer_rate", "answers_changed_rate", "answers_failed_rate"}
