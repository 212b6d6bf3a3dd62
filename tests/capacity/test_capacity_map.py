"""The capacity map of a sweep (``capacity/capacity_map.py``) and its page (``capacity/sweep_html.py``), on
synthetic summaries: the master's own summary (``tests/kit/summaries.written``) with its steps rewritten."""

from __future__ import annotations

import copy
import json
from html.parser import HTMLParser

import pytest

from harness.capacity.capacity_map import capacity_map, pareto
from harness.capacity.cells import CellOutcome
from harness.capacity.sweep_html import sweep_page
from harness.report.validate import as_summary
from tests.kit.summaries import written

_BASE = {"closed": written(), "open": written("open")}
_BASE_COST = written(cost=True)
SWEEP = {"name": "seqs", "axes": ["max_num_seqs"], "started": 1.7e9, "ended": 1.7e9 + 600, "folder": "sweeps/seqs"}


def _summary(steps: list[tuple], *, slo: bool = True, knee: int | None = None, cost: bool = False,
             mode: str = "closed"):
    """A summary whose steps are (users, tok/s per user p50, output tok/s, slo_passed, reliable, complete); ``knee``:
    the knee's step index."""
    s = copy.deepcopy(_BASE_COST if cost else _BASE[mode])
    key = "rate_rps" if mode == "open" else "users"
    template = s["steps"][0]
    s["steps"] = []
    for i, (users, per_user, tok, passed, reliable, complete) in enumerate(steps):
        st = copy.deepcopy(template)
        st.update(index=i, **{key: users}, complete=complete, slo_passed=passed if slo else None,
                  slo=st["slo"] if slo and passed is not None else [])
        if slo and passed is False:
            st["slo"] = [{**st["slo"][0], "observed": 900.0, "passed": False}]
        st["tokens_per_s_per_user"]["p50"] = per_user
        st["throughput"].update(output_tokens_per_s=tok, requests_per_s=tok / 100)
        st["generator"]["reliable"] = reliable
        if cost:
            st["cost"]["flat_per_mtok"] = round(4.2 / (tok * 3600) * 1e6, 6)
        s["steps"].append(st)
    passed = [st[key] for st in s["steps"] if st["slo_passed"]]
    s["slo"] = {"thresholds": ["ttft: p(95)<500"], "passed": True, "max_load_within_slo": max(passed, default=None)} \
        if slo else {"thresholds": [], "passed": None, "max_load_within_slo": None}
    s["knee"].update(found=knee is not None, step_index=knee, **{key: None if knee is None else steps[knee][0]})
    if not cost:
        s.pop("cost", None)
    return as_summary(s)


def _cell(index: int, name: str, summary=None, error: str | None = None) -> CellOutcome:
    return CellOutcome(index=index, name=name, params={"max_num_seqs": index}, run_dir=f"cells/{index:02d}",
                       summary=summary, error=error, exit_code=0 if summary else None)


GOOD = (True, True, True)  # slo passed, reliable, complete


def test_within_slo_is_the_largest_load_with_every_lighter_one_passing():
    s = _summary([(4, 50, 400, *GOOD), (8, 40, 700, *GOOD), (12, 30, 900, False, True, True),
                  (16, 20, 950, True, True, True)], knee=1)
    cell = capacity_map([_cell(1, "a", s)], sweep=SWEEP)["cells"][0]
    w = cell["within_slo"]
    assert (w["load"], w["step"], w["output_tokens_per_s"], w["requests_per_s"]) == (8, 1, 700, 7.0)
    assert w["tokens_per_s_per_user_p50"] == 40
    # the run's own figure counts the pass at 16 past the failure at 12: both said
    assert cell["slo"]["run_max_load_within_slo"] == 16 and "run's own figure is 16" in cell["within_slo_note"]
    assert cell["knee"]["found"] and cell["knee"]["load"] == 8 and cell["knee"]["output_tokens_per_s"] == 700


def test_unreliable_and_incomplete_steps_are_neither_within_slo_nor_on_the_frontier():
    s = _summary([(4, 50, 400, *GOOD), (8, 45, 700, True, False, True), (12, 44, 900, True, True, False)])
    body = capacity_map([_cell(1, "a", s)], sweep=SWEEP)
    cell = body["cells"][0]
    assert cell["within_slo"]["load"] == 4
    assert [(e["load"], "unreliable" in e["why"], "incomplete" in e["why"]) for e in cell["excluded_steps"]] == \
        [(8, True, False), (12, False, True)]
    pts = body["frontier"]["points"]
    assert [(p["load"], p["pareto"], p["within_slo"], p["excluded"] is None) for p in pts] == \
        [(4, True, True, True), (8, False, False, False), (12, False, False, False)]


def test_no_judged_step_within_slo_says_why():
    s = _summary([(4, 50, 400, False, True, True), (8, 40, 700, True, True, True)])
    cell = capacity_map([_cell(1, "a", s)], sweep=SWEEP)["cells"][0]
    assert cell["within_slo"] is None and "lightest judged load (4 users)" in cell["within_slo_note"]


def test_pareto_keeps_only_undominated_points():
    pts = [(10, 100), (20, 90), (15, 80), (30, 50), (5, 100), (30, 40), (20, 90)]
    # (15, 80) is below (20, 90); (5, 100) is matched on y by (10, 100) further right; (30, 40) below (30, 50)
    assert pareto(pts) == [0, 1, 6, 3]
    assert pareto([]) == []


