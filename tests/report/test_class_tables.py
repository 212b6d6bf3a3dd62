"""A mix's classes in report.html and compare.html (``report/class_tables.py``), from a summary's steps."""

from __future__ import annotations

from harness.report.html import compare_html, report_html
from harness.report.validate import as_summary
from tests.kit.summaries import with_classes, written


def test_the_report_lists_each_class_of_each_step_with_its_own_slo():
    page = report_html(as_summary(with_classes(30.0)))
    table = page[page.index("<h2>Classes</h2>"):]
    assert "<td>chat</td><td>75</td><td>75.0%</td><td>75.0%</td><td>0</td><td>30.0</td><td>7.0</td>" in table
    assert "FAILED: error_rate: rate&lt;0.01 (0.04)" in table


def test_compare_shows_each_class_against_the_first_run():
    page = compare_html([("before", as_summary(with_classes(30.0))), ("after", as_summary(with_classes(45.0)))])
    table = page[page.index("<h2>Classes</h2>"):]
    assert "<td>chat</td><td>after</td><td>45.0 (+50%)</td><td>7.0 (+0%)</td>" in table, table[:800]
    assert "<h2>Classes</h2>" not in compare_html([("a", as_summary(written())), ("b", as_summary(written()))])
