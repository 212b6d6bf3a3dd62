"""``kneecap export --format llm-d``: each report validates against llm-d's published schema (v0.2.1, vendored in
llmd_schema/) and, read back, says what summary.json says, in the units it declares."""

from __future__ import annotations

import datetime
import json
import os

import jsonschema
import pytest
import yaml
from click.testing import CliRunner

from harness.capacity.llmd import FILE_PREFIX, SCHEMA_COMMIT, VERSION, llmd_reports
from harness.cli import main
from harness.report.validate import load_summary
from tests.kit.summaries import hand_made_v2, written

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "..", "report", "golden", "summary-v3-sessions.json")
with open(os.path.join(HERE, "llmd_schema", "br_v0_2_1_json_schema.json"), encoding="utf-8") as _f:
    VALIDATOR = jsonschema.Draft202012Validator(json.load(_f))

# The unit kinds llm-d's Pydantic validators demand (base.py UNITS_*), which the JSON Schema cannot say: a
# Statistics block's path -> the units it may take. Every Statistics a report holds must be named here.
_TIME, _PER_TOKEN, _COUNT = {"ms", "s"}, {"ms/token", "s/token"}, {"count", "pixels"}
UNIT_KINDS = {
    "requests.input_length": _COUNT, "requests.output_length": _COUNT,
    "latency.time_to_first_token": _TIME, "latency.request_latency": _TIME,
    "latency.time_per_output_token": _PER_TOKEN, "latency.inter_token_latency": _PER_TOKEN,
    "throughput.input_token_rate": {"tokens/s"}, "throughput.output_token_rate": {"tokens/s"},
    "throughput.total_token_rate": {"tokens/s"}, "throughput.request_rate": {"queries/s"},
    "sessions.events_per_session": _COUNT, "sessions.session_duration": _TIME,
    "aggregate.waiting_requests": _COUNT, "aggregate.cache_hit_rate": {"percent", "fraction"},
}
MS = {"ms": 1.0, "s": 1000.0, "ms/token": 1.0, "s/token": 1000.0}
"""A declared unit -> ms, to compare a figure read back with kneecap's ``latency_ms``."""


def _summary(data: dict | None = None, path: str | None = None):
    raw = open(path, "rb").read() if path else json.dumps(data).encode()  # noqa: SIM115 - read whole
    return load_summary(raw, "summary.json")


def _problems(report: dict) -> list[str]:
    """Everything llm-d's schema would refuse: the JSON Schema's errors and the Pydantic model's unit rules."""
    out = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in VALIDATOR.iter_errors(report)]

    def walk(node: object, path: tuple[str, ...]) -> None:
        if isinstance(node, dict):
            if "units" in node and "mean" in node:  # a Statistics block
                key = ".".join(path[-2:])
                if node["units"] not in UNIT_KINDS.get(key, ()):
                    out.append(f"{'.'.join(path)}: units {node['units']!r} (allowed: {UNIT_KINDS.get(key)})")
            for k, v in node.items():
                walk(v, (*path, k))
        elif isinstance(node, list):
            for v in node:
                walk(v, path)
    walk(report, ())
    conc = report.get("scenario", {}).get("load", {}).get("standardized", {}).get("concurrency")
    if conc is not None and not (isinstance(conc, int) or conc == float("inf")):
        out.append(f"concurrency {conc!r}: an integer or .inf")
    return out


