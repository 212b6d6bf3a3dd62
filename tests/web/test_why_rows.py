"""The "why" rows (the "LLM why" tab and the dashboard's why panel), on plain data (the live summary, typed):
fleet changes, clocks, cost, where TTFT went, what the tail shares, the knee; sessions and prefix cache."""

from __future__ import annotations

import json
import pathlib

from harness.analysis.why.decompose import UNKNOWN
from harness.report.validate import as_summary
from harness.summary import Summary
from harness.web.why import cache_rows, knee_rows, sessions_rows, why_rows
from tests.kit.summaries import written

GOLDEN = pathlib.Path(__file__).resolve().parent.parent / "report" / "golden"


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
        {"topic": "fleet", "text": "worker w2 lost: step 3, 4 not judged, level re-run"},
        {"topic": "fleet", "text": "worker w3 joined"},  # before any step: nothing voided
        {"topic": "clock", "text": "worker w2: clock moved +9.0 ms"},
        {"topic": "cost", "text": cost["line"]}]  # said again from its figures: the same line
    assert cost["line"].startswith("cost at 8 users (largest load within SLO): flat ")


def test_ttft_split_of_the_last_judged_step_with_server_histograms():
    server = {"source": "histograms", "ttft": {"p50_ms": [90.0, 80.0, 100.0]}, "queue": {"p50_ms": [40.0, 0, 50]},
              "prefill": {"p50_ms": [45.0, 25.0, 50.0]}}
    rows = why_rows(live([step(1, ttft_split={"client": CLIENT, "server": {"source": UNKNOWN}}),
                          step(2, ttft_split={"client": CLIENT, "server": server}), step(3)]))
    assert rows == [{"topic": "where TTFT goes (step 2)",
                     "text": "p50 ms of 10 requests: ttft 120.0 = headers 2.0 + to first token 118.0; "
                             "new connections 25%; server prefill 45.0, queue 40.0"}]


def test_a_server_that_says_nothing_is_named_so():
    rows = why_rows(live([step(0, ttft_split={"client": CLIENT, "server": {"source": UNKNOWN}})]))
    assert rows[0]["text"].endswith("; server: not reported")
    server = {"source": "histograms", "ttft": {"p50_ms": [90.0, 80.0, 100.0]}, "queue": UNKNOWN, "prefill": UNKNOWN}
    rows = why_rows(live([step(0, ttft_split={"client": CLIENT, "server": server})]))
    assert rows[0]["text"].endswith("; server ttft 90.0")
    from harness.analysis.server import NO_STAGE_DELTA

    rows = why_rows(live([step(0, ttft_split={"client": CLIENT, "server": {"source": NO_STAGE_DELTA}})]))
    assert rows[0]["text"].endswith("; server: not in this step")


def test_tail_rows_only_where_the_tail_has_a_finding():
    def attribution(q: float, verdict: str, line: str) -> dict:
        return {"metric": "ttft_s", "quantile": q, "n_tail": 10, "verdict": verdict, "line": line}

    tail = {"attributions": [attribution(0.99, "cause", "p99 ttft: long prompts (2.1x)"),
                             attribution(0.999, "too_few", "p99.9 ttft: too few requests"),
                             {**attribution(0.99, "cause", "p99 tpot: …"), "metric": "tpot_s"}]}
    rows = why_rows(live([step(5, tail=tail), step(6)]))
    assert rows == [{"topic": "tail p99 ttft (step 5)", "text": "p99 ttft: long prompts (2.1x) (10 tail requests)"}]


def test_the_knee_is_said_with_its_state_and_the_search_with_its_line():
    summary = live([step(0)])  # written(): the knee at 8 users, confirmed, "high", reason "why"
    said = ("Past 8 users, TTFT p99 rose 11.2× (80.0 → 900 ms) while output throughput grew 1% (100 → 101 tokens/s): "
            "past it, more load adds latency, not throughput.")  # the knee's figures in a sentence
    assert knee_rows(summary) == [{"topic": "knee", "text": f"8 users (confirmed, high confidence): {said}"}]
    pending = live([step(0)], knee={**written()["knee"], "confirmed": False, "confidence": "low"})
    line = "knee between 24 and 32 users; next: 28"
    assert knee_rows(pending, {"line": line}) == [
        {"topic": "knee", "text": f"8 users (candidate, not confirmed, low confidence): {said}"},
        {"topic": "search", "text": line}]
    none = live([step(0)], knee={**written()["knee"], "found": False, "users": None, "reason": "no break up to 4"})
    assert knee_rows(none) == [{"topic": "knee", "text": "not found yet: no break up to 4"}]


def test_sessions_and_prefix_cache_figures():
    golden = json.loads((GOLDEN / "summary-v3-sessions.json").read_text())
    last = as_summary(golden).steps[-1]
    figures = dict(sessions_rows(last))
    assert figures["ended"] == "56 (0 failed, 0 ran every turn)" and figures["agent stall"] == "1.35 s a session"
    assert figures["session TTFT"] == "p50 411 / p99 577 ms" and figures["duration"] == "p50 1.8 / p99 1.91 s"
    cache = dict(cache_rows(last.prefix_cache))
    assert cache["client"].startswith("66% of 65,664 prompt tokens cached, 164 requests (usage.")
    assert cache["server"].startswith("hit rate 65% of 57,998 queried tokens (/metrics")
    blank = as_summary({**golden, "steps": [{**golden["steps"][-1], "prefix_cache": {
        "client": {"source": "usage.x", "note": "not reported by the endpoint"},
        "server": {"source": "/metrics y", "note": "not reported by the endpoint"}}}]})
    assert cache_rows(blank.steps[0].prefix_cache) == [["client", "not reported by the endpoint (usage.x)"],
                                                       ["server", "not reported by the endpoint (/metrics y)"]]