def test_the_frontier_spans_cells_and_labels_each_point():
    a = _summary([(4, 60, 300, *GOOD), (8, 40, 600, *GOOD)])
    b = _summary([(4, 55, 250, *GOOD), (8, 45, 650, *GOOD), (16, 20, 900, *GOOD)])
    front = capacity_map([_cell(1, "seqs=4", a), _cell(2, "seqs=8", b)], sweep=SWEEP)["frontier"]
    labels = [front["points"][i]["label"] for i in front["pareto"]]
    assert labels == ["seqs=8 @ 16 users", "seqs=8 @ 8 users", "seqs=4 @ 4 users"]  # by x: 20, 45, 60
    assert front["x"] == "tokens_per_s_per_user.p50" and front["y"] == "throughput.output_tokens_per_s"


def test_best_cell_for_the_slo_and_the_next_one():
    a = _summary([(4, 60, 300, *GOOD), (8, 40, 600, *GOOD), (12, 30, 700, False, True, True)], cost=True)
    b = _summary([(4, 55, 250, *GOOD), (8, 45, 650, *GOOD), (12, 35, 800, False, True, True)], cost=True)
    c = _summary([(4, 55, 250, *GOOD), (8, 45, 620, False, True, True)], cost=True)
    body = capacity_map([_cell(1, "seqs=4", a), _cell(2, "seqs=8", b), _cell(3, "seqs=16", c)], sweep=SWEEP)
    best = body["best"]
    assert (best["basis"], best["cell"], best["load"], best["next"]["name"]) == ("slo", 2, 8, "seqs=4")
    assert best["line"] == "Best for the SLO: seqs=8 — 8 users within SLO at 650 output tokens/s (next: seqs=4 at " \
                           "8 users)"
    cost = body["cells"][1]["within_slo"]["cost"]
    assert cost["currency"] == "USD" and cost["flat_per_mtok"] == pytest.approx(4.2 / (650 * 3600) * 1e6)


def test_best_cell_without_slo_goes_by_the_knee():
    a = _summary([(4, 60, 300, None, True, True), (8, 40, 600, None, True, True)], slo=False, knee=0)
    b = _summary([(4, 55, 250, None, True, True), (8, 45, 650, None, True, True)], slo=False, knee=1)
    best = capacity_map([_cell(1, "a", a), _cell(2, "b", b)], sweep=SWEEP)["best"]
    assert best["basis"] == "knee" and best["name"] == "b"
    assert best["line"].startswith("Best by the knee (no SLO given): b — knee at 8 users, 650 output tokens/s")
    none = capacity_map([_cell(1, "a", _summary([(4, 60, 300, None, True, True)], slo=False))], sweep=SWEEP)
    assert none["best"]["name"] is None and "no cell found a knee" in none["best"]["line"]


def test_cells_in_users_and_req_s_are_ranked_by_throughput():
    closed = _summary([(4, 60, 300, *GOOD), (32, 40, 600, *GOOD)])
    open_ = _summary([(2.5, 55, 250, *GOOD), (5, 45, 650, *GOOD)], mode="open")
    best = capacity_map([_cell(1, "closed", closed), _cell(2, "open", open_)], sweep=SWEEP)["best"]
    assert (best["name"], best["load"], best["unit"], best["mixed_units"]) == ("open", 5, "req/s", True)
    assert best["line"].endswith("(next: closed at 32 users) (ranked by output tokens/s: the cells' loads are in "
                                 "users and req/s)")


def test_all_cells_failed():
    body = capacity_map([_cell(1, "a", error="the server was not ready at /health within 600 s"),
                         _cell(2, "b", error="boom")], sweep=SWEEP)
    assert body["best"]["basis"] == "none" and body["best"]["line"].startswith("No cell has a result: all 2")
    assert [f["error"] for f in body["failed"]] == ["the server was not ready at /health within 600 s", "boom"]
    assert body["frontier"]["points"] == [] and "no step" in sweep_page(body).lower()
    json.dumps(body)  # sweep.json as is


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.append(tag)
        self.hrefs += [v for k, v in attrs if tag == "a" and k == "href"]


def test_page_has_each_cell_and_escapes_a_hostile_name():
    hostile = "<script>alert('x')</script> $\\frac{a}{"
    a = _summary([(4, 60, 300, *GOOD), (8, 40, 600, *GOOD)], cost=True)
    b = _summary([(4, 55, 250, *GOOD), (8, 45, 650, *GOOD)], cost=True)
    body = capacity_map([_cell(1, "seqs=4", a), _cell(2, hostile, b), _cell(3, "seqs=16", error="<b>died</b>")],
                        sweep=SWEEP)
    page = sweep_page(json.loads(json.dumps(body)))  # what the lead reads back from sweep.json works too
    parser = _Tags()
    parser.feed(page)
    parser.close()
    assert "script" not in parser.tags and "b" not in parser.tags and "svg" in parser.tags
    assert parser.hrefs == ["cells/01/report.html", "cells/02/report.html", "cells/03/report.html"]
    assert "&lt;script&gt;" in page and "seqs=4" in page and "seqs=16" in page and "&lt;b&gt;died" in page
    assert "Best for the SLO: &lt;script&gt;" in page
