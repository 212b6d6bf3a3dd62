"""summary.json's typed read model (``analysis/summary_model.py``): a real run's file and what the master writes
decode and encode back to the same keys and values; every historical version decodes; a bad file says where.

``golden/summary-v3-sessions.json`` is the summary of a real ``kneecap run --workers 2`` on the built-in
simulator (re-serialized compactly), with every per-step block kneecap writes (server stages, prefix cache,
sessions, stream, tail, where TTFT goes, cost), clocks and the run's cost. Its scenario::

    name: golden-sessions
    endpoint: {api: chat, model: sim-tiny, timeouts: {ttft_s: 20, idle_s: 10}}
    workload: {seed: 7, sessions: {turns: 3, first_input_tokens: 300, turn_input_tokens: 50, output_tokens: 40,
                                   think_time_s: 0.05}}
    load: {mode: staircase, users: {start: 4, step: 8, max: 28},
           step: {warmup_s: 0.5, min_duration_s: 3, min_requests: 60, max_duration_s: 5}}
    slo: {ttft: ["p(95)<2000"], tokens_per_s_per_user: ["p(5)>1"]}
    cost: {per_hour: 4.2, input_per_mtok: 0.5, output_per_mtok: 1.5}
"""

from __future__ import annotations

import json
import pathlib

import msgspec
import pytest

from harness.analysis.why.decompose import UNKNOWN
from harness.report import validate
from harness.report.validate import as_summary, load_summary, parse_summary, summary_problems
from harness.summary import Percentiles, SplitPart, Summary
from tests.kit.summaries import break_, hand_made_v2, version1, written

GOLDEN = pathlib.Path(__file__).parent / "golden" / "summary-v3-sessions.json"


def _round_trip(data: bytes) -> tuple[Summary, object]:
    s = load_summary(data, "summary.json")
    return s, json.loads(msgspec.json.encode(s))


def test_a_real_run_round_trips():
    raw = GOLDEN.read_bytes()
    s, back = _round_trip(raw)
    data = json.loads(raw)
    # the generator's later fields read as what this older file meant (decoded into the one model, not kept apart)
    later = {"lag_limit_ms": 10.0, "runqueue_wait_s": None, "shared_stamps": 0, "shared_stamp_share": 0.0,
             "stamps_flagged": False, "kernel_stamps": True, "send_lag_p99_ms": None}
    for step in data["steps"]:
        assert later.keys().isdisjoint(step["generator"])
        step["generator"] |= later
    assert back == data  # every key kept, none invented but those, every value the same
    assert s.schema == "kneecap.summary/3" and s.mode == "closed" and len(s.clocks) == 2
    step = s.steps[0]
    assert step.level == 4 and step.latency_ms["ttft"].p99 is not None and step.generator.cpu_s is not None
    assert step.server.stages["ttft"].count and isinstance(step.server.stages["ttft"].p50_ms, list)
    assert step.prefix_cache.client.cached_share is not None and step.sessions.by_turn
    assert step.ttft_split.client.ttft.n and step.tail.attributions[0].metric == "ttft_s"
    assert step.cost.tokens.output > 0 and s.cost.at[s.cost.reference].index == s.steps[-1].index
    assert not s.knee.found and s.knee.level is None and s.knee.tail == "p99_slo"


@pytest.mark.parametrize("mode", ["closed", "open"])
@pytest.mark.parametrize("cost", [False, True])
def test_what_the_master_writes_round_trips(mode, cost):
    data = json.loads(json.dumps(written(mode, cost=cost)))  # through JSON, as the file is
    s, back = _round_trip(json.dumps(data).encode())
    assert back == data
    assert s.steps[0].level == 4 and s.knee.level == 8 and (s.steps[0].arrivals_per_s is not msgspec.UNSET) == (
        mode == "open")
    assert s.steps[3].latency_ms == {} and s.steps[0].tokens_per_s_per_user.count


def test_the_cost_line_is_rendered_from_its_figures():
    """Prose at the edge: the stored ``cost.line`` is still written (older readers), the reader says it again from
    the figures; for what kneecap writes the two agree."""
    data = written(cost=True)
    s = msgspec.convert(data, Summary)
    assert s.cost_line == data["cost"]["line"]
    golden = load_summary(GOLDEN.read_bytes(), "g")
    assert golden.cost_line == json.loads(GOLDEN.read_bytes())["cost"]["line"]
    assert msgspec.convert(written(), Summary).cost_line == ""
    nothing = msgspec.structs.replace(s.cost, at={}, note="no judged step", test_cost=None)
    assert nothing.render("open") == "cost: no judged step: no reference load"
    assert msgspec.structs.replace(s, mode="open").cost_line.startswith("cost at 8 req/s (largest load within SLO)")


