"""summary.json validation: what kneecap writes passes (both loops, schema 1 and 2); a broken file gives every
problem with its key path, and ``parse_summary`` the first one naming the file."""

from __future__ import annotations

import json

import pytest

from harness.report.validate import parse_summary, summary_problems
from tests.kit.summaries import break_, version1, written


@pytest.mark.parametrize("mode", ["closed", "open"])
def test_what_kneecap_writes_is_valid(mode):
    s = json.loads(json.dumps(written(mode)))  # through JSON, as the file is
    assert s["steps"][0]["latency_ms"]["ttft"]["p99_slo"] and s["steps"][3]["latency_ms"] == {}
    assert summary_problems(s) == []
    assert summary_problems(version1(s)) == []


def test_the_cost_view_is_valid_and_checked():
    s = json.loads(json.dumps(written(cost=True)))
    assert s["cost"]["reference"] == "max_load_within_slo" and s["steps"][3]["cost"]["flat_per_mtok"] is None
    assert summary_problems(s) == []
    s["cost"]["at"]["knee"]["flat_per_mtok"] = "cheap"
    s["steps"][0]["cost"]["tokens"]["output"] = 1.5
    assert summary_problems(s) == ["steps[0].cost.tokens.output: expected an integer, got a number 1.5",
                                   "cost.at.knee.flat_per_mtok: expected a number or null, got a string 'cheap'"]


def test_a_newer_field_is_allowed_a_missing_one_is_not():
    s = written()
    s["steps"][0]["future_field"] = {"x": 1}  # a later version's addition: readers ignore it
    assert summary_problems(s) == []
    del s["steps"][1]["complete"]
    del s["knee"]["tail"]
    assert summary_problems(s) == ["steps[1].complete: missing required key", "knee.tail: missing required key"]
    assert summary_problems(version1(written())) == []  # version 1 has no knee.tail


def test_early_version_2_files_without_fleet_fields_are_read():
    """Version 2 files written before fleet faults landed (the schema string was not bumped) lack them."""
    s = written()
    for key in ("degraded", "fleet_events"):
        del s[key]
    for st in s["steps"]:
        for key in ("fleet_changed", "workers_lost", "workers_joined"):
            del st[key]
    assert summary_problems(s) == []
    s["steps"][0]["fleet_changed"] = "no"
    assert summary_problems(s) == ["steps[0].fleet_changed: expected true or false, got a string 'no'"]


BROKEN = [
    (break_("steps.2.latency_ms", []), "steps[2].latency_ms: expected a mapping, got a list"),
    (break_("steps.0.users", "8"), "steps[0].users: expected a number, got a string '8'"),
    (break_("steps.0.users", True), "steps[0].users: expected a number, got a boolean True"),
    (break_("steps.1.latency_ms.ttft.p99_ci", [1, 2, 3]), "steps[1].latency_ms.ttft.p99_ci: expected a list of 2 "
                                                          "or null, got a list"),
    (break_("steps.1.failures.http_5xx", 1.5), "steps[1].failures.http_5xx: expected an integer, got a number 1.5"),
    (break_("steps.0.throughput", KeyError), "steps[0].throughput: missing required key"),
    (break_("steps", {}), "steps: expected a list, got a mapping"),
    (break_("knee.found", "yes"), "knee.found: expected true or false, got a string 'yes'"),
    (break_("knee.users", None), "knee.users: a found knee needs its load level, got null"),
    (break_("mode", "sideways"), "mode: expected one of closed, open, got a string 'sideways'"),
    (break_("slo.thresholds", "ttft: p(95)<500"), "slo.thresholds: expected a list, got a string"),
    (break_("fleet_events.0.kind", "died"), "fleet_events[0].kind: expected one of joined, lost, got a string"),
    (break_("schema", "kneecap.summary/9"), "schema: expected kneecap.summary/1 or kneecap.summary/2 or "
                                            "kneecap.summary/3, got a string 'kneecap.summary/9' "
                                            "(written by a newer kneecap?"),
    ({}, "schema: missing required key (expected kneecap.summary/1 or kneecap.summary/2 or kneecap.summary/3): "
     "not a kneecap summary"),
    ([], "(top level): expected a mapping (a kneecap summary), got a list"),
]


@pytest.mark.parametrize("data,problem", BROKEN, ids=[p.split(":")[0] for _, p in BROKEN])
def test_a_broken_summary_names_the_key(data, problem):
    problems = summary_problems(data)
    assert problems and problems[0].startswith(problem), problems


def test_every_problem_at_once_in_document_order():
    s = break_("steps.0.ok", None)
    s["steps"][2]["generator"]["reliable"] = "no"
    s["exit_code"] = "0"
    assert summary_problems(s) == ["steps[0].ok: expected an integer, got null",
                                   "steps[2].generator.reliable: expected true or false, got a string 'no'",
                                   "exit_code: expected an integer, got a string '0'"]


def test_parse_summary_names_the_file_and_the_first_problem():
    assert parse_summary(json.dumps(written()).encode(), "d/summary.json")["run_id"] == "r1"
    assert parse_summary(b"\xef\xbb\xbf" + json.dumps(written()).encode(), "d/summary.json")  # a BOM is fine
    bad = break_("steps.0.ok", None)
    bad["exit_code"] = "0"
    with pytest.raises(ValueError, match=r"^d/summary.json: steps\[0\].ok: expected an integer, got null "
                                         r"\(and 1 more problem\)$"):
        parse_summary(json.dumps(bad).encode(), "d/summary.json")
    with pytest.raises(ValueError, match=r"^d/summary.json is not UTF-8 text \(byte 0xff at offset 1, line 1\)"):
        parse_summary(b"{\xff}", "d/summary.json")
    with pytest.raises(ValueError, match=r"^d/summary.json is not valid JSON \(Expecting"):
        parse_summary(b'{"schema": ', "d/summary.json")
    with pytest.raises(ValueError, match="nested too deeply"):
        parse_summary(b"[" * 100_000, "d/summary.json")