def _check_figures(report: dict, step) -> None:
    """The report's figures, read back, equal the step's in summary.json (latencies converted by declared unit)."""
    agg = report["results"]["request_performance"]["aggregate"]
    assert agg["requests"]["total"] == step.requests
    assert agg["requests"]["failures"] == step.requests - step.ok
    for ours, theirs in (("ttft", "time_to_first_token"), ("tpot", "time_per_output_token"),
                         ("itl_token", "inter_token_latency"), ("e2e", "request_latency")):
        p = step.latency_ms.get(ours)
        if p is None or p.mean is None:
            assert theirs not in agg.get("latency", {})
            continue
        stat = agg["latency"][theirs]
        scale = MS[stat["units"]]
        for k, kk in (("mean", "mean"), ("p50", "p50"), ("p90", "p90"), ("p95", "p95"), ("p99", "p99"),
                      ("p999", "p99p9"), ("max", "max")):
            assert stat[kk] * scale == pytest.approx(getattr(p, k)), (theirs, kk)
    rates = agg["throughput"]
    assert rates["request_rate"]["mean"] == pytest.approx(step.ok / step.duration_s, abs=1e-3)
    assert rates["output_token_rate"]["mean"] == step.throughput.output_tokens_per_s
    assert rates["input_token_rate"]["mean"] == step.throughput.input_tokens_per_s
    assert agg["requests"]["output_length"]["mean"] == pytest.approx(
        step.throughput.output_tokens_per_s * step.duration_s / step.ok, abs=0.05)
    std = report["scenario"]["load"]["standardized"]
    assert std["stage"] == step.index
    assert std.get("concurrency", std.get("rate_qps")) == step.level
    assert report["run"]["time"]["duration"] == f"PT{step.duration_s}S"


@pytest.mark.parametrize("make", [lambda: _summary(written()), lambda: _summary(written("open", cost=True)),
                                  lambda: _summary(path=GOLDEN), lambda: _summary(hand_made_v2(16))],
                         ids=["closed", "open", "golden-sessions", "version-2"])
def test_every_report_validates_and_says_what_the_summary_says(make):
    summary = make()
    export = llmd_reports(summary)
    steps = {s.index: s for s in summary.steps}
    assert [r.stage for r in export.reports] + export.skipped == sorted(steps)
    for report in export.reports:
        assert report.file_name == f"{FILE_PREFIX}{report.stage}.yaml"
        body = yaml.safe_load(yaml.safe_dump(report.body, sort_keys=False))  # as the file is read back
        assert _problems(body) == []
        assert body["version"] == VERSION == "0.2.1"
        _check_figures(body, steps[report.stage])
        assert body["scenario"]["stack"][0]["standardized"]["model"]["name"] == summary.model


def test_the_time_is_the_measured_part_of_the_step():
    """From the step's start plus its warm-up, for duration_s; ISO-8601 strings that stay strings in YAML."""
    data = written()
    data["steps"][1]["started_at"] = 1_700_000_010.0
    step = data["steps"][1]
    body = yaml.safe_load(yaml.safe_dump(llmd_reports(_summary(data)).reports[1].body))
    assert body["run"]["time"] == {"duration": f"PT{step['duration_s']}S", "start": "2023-11-14T22:13:31+00:00",
                                   "end": datetime.datetime.fromtimestamp(
                                       1_700_000_011.0 + step["duration_s"], tz=datetime.timezone.utc).isoformat()}
    assert step["warmup_s"] == 1.0 and _problems(body) == []


def test_a_step_without_requests_gets_no_report():
    export = llmd_reports(_summary(written()))
    assert export.skipped == [3] and 3 not in [r.stage for r in export.reports]


def test_open_loop_gives_the_rate_and_no_concurrency():
    body = llmd_reports(_summary(written("open"))).reports[1].body
    std = body["scenario"]["load"]["standardized"]
    assert std["rate_qps"] == 8 and "concurrency" not in std


def test_sessions_and_the_server_are_reported_as_measured():
    summary = _summary(path=GOLDEN)
    step = summary.steps[1]
    body = llmd_reports(summary).reports[1].body
    sessions = body["results"]["session_performance"]["sessions"]
    assert (sessions["total"], sessions["failed"]) == (step.sessions.ended, step.sessions.failed)
    assert sessions["session_duration"]["p99"] == step.sessions.duration_ms.p99
    assert body["scenario"]["load"]["standardized"]["multi_turn"] == {"enabled": True}
    metrics = body["results"]["observability"]["components"][0]["aggregate"]
    assert metrics["waiting_requests"] == {"units": "count", "mean": step.server.waiting_mean,
                                           "max": step.server.waiting_max}
    assert metrics["cache_hit_rate"]["mean"] == step.prefix_cache.server.hit_rate


