"""The LLM tab's "why" rows, on plain data (the live summary, typed): fleet changes, clocks, cost, where TTFT
went, what the tail shares."""

from __future__ import annotations

from harness.analysis.decompose import UNKNOWN
from harness.analysis.summary_model import Summary
from harness.report.validate import as_summary
from harness.web.ui import why_rows
from tests.kit.summaries import written


def stat(p50: float) -> dict:
    return {"n": 10, "mean_ms": p50, "p50_ms": p50, "p95_ms": p50 * 2}


CLIENT = {"ttft": stat(120.0), "headers": stat(2.0), "headers_to_first_token": stat(118.0), "connect": None,
          "new_connection_share": 0.25}


def step(index: int, **kw) -> dict:
    """A judged step of the master's summary, with ``kw`` (its ``ttft_split``, ``tail``)."""
    return {**written()["steps"][0], "index": index, **kw}


def live(steps: list[dict], **top) -> Summary:
    """The live summary with these steps (no fleet event unless given), typed as the LLM tab reads it."""
    return as_summary({**written(), "fleet_events": [], "steps": steps, **top})


def test_nothing_to_say_before_a_step_is_judged():
    assert why_rows(live([step(0)])) == []


def test_fleet_events_clock_warnings_and_the_cost_line_are_said():
    cost = written(cost=True)["cost"]
    summary = live([], fleet_events=[{"kind": "lost", "worker": "w2", "at": 0.0, "steps": [3, 4]},
                                     {"kind": "joined", "worker": "w3", "at": 0.0, "steps": []}],
                   clocks={}, clock_warnings=["worker w2: clock moved +9.0 ms"], cost=cost)
    assert why_rows(summary) == [
        {"metric": "fleet: worker w2 lost", "count": "step 3, 4", "p50": "not judged, level re-run"},
        {"metric": "fleet: worker w3 joined", "count": "", "p50": ""},  # before any step: nothing voided
        {"metric": "clock", "p50": "worker w2: clock moved +9.0 ms"},
        {"metric": "cost", "p50": cost["line"]}]  # said again from its figures: the same line
    assert cost["line"].startswith("cost at 8 users (largest load within SLO): flat ")


def test_ttft_split_of_the_last_judged_step_with_server_histograms():
    server = {"source": "histograms", "ttft": {"p50_ms": [90.0, 80.0, 100.0]}, "queue": {"p50_ms": [40.0, 0, 50]},
              "prefill": {"p50_ms": [45.0, 25.0, 50.0]}}
    rows = why_rows(live([step(1, ttft_split={"client": CLIENT, "server": {"source": UNKNOWN}}),
                          step(2, ttft_split={"client": CLIENT, "server": server}), step(3)]))
    assert rows == [{"metric": "where TTFT goes, p50 ms (step 2)", "count": 10, "p50": "ttft 120.0",
                     "p90": "headers 2.0", "p95": "to first token 118.0", "p99": "new conn 25%",
                     "p999": "server prefill 45.0, queue 40.0"}]


def test_a_server_that_says_nothing_is_named_so():
    rows = why_rows(live([step(0, ttft_split={"client": CLIENT, "server": {"source": UNKNOWN}})]))
    assert rows[0]["p999"] == "server: not reported"
    server = {"source": "histograms", "ttft": {"p50_ms": [90.0, 80.0, 100.0]}, "queue": UNKNOWN, "prefill": UNKNOWN}
    rows = why_rows(live([step(0, ttft_split={"client": CLIENT, "server": server})]))
    assert rows[0]["p999"] == "server ttft 90.0"
    from harness.analysis.server import NO_STAGE_DELTA

    rows = why_rows(live([step(0, ttft_split={"client": CLIENT, "server": {"source": NO_STAGE_DELTA}})]))
    assert rows[0]["p999"] == "server: not in this step"


def test_tail_rows_only_where_the_tail_has_a_finding():
    def attribution(q: float, verdict: str, line: str) -> dict:
        return {"metric": "ttft_s", "quantile": q, "n_tail": 10, "verdict": verdict, "line": line}

    tail = {"attributions": [attribution(0.99, "cause", "p99 ttft: long prompts (2.1x)"),
                             attribution(0.999, "too_few", "p99.9 ttft: too few requests"),
                             {**attribution(0.99, "cause", "p99 tpot: …"), "metric": "tpot_s"}]}
    rows = why_rows(live([step(5, tail=tail), step(6)]))
    assert rows == [{"metric": "tail p99 ttft (step 5)", "count": 10, "p50": "p99 ttft: long prompts (2.1x)"}]
