"""Session metrics (metrics/sessions.py, analysis/sessions.py): merge, wire, the cache views, agent stall."""

from __future__ import annotations

import msgpack
import msgspec
import pytest

from harness.analysis.judge import evaluate_slo, misses, step_point
from harness.analysis.sessions import (
    CLIENT_SOURCE,
    NOT_REPORTED,
    SERVER_SOURCE,
    agent_stall,
    cache_view,
    explain_cache,
    session_view,
)
from harness.analysis.steps import StepInfo, step_result
from harness.metrics.aggregate import Bucket, CacheCounts
from harness.metrics.record import RequestRecord
from harness.metrics.sessions import SessionRecord, nearest_rank
from harness.spec.slo import parse_threshold, request_meets
from harness.summary import PrefixCache, Server


def _call(turn_bucket: str, ttft: float, e2e: float, n: int = 11, prompt: int = 1000, cached: int | None = 600,
          ok: bool = True) -> RequestRecord:
    return RequestRecord(start=0.0, ttft_s=ttft, e2e_s=e2e, output_tokens=n, prompt_tokens=prompt,
                         cached_tokens=cached, turn_bucket=turn_bucket, chunk_times=[ttft],
                         error=None if ok else "reset")


def _session(duration=3.0, model=2.0, ttft=0.2, failed=False) -> SessionRecord:
    return SessionRecord(duration_s=duration, model_time_s=model, turns=4, calls=4, ttft_p99_s=ttft,
                         context_tokens=5000, failed=failed)


def test_calls_and_sessions_add_merge_and_cross_the_wire():
    a, b = Bucket(), Bucket()
    a.add(_call("1", 0.5, 1.5, cached=0))
    a.add(_call("2-4", 0.1, 1.1))
    b.add(_call("2-4", 0.2, 1.2, ok=False))
    b.add(_call("2-4", 0.3, 1.3, cached=None))
    a.add_session(_session())
    b.add_session(_session(failed=True))
    a.merge(Bucket.from_wire(msgpack.unpackb(msgpack.packb(b.to_wire()), strict_map_key=False)))
    s = a.sessions
    assert s.turns == {"1": [1, 1, 1, 1000, 0], "2-4": [3, 2, 1, 1000, 600]}
    assert (s.ended, s.failed, s.turn_sum) == (2, 1, 8)
    assert s.decode_tokens == 30 and s.decode_s == pytest.approx(3.0)
    assert a.cache == CacheCounts(2, 2000, 600, 0)  # the call without cached_tokens is not in the share
    assert a.sketches["ttft@turn:2-4"].count == 2 and a.sketches["session_duration"].count == 2
    assert a.sketches["session_ttft"].count == 1  # a failed session is a miss, not a value
    assert misses(a, "session_ttft") == 1 and misses(a, "ttft") == 1


def test_cache_view_names_its_sources_and_says_when_nothing_is_reported():
    b = Bucket()
    b.add(RequestRecord(start=0, ttft_s=0.1, e2e_s=0.2, output_tokens=3, prompt_tokens=100, chunk_times=[0.1]))
    v = cache_view(b, None)
    assert v.client.note == NOT_REPORTED and v.server.note == NOT_REPORTED
    assert msgspec.to_builtins(v.client) == {"source": CLIENT_SOURCE, "note": NOT_REPORTED}  # no invented figures
    b.add(_call("1", 0.1, 0.2, prompt=1000, cached=250))
    v = cache_view(b, Server(prefix_cache_queries=4000.0, prefix_cache_hits=1000.0))
    assert v.client.cached_share == 0.25 and v.client.by_turn == {"1": 0.25}
    assert msgspec.to_builtins(v.server) == {"source": SERVER_SOURCE, "queries": 4000.0, "hits": 1000.0,
                                             "hit_rate": 0.25}


