"""report.html and compare.html from summaries, including a step cut short with no latency data."""

from __future__ import annotations

import json
import tempfile

from harness.report.html import compare_html, write_report
from harness.report.validate import as_summary
from tests.kit.summaries import hand_made_v2


def test_report_survives_a_step_without_data(tmp_path):
    (tmp_path / "summary.json").write_text(json.dumps(hand_made_v2(16)))
    (tmp_path / "requests.jsonl").write_text("".join(json.dumps(
        {"ok": True, "prompt_tokens": 90 + i, "prompt_tokens_target": 100, "output_tokens": 20, "max_tokens": 20})
        + "\n" for i in range(50)))
    page = (tmp_path / write_report(str(tmp_path))).read_text()
    assert "<b id='knee'>Knee: 16 users</b>" in page and page.count("<svg") >= 7
    assert "Prompt tokens" in page and "http_5xx" in page and "<script" not in page


def test_compare_tabulates_knees_and_deltas():
    page = compare_html([("a", as_summary(hand_made_v2(16))), ("b", as_summary(hand_made_v2(24)))])
    assert "<td>16</td>" in page and "<td>24</td>" in page and "(+0%)" in page and page.count("<svg") == 3


def test_the_report_says_why_the_tail_when_the_summary_does(tmp_path):
    s = hand_made_v2(16)
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
    (tmp_path / "summary.json").write_text(json.dumps(hand_made_v2(16)))
    assert "Why the tail" not in (tmp_path / write_report(str(tmp_path))).read_text()


def test_the_report_shows_where_ttft_goes():
    s = hand_made_v2(16)
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
    assert "<h2>Where TTFT goes</h2>" in html  # at a reader's precision: 60.25 -> 60.2, 141.5 -> 142, 8.5 -> 8.50
    assert "<td>60.2</td>" in html and "<td>142</td>" in html and "<td>8.50</td>" in html


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
    assert "per 1M out" not in compare_html([("a", as_summary(hand_made_v2(16))),
                                             ("b", as_summary(hand_made_v2(24)))])  # no cost: block anywhere
    # the report of a priced run whose last step was cut short (no throughput: its figures are null)
    page = (tmp_path / "priced" / write_report(str(tmp_path / "priced"))).read_text()
    assert "<h2>Cost</h2>" in page and "no output throughput at this step" in page


def test_a_step_that_was_not_measured_is_never_drawn_or_tabulated_as_zeros():
    """The master's own summary (``tests.kit.summaries.written``): its last step was cut short before any request
    ended. The curves leave it out (a throughput of 0 there would be a cliff that did not happen); the steps table
    says why it does not count instead of a row of zeros; the answer's chart comes first."""
    import re

    from harness.report import charts
    from harness.report.html import report_html
    from tests.kit.summaries import written

    s = as_summary(written())
    empty = s.steps[-1]
    assert empty.requests == 0 and [st.index for st in charts._steps(s)] == [0, 1]  # step 2: the fleet changed
    page = report_html(s)
    steps = page[page.index("<table id='steps'>"):]
    row = re.search(r"<tr><td>3</td><td>16</td>(.*?)</tr>", steps)
    assert row and "empty: no measured requests" in row.group(1) and "0.0" not in row.group(1), row
    assert page.index("id='capacity'") < page.index("Latency vs load")
    assert "fleet changed during it" in steps  # step 2's row says why it does not count
    assert not re.search(r"<td>-\d", page)  # no negative figure in any table


def test_when_p99_has_too_few_tail_requests_the_report_says_what_p95_says(tmp_path):
    s = hand_made_v2(16)
    p95 = "p95 E2E requests were in flight through a server-wide pause (36 of 36, vs 6% of the rest)"
    s["steps"][2]["tail"] = {"attributions": [
        {"metric": "e2e_s", "quantile": 0.99, "verdict": "too_few", "causes": [], "tests": [],
         "line": "p99 E2E: too few tail requests to attribute (3 above p99 of 300)"},
        {"metric": "e2e_s", "quantile": 0.95, "verdict": "cause", "line": p95, "causes": ["in_pause"], "tests": []}]}
    (tmp_path / "summary.json").write_text(json.dumps(s))
    page = (tmp_path / write_report(str(tmp_path))).read_text()
    assert f"{p95} (too few tail requests to attribute (3 above p99 of 300) at p99)" in page
    assert "<th>E2E tail</th>" in page


def test_a_run_without_sessions_shows_its_prefix_cache_without_empty_session_columns(tmp_path):
    s = hand_made_v2(16)
    for st in s["steps"]:
        st["prefix_cache"] = {"client": {"source": "usage", "cached_share": 0.25}, "server": {"source": "/metrics",
                                                                                              "hit_rate": 0.5}}
    (tmp_path / "summary.json").write_text(json.dumps(s))
    page = (tmp_path / write_report(str(tmp_path))).read_text()
    section = page[page.index("<h2>Prefix cache</h2>"):]
    table = section[:section.index("</table>")]
    assert "session TTFT p99" not in table and "Sessions and prefix cache" not in page
    measured = [st for st in s["steps"] if st["requests"]]
    assert table.count("<td>25.0%</td>") == len(measured) and table.count("<tr>") == len(measured) + 1