def test_what_kneecap_does_not_measure_is_left_out():
    """No engine, hardware, min or stddev, NTPOT, prefix shape or enforced output length is claimed."""
    body = llmd_reports(_summary(path=GOLDEN)).reports[0].body
    text = json.dumps(body)
    for absent in ("inference_engine", "accelerator", "stddev", '"min"', "normalized_time_per_output_token",
                   "prefix_len", "output_seq_len", "incomplete", "keywords"):
        assert absent not in text, absent
    assert body["scenario"]["stack"][0]["standardized"]["tool"] == "unknown"


def test_no_prompt_tokens_means_no_load_block():
    """A server that sends no usage leaves input tokens at 0: not a length, so the required input_seq_len (and
    with it the load block) is left out rather than invented, and the report still validates."""
    data = written()
    for step in data["steps"]:
        step["throughput"]["input_tokens_per_s"] = 0.0
    body = llmd_reports(_summary(data)).reports[0].body
    assert "load" not in body["scenario"] and "input_length" not in body["results"]["request_performance"][
        "aggregate"]["requests"]
    assert _problems(body) == []


def test_the_validation_refuses_a_broken_report():
    """The check is live: a wrong unit kind, a missing required key and an unknown key are each refused."""
    body = llmd_reports(_summary(written())).reports[0].body
    latency = body["results"]["request_performance"]["aggregate"]["latency"]
    latency["time_per_output_token"]["units"] = "ms"
    del body["run"]["uid"]
    body["results"]["request_performance"]["aggregate"]["requests"]["goodput"] = 1
    problems = _problems(body)
    assert any("'uid' is a required property" in p for p in problems)
    assert any("goodput" in p for p in problems)
    assert any("time_per_output_token" in p for p in problems)


def test_the_vendored_schema_is_the_one_named():
    with open(os.path.join(HERE, "llmd_schema", "README.md"), encoding="utf-8") as f:
        assert SCHEMA_COMMIT in f.read()
    assert VALIDATOR.schema["title"] == "Benchmark Report v0.2.1"


# --- the command ---------------------------------------------------------------------------------------------------


def _run_dir(tmp_path, data: dict) -> str:
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps(data), encoding="utf-8")
    return str(run)


def test_cli_writes_one_file_per_step_and_prints_each_path(tmp_path):
    run = _run_dir(tmp_path, written())
    result = CliRunner().invoke(main, ["export", run, "--format", "llm-d"])
    assert result.exit_code == 0, result.output
    paths = result.stdout.split()
    assert paths == [os.path.join(run, "llm-d", f"{FILE_PREFIX}{i}.yaml") for i in range(3)]
    assert "step 3: no request ended" in result.stderr
    summary = _summary(written())
    for i, path in enumerate(paths):
        with open(path, encoding="utf-8") as f:
            body = yaml.safe_load(f)
        assert _problems(body) == []
        _check_figures(body, summary.steps[i])


def test_cli_out_folder(tmp_path):
    run, out = _run_dir(tmp_path, written()), tmp_path / "elsewhere"
    result = CliRunner().invoke(main, ["export", run, "--format", "llm-d", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert sorted(os.listdir(out)) == [f"{FILE_PREFIX}{i}.yaml" for i in range(3)]


@pytest.mark.parametrize("summary, message", [
    ("{not json", "summary.json"),
    (json.dumps({**written(), "steps": [written()["steps"][3]]}), "no step measured a request"),
])
def test_cli_refuses_a_broken_or_empty_run_with_exit_2(tmp_path, summary, message):
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text(summary, encoding="utf-8")
    result = CliRunner().invoke(main, ["export", str(run), "--format", "llm-d"])
    assert result.exit_code == 2 and result.stderr.startswith("Error: ") and message in result.stderr
    assert not (run / "llm-d").exists()


def test_cli_refuses_a_folder_without_summary_and_an_unknown_format(tmp_path):
    result = CliRunner().invoke(main, ["export", str(tmp_path), "--format", "llm-d"])
    assert result.exit_code == 2 and "has no summary.json" in result.stderr
    result = CliRunner().invoke(main, ["export", str(tmp_path), "--format", "guidellm"])
    assert result.exit_code == 2 and "llm-d" in result.stderr