def test_agent_stall_is_zero_at_the_baseline_and_counts_the_extra_wait():
    base, loaded = Bucket(), Bucket()
    for _ in range(10):
        base.add(_call("1", 0.5, 1.5))      # decode 1.0 s for 10 tokens: 0.1 s per token
        base.add(_call("2-4", 0.1, 1.1))
        loaded.add(_call("1", 0.9, 2.9))    # TTFT +0.4, decode 2.0 s: +1.0 s
        loaded.add(_call("2-4", 0.3, 1.3))  # TTFT +0.2, decode the same
    for _ in range(5):
        base.add_session(_session())
        loaded.add_session(_session())
    assert agent_stall(base, base) == pytest.approx(0.0, abs=1e-9)
    # Extra per call: (0.4 + 1.0 + 0.2 + 0.0) / 2 = 0.8 s; 4 calls per session -> 3.2 s.
    assert agent_stall(loaded, base) == pytest.approx(3.2)
    view = session_view(loaded, base)
    assert view.agent_stall_s == pytest.approx(3.2) and list(view.by_turn) == ["1", "2-4"]
    assert view.turns_mean == 4 and view.ended == 5
    # the same figures go to InfluxDB: the step's sessions point, and each session sketch as its own metric
    from harness.sinks.points import step_points  # here: influxdb_client imports ssl (see test_client_side.py)

    r = step_result(StepInfo(0, 4, 0.0), loaded, None, now=10.0)
    r.sessions = view
    lines = step_points(r, tags={"run": "x"}, ts_ms=1)
    (point,) = [p for p in lines if p.startswith("kneecap_step_sessions")]
    assert "ended=5i" in point and "agent_stall_s=3.2" in point and "turns_mean=4" in point, point
    metrics = {p.split("metric=")[1].split(",")[0] for p in lines if p.startswith("kneecap_step,")}
    assert {"session_duration", "ttft_turn_1", "ttft_turn_2-4"} <= metrics, metrics


def test_session_slos_and_knee_rank_failed_sessions_as_misses():
    b = Bucket()
    for i in range(98):
        b.add_session(_session(ttft=0.1 + i / 1000))
    [check] = evaluate_slo((parse_threshold("session_ttft", "p(99)<1000"),), b)
    assert check.observed == pytest.approx(197, rel=0.01) and check.passed
    b.add_session(_session(failed=True))
    b.add_session(_session(failed=True))  # 2 of 100 failed: the p99 falls on a miss
    [check] = evaluate_slo((parse_threshold("session_ttft", "p(99)<1000"),), b)
    assert check.observed == "inf" and not check.passed
    point = step_point(0, 4, b, "session_ttft", True, 10.0)
    assert point.p99 == float("inf")
    assert request_meets((parse_threshold("session_ttft", "p(95)<1"),)) is None  # not a per-request limit


def explain_cache_of(before: dict | None, after: dict | None) -> str:
    """``explain_cache`` of two steps' ``prefix_cache`` blocks as summary.json has them."""
    def view(d):
        return None if d is None else msgspec.convert({"server": {}, **d}, PrefixCache)
    return explain_cache(view(before), view(after))


def test_explain_cache_only_when_the_hit_rate_falls():
    hi = {"client": {"cached_share": 0.9}, "server": {}}
    lo = {"client": {"cached_share": 0.4}, "server": {}}
    assert explain_cache_of(hi, lo) == "prefix cache hit 90% -> 40% (client side)"
    assert explain_cache_of(lo, hi) == ""
    assert explain_cache_of({"client": {}, "server": {"hit_rate": 0.8}}, {"client": {}, "server": {"hit_rate": 0.1}}) \
        == "prefix cache hit 80% -> 10% (server side)"
    assert explain_cache_of(None, lo) == ""


def test_nearest_rank():
    assert nearest_rank([3.0, 1.0, 2.0], 0.99) == 3.0
    assert nearest_rank(list(range(1, 201)), 0.99) == 198


def test_explain_cache_names_the_turns_that_began_to_miss_when_the_step_rate_hides_it():
    """A real knee (the KV-bound simulator, 7 -> 10 sessions): the step's hit rate barely moved (first turns, which
    never hit, weigh in), but the later turns began to miss: that is the knee's cache side."""
    at7 = {"client": {"cached_share": 0.8367, "by_turn": {"1": 0.0, "2-4": 0.9586, "5-16": 0.9635}}, "server": {}}
    at10 = {"client": {"cached_share": 0.8145, "by_turn": {"1": 0.0, "2-4": 0.9593, "5-16": 0.8529}}, "server": {}}
    assert explain_cache_of(at7, at10) == "prefix cache hit on turns 5-16 96% -> 85% (client side)"
    assert explain_cache_of(at10, at7) == ""  # it rose
    flat = {"client": {"cached_share": 0.8, "by_turn": {"1": 0.0, "2-4": 0.96}}, "server": {}}
    assert explain_cache_of(flat, {"client": {"cached_share": 0.79, "by_turn": {"1": 0.0, "2-4": 0.93}}}) == ""
    low = {"client": {"cached_share": 0.1, "by_turn": {"1": 0.0, "2-4": 0.3}}, "server": {}}  # never hit much
    assert explain_cache_of(low, {"client": {"cached_share": 0.09, "by_turn": {"1": 0.0, "2-4": 0.1}}}) == ""
