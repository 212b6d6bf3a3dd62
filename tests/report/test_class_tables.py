"""A mix's classes in report.html and compare.html (``report/class_tables.py``), from a summary's steps."""

from __future__ import annotations

from harness.report.html import compare_html, report_html
from harness.report.validate import as_summary
from tests.kit.summaries import written


def _with_classes(ttft_p95: float) -> dict:
    s = written()
    for st in s["steps"]:
        st["classes"] = [
            {"name": "chat", "weight_share": 0.75, "requests": 75, "share": 0.75, "failed": 0, "error_rate": 0.0,
             "latency_ms": {"ttft": {"count": 75, "p50": 10.0, "p90": 20.0, "p95": ttft_p95, "p99": 40.0},
                            "tpot": {"count": 75, "p50": 5.0, "p90": 6.0, "p95": 7.0, "p99": 8.0}},
             "tokens_per_s_per_user": None, "output_tokens": 100, "slo": [], "slo_passed": None, "sampled": None},
            {"name": "rag", "weight_share": 0.25, "requests": 25, "share": 0.25, "failed": 1, "error_rate": 0.04,
             "latency_ms": {}, "tokens_per_s_per_user": None, "output_tokens": 0,
             "slo": [{"threshold": "error_rate: rate<0.01", "observed": 0.04, "passed": False,
                      "abort_on_fail": False}], "slo_passed": False, "sampled": None}]
    return s


def test_the_report_lists_each_class_of_each_step_with_its_own_slo():
    page = report_html(as_summary(_with_classes(30.0)))
    table = page[page.index("<h2>Classes</h2>"):]
    assert "<td>chat</td><td>75</td><td>75.0%</td><td>75.0%</td><td>0</td><td>30.0</td><td>7.0</td>" in table
    assert "FAILED: error_rate: rate&lt;0.01 (0.04)" in table


def test_compare_shows_each_class_against_the_first_run():
    page = compare_html([("before", as_summary(_with_classes(30.0))), ("after", as_summary(_with_classes(45.0)))])
    table = page[page.index("<h2>Classes</h2>"):]
    assert "<td>chat</td><td>after</td><td>45.0 (+50%)</td><td>7.0 (+0%)</td>" in table, table[:800]
    assert "<h2>Classes</h2>" not in compare_html([("a", as_summary(written())), ("b", as_summary(written()))])