def test_every_historical_version_decodes():
    early_v2 = written()
    for key in ("degraded", "fleet_events"):
        del early_v2[key]
    for st in early_v2["steps"]:
        for key in ("fleet_changed", "workers_lost", "workers_joined", "new_connections", "new_connection_share"):
            del st[key]
        for key in ("cpu_s", "output_tokens", "cpu_us_per_token", "gc_pause_max_ms"):
            del st["generator"][key]
    files = {"kneecap.summary/1": version1(json.loads(json.dumps(written()))), "early /2": early_v2,
             "hand-made /2": hand_made_v2(16), "/3 open": written("open")}
    for name, data in files.items():
        s = load_summary(json.dumps(data).encode(), name)
        assert s.steps[0].fleet_changed is False and s.steps[0].workers_lost == [], name
        assert s.knee.found and s.knee.level in (8, 16), name
    v1 = load_summary(json.dumps(files["kneecap.summary/1"]).encode(), "v1")
    assert v1.knee.tail == "p99" and v1.fleet_events == [] and not v1.degraded
    assert v1.steps[0].latency_ms["ttft"].p99_slo is None
    old = load_summary(json.dumps(early_v2).encode(), "v2")
    assert old.steps[0].new_connection_share is msgspec.UNSET and old.steps[0].generator.cpu_s is None


def test_a_misspelt_key_says_which_it_probably_is():
    s = written()
    s["steps"][1]["complet"] = s["steps"][1].pop("complete")
    s["knee"]["stepindex"] = s["knee"].pop("step_index")
    s["exit_cod"] = s.pop("exit_code")
    assert summary_problems(s) == ["steps[1]: unknown key 'complet'; did you mean 'complete'?",
                                   "knee: unknown key 'stepindex'; did you mean 'step_index'?",
                                   "(top level): unknown key 'exit_cod'; did you mean 'exit_code'?"]
    with pytest.raises(ValueError, match=r"^d/summary.json: steps\[1\]: unknown key 'complet'; did you mean "
                                         r"'complete'\? \(and 2 more problems\)$"):
        load_summary(json.dumps(s).encode(), "d/summary.json")
    s = written()
    s["steps"][0]["fleet_changd"] = True  # an optional key misspelt: a later version's addition, for all we know
    assert summary_problems(s) == []


def test_a_wrong_type_deep_in_a_block_says_its_path():
    data = json.loads(GOLDEN.read_bytes())
    data["steps"][2]["sessions"]["by_turn"]["2-4"]["ttft_ms"]["p99"] = "slow"
    data["steps"][0]["ttft_split"]["server"]["prefill"] = 12
    data["steps"][1]["server"]["stages"]["ttft"]["p50_ms"] = {"estimate": 5}
    data["clocks"][next(iter(data["clocks"]))]["samples"] = 2.5
    assert summary_problems(data) == [
        "steps[0].ttft_split.server.prefill: expected a mapping or a string or null, got an integer 12",
        "steps[1].server.stages.ttft.p50_ms: expected a number or a list or null, got a mapping",
        "steps[2].sessions.by_turn.2-4.ttft_ms.p99: expected a number or null, got a string 'slow'",
        f"clocks.{next(iter(data['clocks']))}.samples: expected an integer, got a number 2.5"]


def test_the_level_key_follows_the_mode():
    s = written("open")
    del s["steps"][0]["rate_rps"]
    s["steps"][1]["users"] = 8  # the other mode's key is not the level
    del s["steps"][1]["rate_rps"]
    assert summary_problems(s) == ["steps[0].rate_rps: missing required key", "steps[1].rate_rps: missing required key"]


def test_msgspec_says_where_when_the_walk_misses_something(monkeypatch):
    """The walk and msgspec agree on every test here; should they ever not, the file is still refused with a path.
    The live summary (the master's own, in the web UI) is typed by msgspec alone, and says where too."""
    with pytest.raises(ValueError, match=r"^live: steps\[0\].ok: Expected `int`, got `null`$"):
        as_summary(break_("steps.0.ok", None), "live", walk=False)
    assert as_summary(written(), walk=False) == as_summary(written())
    monkeypatch.setattr(validate, "summary_problems", lambda data: [])
    with pytest.raises(ValueError, match=r"^f: steps\[0\].ok: Expected `int`, got `null`$"):
        load_summary(json.dumps(break_("steps.0.ok", None)).encode(), "f")


def test_parse_summary_still_gives_the_plain_dict():
    raw = GOLDEN.read_bytes()
    assert parse_summary(raw, "g") == json.loads(raw)


def test_small_readers_helpers():
    assert SplitPart(p50_ms=[5.5, 5.0, 10.0]).p50 == 5.5 and SplitPart(n=3, p50_ms=4.0).p50 == 4.0
    assert SplitPart().p50 is None and UNKNOWN.startswith("unknown")
    assert msgspec.to_builtins(Percentiles(count=0)) == {"count": 0}  # a metric without data: its count alone
