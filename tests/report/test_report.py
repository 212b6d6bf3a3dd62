"""report.html and compare.html from summaries, including a step cut short with no latency data."""

from __future__ import annotations

import json
import tempfile

from harness.report.html import compare_html, write_report


def step(index: int, users: int, p99: float | None, tokens: float, server: bool = True) -> dict:
    lat = {} if p99 is None else {m: {"count": 100, "mean": p99 / 2, "p50": p99 / 2, "p90": p99 * 0.8,
                                      "p95": p99 * 0.9, "p99": p99, "p999": p99, "max": p99,
                                      "p99_ci": [p99 * 0.9, p99 * 1.1]} for m in ("ttft", "tpot", "e2e")}
    return {"index": index, "users": users, "duration_s": 20.0, "warmup_s": 5.0, "requests": 0 if p99 is None else 100,
            "ok": 0 if p99 is None else 100, "failures": {} if p99 is None else {"http_5xx": 2}, "warmup_requests": 10,
            "latency_ms": lat, "tokens_per_s_per_user": {"count": 0}, "output_tokens_counted": 0,
            "prompt_length_error": None, "fleet_changed": False, "workers_lost": [], "workers_joined": [],
            "complete": p99 is not None, "slo": [],
            "throughput": {"requests_per_s": 10.0, "output_tokens_per_s": tokens, "input_tokens_per_s": 1.0,
                           "goodput_per_s": 9.0},
            "generator": {"lag_p99_ms": None if p99 is None else 1.0, "lag_max_ms": None, "cpu_max_pct": 0.0,
                          "reliable": True},
            "stationary": None, "slo_passed": None if p99 is None else True,
            **({"server": {"waiting_mean": None if p99 is None else 1.0, "running_max": 8.0,
                           "kv_cache_usage_max": None, "waiting_max": 2.0, "preemptions": None}} if server else {})}


def summary(knee_users: int) -> dict:
    return {"schema": "kneecap.summary/2", "run_id": "r", "scenario": "s", "model": "m", "host": "h", "mode": "closed",
            "workers": 2, "started_at": 0, "ended_at": 60, "exit_code": 0, "stop_reason": "knee confirmed",
            "degraded": False, "fleet_events": [],
            "steps": [step(0, 8, 50.0, 1000), step(1, 16, 60.0, 1900), step(2, 24, 900.0, 2000),
                      step(3, 32, None, 0.0)],
            "knee": {"found": True, "confirmed": True, "step_index": 1, "users": knee_users, "confidence": "high",
                     "metric": "ttft", "tail": "p99_slo", "reason": "why", "p99_before_ms": 60.0, "p99_after_ms": 900.0,
                     "throughput_before": 1900.0, "throughput_after": 2000.0},
            "slo": {"thresholds": ["ttft: p(95)<500"], "passed": True, "max_load_within_slo": 16}}


def test_report_survives_a_step_without_data(tmp_path):
    (tmp_path / "summary.json").write_text(json.dumps(summary(16)))
    (tmp_path / "requests.jsonl").write_text("".join(json.dumps(
        {"ok": True, "prompt_tokens": 90 + i, "prompt_tokens_target": 100, "output_tokens": 20, "max_tokens": 20})
        + "\n" for i in range(50)))
    page = (tmp_path / write_report(str(tmp_path))).read_text()
    assert "<b id='knee'>Knee: 16 users</b>" in page and page.count("<svg") >= 7
    assert "Prompt tokens" in page and "http_5xx" in page and "<script" not in page


def test_compare_tabulates_knees_and_deltas():
    page = compare_html([("a", summary(16)), ("b", summary(24))])
    assert "<td>16</td>" in page and "<td>24</td>" in page and "(+0%)" in page and page.count("<svg") == 3


def test_the_report_says_why_the_tail_when_the_summary_does(tmp_path):
    s = summary(16)
    line = "p99 TTFT requests had 4.1× longer prompts (median 3,900 vs 950 tokens): the tail is prefill-bound"
    s["steps"][2]["tail"] = {"attributions": [
        {"metric": "ttft_s", "quantile": 0.99, "verdict": "cause", "line": line, "causes": ["prompt_tokens"],
         "tests": [{"feature": "prompt_tokens", "tail_value": 3900, "rest_value": 950}]},
        {"metric": "ttft_s", "quantile": 0.95, "verdict": "none", "line": "p95 TTFT: no single cause", "causes": [],
         "tests": []}]}
    (tmp_path / "summary.json").write_text(json.dumps(s))
    page = (tmp_path / write_report(str(tmp_path))).read_text()
    assert "<h2>Why the tail</h2>" in page and "4.1× longer prompts" in page and "p95 TTFT" not in page
    assert "prompt tokens (median)" in page and "the tail against the rest" in page  # the first feature's chart
    (tmp_path / "summary.json").write_text(json.dumps(summary(16)))
    assert "Why the tail" not in (tmp_path / write_report(str(tmp_path))).read_text()


def test_the_report_shows_where_ttft_goes():
    s = summary(16)
    s["steps"][1]["ttft_split"] = {
        "client": {"ttft": {"n": 100, "mean_ms": 150.0}, "headers": {"n": 100, "mean_ms": 4.0},
                   "headers_to_first_token": {"n": 100, "mean_ms": 146.0}, "connect": None,
                   "new_connection_share": 0.0},
        "server": {"source": "per step: the server's /metrics histograms", "ttft": {"count": 90, "mean_ms": 141.5},
                   "queue": {"count": 90, "mean_ms": 60.25}, "prefill": {"count": 90, "mean_ms": 78.0},
                   "network_client": {"mean_ms": 8.5}}}
    with tempfile.TemporaryDirectory() as d:
        with open(f"{d}/summary.json", "w") as f:
            f.write(json.dumps(s))
        with open(write_report(d)) as f:
            html = f.read()
    assert "<h2>Where TTFT goes</h2>" in html and "60.25" in html and "141.5" in html and "8.5" in html


def test_compare_shows_cost_per_1m_tokens_at_each_runs_knee(tmp_path):
    from click.testing import CliRunner

    from harness.cli import main
    from tests.kit.summaries import written

    for name, s in (("priced", written(cost=True)), ("plain", written())):
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(json.dumps(s))
    knee = written(cost=True)["cost"]["at"]["knee"]
    result = CliRunner().invoke(main, ["compare", str(tmp_path / "priced"), str(tmp_path / "plain"),
                                       "--out", str(tmp_path / "cmp.html")])
    assert result.exit_code == 0, result.output
    page = (tmp_path / "cmp.html").read_text()
    assert "<th>flat per 1M out @ knee</th>" in page and "<th>metered + input per 1M out @ knee</th>" in page
    assert f"<td>{knee['flat_per_mtok']:.4g} USD</td><td>{knee['metered_blended_per_mtok']:.4g} USD</td>" in page
    assert "<td>no cost: block</td>" in page
    assert "per 1M out" not in compare_html([("a", summary(16)), ("b", summary(24))])  # no cost: block anywhere
    # the report of a priced run whose last step was cut short (no throughput: its figures are null)
    page = (tmp_path / "priced" / write_report(str(tmp_path / "priced"))).read_text()
    assert "<h2>Cost</h2>" in page and "no output throughput at this step" in page
