"""The run store on plain data: an entry from a summary, the scenario's hash, the index's lines, filters; and
``kneecap runs`` in-process (CliRunner) on an index the test writes. The real run's line: tests/load/test_run.py."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.report.validate import load_summary
from harness.run_store import (
    append,
    entry,
    git_state,
    index_for,
    last,
    parse_labels,
    read_index,
    record_run,
    scenario_hash,
    select,
)
from tests.kit.summaries import hand_made_v2, written


def test_entry_holds_the_headline_figures():
    e = entry(written(), path="/r/s-1", scenario_hash="abc", labels={"env": "prod"},
              overrides={"load.max": 16}, server={"cmd": "vllm serve m"}, git={"commit": "f00", "dirty": False},
              kneecap_version="0.1.0")
    assert e["kind"] == "run" and e["run_id"] == "r1" and e["path"] == "/r/s-1" and e["scenario"] == "s"
    assert e["time"] == "2023-11-14T22:13:20+00:00"  # started_at 1.7e9, UTC
    assert (e["host"], e["model"], e["exit_code"], e["degraded"]) == ("http://127.0.0.1:8000", "m", 5, True)
    assert e["labels"] == {"env": "prod"} and e["overrides"] == {"load.max": 16} and e["scenario_hash"] == "abc"
    assert e["server"] == {"cmd": "vllm serve m"} and e["git"]["commit"] == "f00" and e["kneecap_version"] == "0.1.0"
    summary = written()
    steps = summary["steps"]
    assert e["knee"] == {"found": True, "load": 8, "unit": "users", "metric": "ttft", "confidence": "high",
                         "p99_ms": steps[1]["latency_ms"]["ttft"]["p99"], "p99_step": 1}
    assert e["max_load_within_slo"] == 8
    assert e["max_output_tokens_per_s"] == max(s["throughput"]["output_tokens_per_s"] for s in steps)
    assert e["requests"] == sum(s["requests"] for s in steps) and e["failures"] == 0 + 1 + 2
    assert json.loads(json.dumps(e)) == e  # plain JSON types only
    typed = entry(load_summary(json.dumps(summary).encode(), "s.json"), path="/r/s-1", scenario_hash="abc",
                  labels={"env": "prod"}, overrides={"load.max": 16}, server={"cmd": "vllm serve m"},
                  git={"commit": "f00", "dirty": False}, kneecap_version="0.1.0")
    assert typed == e


def test_entry_without_a_knee_takes_the_last_measured_step():
    s = hand_made_v2(16)
    s["knee"].update(found=False, confirmed=False, step_index=None, users=None)
    s["mode"] = "closed"
    e = entry(s, path="/p", scenario_hash=None)
    assert e["knee"] == {"found": False, "load": None, "unit": "users", "metric": "ttft", "confidence": "high",
                         "p99_ms": 900.0, "p99_step": 2}  # step 3 was cut short with no data
    assert e["server"] is None and e["git"] is None and e["labels"] == {}


def test_open_loop_knee_is_in_requests_per_second():
    assert entry(written("open"), path="/p", scenario_hash=None)["knee"]["unit"] == "req/s"


def test_a_bad_summary_is_a_value_error():
    with pytest.raises(ValueError, match="knee"):
        entry({**written(), "knee": 3}, path="/p", scenario_hash=None)


def test_scenario_hash_is_stable_and_follows_every_field(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("name: s\nworkload: {input_tokens: 100, output_tokens: 20}\nload: {users: {max: 8}}\n")
    h = scenario_hash(str(path), {})
    assert h == scenario_hash(str(path), {}) and len(h) == 64
    path.write_text("# a comment\nname: s\nload: {users: {max: 8}}\nworkload:\n  output_tokens: 20\n"
                    "  input_tokens: 100\n")
    assert scenario_hash(str(path), {}) == h  # layout, order and comments are not the scenario
    assert scenario_hash(str(path), {"load.users.max": 16}) != h
    assert scenario_hash(str(path), {"load.users.max": 8}) == h  # an override to the file's own value
    path.write_text("name: s\nworkload: {input_tokens: 101, output_tokens: 20}\nload: {users: {max: 8}}\n")
    assert scenario_hash(str(path), {}) != h
    assert scenario_hash(None, {}) == scenario_hash(None, {}) != scenario_hash(None, {"workload.seed": 2})
    assert scenario_hash(str(tmp_path / "gone.yaml"), {}) is None


def test_append_two_and_read_them_back(tmp_path):
    index = str(tmp_path / "deep" / "results" / "index.jsonl")  # the folder is created
    first = entry(written(), path="/a", scenario_hash="h", labels={"env": "prod"})
    second = {**first, "run_id": "r2", "path": "/b", "labels": {"env": "dev", "note": "ünïcode"}}
    append(index, first)
    append(index, second)
    with open(index, "rb") as f:
        assert f.read().count(b"\n") == 2
    assert read_index(index) == ([first, second], [])


def test_a_missing_index_is_an_empty_store(tmp_path):
    assert read_index(str(tmp_path / "index.jsonl")) == ([], [])


def test_broken_lines_are_skipped_and_named(tmp_path):
    index = tmp_path / "index.jsonl"
    good = {"kind": "run", "path": "/a", "run_id": "r1"}
    index.write_bytes(b"\n".join([json.dumps(good).encode(), b'{"kind": "run", "pa', b"", b"[1, 2]",
                                  b"\xff\xfe not text", json.dumps({**good, "run_id": "r2"}).encode(), b""]))
    entries, problems = read_index(str(index))
    assert [e["run_id"] for e in entries] == ["r1", "r2"]
    assert [p.split(":")[0] for p in problems] == [f"{index} line 2", f"{index} line 4", f"{index} line 5"]
    assert "not a JSON entry" in problems[0] and "'kind' and a 'path'" in problems[1]


RUNS = [{"kind": "run", "path": "/1", "run_id": "1", "scenario": "chat", "host": "h1", "model": "m",
         "labels": {"env": "prod", "gpu": "h100"}},
        {"kind": "run", "path": "/2", "run_id": "2", "scenario": "chat", "host": "h2", "model": "m",
         "labels": {"env": "dev"}},
        {"kind": "sweep", "path": "/3", "run_id": "3", "scenario": "chat", "labels": {"env": "prod"}},
        {"kind": "run", "path": "/4", "run_id": "4", "scenario": "rag", "host": "h1", "model": "m2",
         "labels": {"env": "prod"}}]


@pytest.mark.parametrize("filters,ids", [
    ({}, ["1", "2", "3", "4"]),
    ({"labels": {"env": "prod"}}, ["1", "3", "4"]),
    ({"labels": {"env": "prod", "gpu": "h100"}}, ["1"]),
    ({"labels": {"env": "prod"}, "kind": "run"}, ["1", "4"]),
    ({"scenario": "chat", "kind": "run"}, ["1", "2"]),
    ({"host": "h1"}, ["1", "4"]),
    ({"model": "m2"}, ["4"]),
    ({"labels": {"env": "staging"}}, []),
])
def test_select_and_last(filters, ids):
    assert [e["run_id"] for e in select(RUNS, **filters)] == ids
    newest = last(RUNS, **filters)
    assert (newest["run_id"] if newest else None) == (ids[-1] if ids else None)


def test_labels_parse_and_refuse():
    assert parse_labels(["env=prod", "note=a=b", "gpu.kind=h100"]) == {"env": "prod", "note": "a=b",
                                                                      "gpu.kind": "h100"}
    for bad in ("envprod", "=prod", "env=", "e nv=x"):
        with pytest.raises(ValueError, match=repr(bad).replace("[", r"\[")):
            parse_labels([bad])
    with pytest.raises(ValueError, match="given twice"):
        parse_labels(["env=a", "env=b"])


def test_index_is_the_results_folders_unless_the_run_lies_elsewhere(tmp_path):
    results = tmp_path / "results"
    assert index_for(str(results / "s-1"), str(results)) == str(results / "index.jsonl")
    assert index_for(str(results / "sweep" / "cell-01"), str(results)) == str(results / "index.jsonl")
    assert index_for(str(tmp_path / "out"), str(results)) == str(tmp_path / "index.jsonl")
    assert index_for(str(tmp_path / "results-2" / "x"), str(results)) == str(tmp_path / "results-2" / "index.jsonl")


def test_record_run_writes_one_line_per_run(tmp_path):
    out = tmp_path / "results" / "s-r1"
    out.mkdir(parents=True)
    (out / "summary.json").write_text(json.dumps(written()))
    kw = {"run_id": "r1", "results_dir": str(tmp_path / "results"), "scenario_path": None, "digest": "h",
          "labels": {"env": "ci"}, "overrides": {}, "server": None}
    assert "index.jsonl" in record_run(str(out), **kw)
    record_run(str(out), **kw)  # the same run again: no second line
    entries, problems = read_index(str(tmp_path / "results" / "index.jsonl"))
    assert problems == [] and len(entries) == 1 and entries[0]["labels"] == {"env": "ci"}
    assert json.loads((out / "run.json").read_text()) == entries[0]  # the labels in the run folder too
    assert "not indexed" in record_run(str(out), **{**kw, "run_id": "r2"})  # an earlier run's summary
    assert record_run(str(tmp_path / "empty"), **kw) is None  # no summary: nothing to index


def test_record_run_only_warns_when_the_index_cannot_be_written(tmp_path):
    out = tmp_path / "s-r1"
    out.mkdir()
    (out / "summary.json").write_text(json.dumps(written()))
    (tmp_path / "index.jsonl").mkdir()  # a folder where the file should be
    said = record_run(str(out), run_id="r1", results_dir=str(tmp_path / "results"), scenario_path=None, digest=None,
                      labels={}, overrides={}, server=None)
    assert said.startswith("WARNING: run store:") and "not written" in said


@pytest.mark.integration  # runs git
def test_git_state_of_a_repository_and_outside_one(tmp_path):
    assert git_state(str(tmp_path)) is None
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    (repo / "s.yaml").write_text("name: s\n")
    for cmd in (["init", "-q"], ["add", "s.yaml"], ["commit", "-qm", "s"]):
        subprocess.run(["git", "-C", str(repo), *cmd], check=True, env=env, capture_output=True)
    clean = git_state(str(repo))
    assert clean is not None and len(clean["commit"]) == 40 and clean["dirty"] is False
    (repo / "s.yaml").write_text("name: t\n")
    assert git_state(str(repo)) == {**clean, "dirty": True}


# --- kneecap runs -------------------------------------------------------------------------------------------------


def _store(tmp_path) -> str:
    results = tmp_path / "results"
    results.mkdir()
    base = entry(written(), path=str(results / "s-1"), scenario_hash="h", labels={"env": "prod"})
    lines = [json.dumps(base), "{broken",
             json.dumps({**base, "run_id": "r2", "path": str(results / "s-2"), "labels": {"env": "dev"}}),
             json.dumps({**base, "run_id": "r3", "path": str(results / "s-3"), "scenario": "other"})]
    (results / "index.jsonl").write_text("\n".join(lines) + "\n")
    return str(results)


def test_runs_lists_a_table_and_warns_of_a_broken_line(tmp_path):
    r = CliRunner().invoke(main, ["runs", "--results", _store(tmp_path)])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["time", "run", "id", "scenario", "labels", "model", "knee", "exit", "path"]
    assert [ln.split()[2] for ln in lines[1:]] == ["r1", "r2", "r3"]  # oldest first
    assert "env=prod" in lines[1] and "8 users" in lines[1] and lines[1].endswith(str(tmp_path / "results" / "s-1"))
    assert "line 2: not a JSON entry" in r.stderr and r.stderr.startswith("warning: ")


def test_runs_filters_by_label_and_scenario_and_prints_json(tmp_path):
    results = _store(tmp_path)
    r = CliRunner().invoke(main, ["runs", "--results", results, "--label", "env=prod", "--json"])
    assert r.exit_code == 0 and [json.loads(ln)["run_id"] for ln in r.stdout.splitlines()] == ["r1", "r3"]
    r = CliRunner().invoke(main, ["runs", "--results", results, "--label", "env=prod", "--scenario", "s",
                                  "--json"])
    assert [json.loads(ln)["run_id"] for ln in r.stdout.splitlines()] == ["r1"]
    r = CliRunner().invoke(main, ["runs", "--results", results, "--last", "1", "--json"])
    assert [json.loads(ln)["run_id"] for ln in r.stdout.splitlines()] == ["r3"]
    r = CliRunner().invoke(main, ["runs", "--results", results, "--label", "env=staging"])
    assert r.exit_code == 0 and r.stdout == "" and "no runs in" in r.stderr and "match" in r.stderr


def test_runs_on_an_empty_store_and_bad_input(tmp_path):
    r = CliRunner().invoke(main, ["runs", "--results", str(tmp_path / "none")])
    assert r.exit_code == 0 and "no runs in" in r.stderr
    r = CliRunner().invoke(main, ["runs", "--results", str(tmp_path), "--label", "envprod"])
    assert r.exit_code == 2 and "'envprod'" in r.stderr and "Traceback" not in r.output
    (tmp_path / "index.jsonl").mkdir()
    r = CliRunner().invoke(main, ["runs", "--results", str(tmp_path)])
    assert r.exit_code == 2 and "cannot read" in r.stderr and "Traceback" not in r.output


def test_run_refuses_a_bad_label():
    r = CliRunner().invoke(main, ["run", "--label", "env"])
    assert r.exit_code == 2 and "--label" in r.stderr and "'env'" in r.stderr
