"""The LLM tab's "why" rows, on plain data: fleet changes, where TTFT went, what the tail shares."""

from __future__ import annotations

from types import SimpleNamespace

from harness.analysis.decompose import UNKNOWN
from harness.analysis.results import FleetEvent
from harness.analysis.tail import StepTails, TailAttribution
from harness.web.ui import why_rows


def ledger(**kw) -> SimpleNamespace:
    return SimpleNamespace(**{"fleet_events": [], "judged": {}, "splits": {}, "tails": {}, **kw})


def stat(p50: float) -> dict:
    return {"n": 10, "mean_ms": p50, "p50_ms": p50, "p95_ms": p50 * 2}


CLIENT = {"ttft": stat(120.0), "headers": stat(2.0), "headers_to_first_token": stat(118.0), "connect": None,
          "new_connection_share": 0.25}


def test_nothing_to_say_before_a_step_is_judged():
    assert why_rows(ledger()) == []


def test_fleet_events_name_the_worker_and_the_steps_they_voided():
    rows = why_rows(ledger(fleet_events=[FleetEvent(kind="lost", worker="w2", at=0.0, steps=[3, 4])]))
    assert rows == [{"metric": "fleet: worker w2 lost", "count": "step 3, 4", "p50": "not judged, level re-run"}]


def test_ttft_split_of_the_last_judged_step_with_server_histograms():
    server = {"source": "histograms", "ttft": {"p50_ms": [90.0, 80.0, 100.0]}, "queue": {"p50_ms": [40.0, 0, 50]},
              "prefill": {"p50_ms": [45.0, 25.0, 50.0]}}
    rows = why_rows(ledger(judged={1: object(), 2: object()}, splits={1: None, 2: {"client": CLIENT,
                                                                                   "server": server}}))
    assert rows == [{"metric": "where TTFT goes, p50 ms (step 2)", "count": 10, "p50": "ttft 120.0",
                     "p90": "headers 2.0", "p95": "to first token 118.0", "p99": "new conn 25%",
                     "p999": "server prefill 45.0, queue 40.0"}]


def test_a_server_that_says_nothing_is_named_so():
    rows = why_rows(ledger(judged={0: object()}, splits={0: {"client": CLIENT, "server": {"source": UNKNOWN}}}))
    assert rows[0]["p999"] == "server: not reported"
    server = {"source": "histograms", "ttft": {"p50_ms": [90.0, 80.0, 100.0]}, "queue": UNKNOWN, "prefill": UNKNOWN}
    rows = why_rows(ledger(judged={0: object()}, splits={0: {"client": CLIENT, "server": server}}))
    assert rows[0]["p999"] == "server ttft 90.0"


def test_tail_rows_only_where_the_tail_has_a_finding():
    def attribution(q: float, verdict: str, line: str) -> TailAttribution:
        return TailAttribution(metric="ttft_s", quantile=q, threshold_s=0.5, n=1000, n_tail=10, n_rest=990,
                               verdict=verdict, causes=["prompt_tokens"] if verdict == "cause" else [], line=line)

    tails = StepTails([attribution(0.99, "cause", "p99 ttft: long prompts (2.1x)"),
                       attribution(0.999, "too_few", "p99.9 ttft: too few requests")])
    rows = why_rows(ledger(judged={5: object()}, tails={5: tails}))
    assert rows == [{"metric": "tail p99 ttft (step 5)", "count": 10, "p50": "p99 ttft: long prompts (2.1x)"}]
