"""``workload.trace`` with ``format: weka`` end to end on the simulator: agent sessions played as trees by real Locust
users — the shipped sample's sessions end with their sub-agents' calls, the server's prefix-cache hits on the
sessions' own ceiling; a hand-made session's think times (tool durations) kept within 20 ms. (A run whose prompts
overflow the model's context: tests/load/test_prefix_trace_run.py.)"""

from __future__ import annotations

import json
import pathlib
import shutil

import pytest

from tests.kit.run import kneecap_run, write_scenario

pytestmark = pytest.mark.integration

SAMPLE = pathlib.Path(__file__).resolve().parents[2] / "scenarios" / "traces" / "weka_sample"


def test_the_sample_sessions_play_as_trees_and_the_server_serves_their_ceiling(tmp_path):
    shutil.copytree(SAMPLE, tmp_path / "sessions")
    r = kneecap_run(write_scenario(tmp_path, """
        name: agents
        endpoint: {api: chat, model: sim-small}
        workload:
          trace: {file: sessions, format: weka, think_cap_s: 0.5}
        load: {mode: constant, users: 3, duration_s: 5, step: {warmup_s: 0.5}}
    """), "--save-requests", "--sim-arg=--prefix-cache=on", out=tmp_path / "out")
    assert r.code == 0, r.output
    step = r.summary["steps"][0]
    assert step["sessions"]["ended"] >= 1 and any(rec["call"] >= 1 for rec in r.records)  # sub-agents' calls
    cache = step["prefix_cache"]
    assert cache["ceiling"]["share"] > 0.5, cache
    # the simulator's cache holds every session: it serves what the sessions' shared blocks allow, as each answer's
    # usage says (its /metrics delta over a step of ~30 long prompts counts the ones it admitted, not the ones that
    # ended in the step: a later turn, more cached, in flight at the step's end moves it by 10 points or more)
    assert cache["client"]["cached_share"] == pytest.approx(cache["ceiling"]["share"], abs=0.02), cache
    assert cache["server"]["hit_rate"] is not None, cache
    assert "prefix cache (trace): the server's hits against what an unbounded cache could serve" in r.output


def _req(ids: list[int], n: int, think: float = 0.0) -> dict:
    return {"t": 0, "type": "s", "in": n, "out": 4, "hash_ids": ids, "think_time": think}


SESSION = {"id": "tools", "block_size": 16, "requests": [
    _req([1, 2], 40),
    _req([1, 2, 3], 60, think=0.3),                                   # turn 2: after 0.3 s
    {"type": "subagent", "agent_id": "a", "duration_ms": 500, "requests": [
        _req([1, 2, 3, 7], 70), _req([1, 2, 3, 7, 8], 90, think=0.2)]},  # turn 3: its second call 0.2 s after
    {"type": "subagent", "agent_id": "b", "duration_ms": 100, "requests": [_req([20], 30)]},
    _req([1, 2, 3, 4], 70, think=0.9),                               # turn 4: 0.9 s less the 0.5 s waited for
    _req([1, 2, 3, 4, 5], 90, think=0.25),                           # turn 5
]}


@pytest.mark.timing
def test_think_times_are_kept_between_a_sessions_calls(tmp_path):
    (tmp_path / "s.json").write_text(json.dumps(SESSION))
    r = kneecap_run(write_scenario(tmp_path, """
        name: tools
        endpoint: {api: chat, model: sim-small}
        workload:
          trace: {file: s.json, format: weka, start: first}
        load: {mode: constant, users: 2, duration_s: 3, step: {warmup_s: 0}}
    """), "--save-requests", out=tmp_path / "out")
    assert r.code == 0, r.output
    plays: dict[int, dict[tuple[int, int], list[dict]]] = {}
    for rec in r.records:
        plays.setdefault(rec["session"], {}).setdefault((rec["turn"], rec["call"]), []).append(rec)
    whole = [p for p in plays.values() if len(p) == 6]  # every call of a play seen: (turn, call) keys
    assert len(whole) >= 2, plays.keys()
    gaps = []
    for p in whole:
        def end(rec):
            return rec["start"] + rec["e2e_s"]
        first, second, a, b, fourth, fifth = (p[k] for k in ((1, 0), (2, 0), (3, 1), (3, 2), (4, 0), (5, 0)))
        a1, a2 = sorted(a, key=lambda x: x["start"])
        group_end = max(end(a2), end(b[0]))
        gaps += [(second[0]["start"] - end(first[0]), 0.3), (a2["start"] - end(a1), 0.2),
                 (fourth[0]["start"] - group_end, 0.4), (fifth[0]["start"] - end(fourth[0]), 0.25)]
        assert abs(a1["start"] - b[0]["start"]) < 0.02  # the sub-agents start at once
    assert all(abs(got - want) <= 0.02 for got, want in gaps), gaps

