"""The LLM tab and ``/kneecap/charts`` (see package docstring), from the live summary typed as summary.json is
(``analysis.summary_model.Summary``)."""

from __future__ import annotations

import html
import json
from typing import TYPE_CHECKING, Any

from flask import Blueprint, Response, request

from harness.analysis.decompose import UNKNOWN
from harness.analysis.results import level_unit
from harness.analysis.summary_model import SplitPart, Summary, TtftSplit
from harness.metrics.aggregate import summarize_sketch
from harness.report.validate import as_summary

if TYPE_CHECKING:
    from harness.load.master import RunView

__all__ = ["llm_rows", "register", "why_rows"]

_COLUMNS = ("metric", "count", "p50", "p90", "p95", "p99", "p999")


def llm_rows(view: RunView) -> list[dict]:
    """Rows of the LLM tab: the current step's merged percentiles (ms), speed, goodput, step, knee, and why."""
    ledger = view.ledger
    step = ledger.current
    if step is None:
        return [{"metric": "waiting for the first step"}]
    b = ledger.measured(step.index)
    rows = []
    for metric in ("ttft", "tpot", "itl", "e2e"):
        s = b.sketches.get(metric)
        if s is not None and s.count:
            rows.append({"metric": f"{metric} (ms)", **{c: v for c, v in summarize_sketch(s).items() if c in _COLUMNS}})
    speed = b.sketches.get("tokens_per_s")
    if speed is not None and speed.count:
        rows.append({"metric": "tokens/s per user", **{c: v for c, v in summarize_sketch(speed, 1.0).items()
                                                       if c in _COLUMNS}})
    state = ledger.state(step.index)
    gen = state.generator if state is not None else None
    reliable = gen.health().reliable if gen else "n/a"
    unit = level_unit(ledger.mode)
    rows.append({"metric": f"step {step.index}: {step.level:g} {unit}", "count": b.requests,
                 "p50": f"goodput {b.good} ok", "p90": f"failures {sum(b.failures.values())}",
                 "p95": f"generator reliable: {reliable}"})
    summary = as_summary(view.summary_json(), "the live summary", walk=False)  # ~1 ms, as summary.json says it
    knee = summary.knee
    rows.append({"metric": "knee", "count": f"{knee.level:g} {unit}" if knee.found else "not yet",
                 "p50": knee.confidence or "", "p90": knee.reason[:400]})
    rows += why_rows(summary)
    rows.append({"metric": "charts", "p50": "/kneecap/charts"})
    return rows


def why_rows(summary: Summary) -> list[dict]:
    """What the console says beside the numbers, from the live summary: fleet changes (the steps they voided),
    clock warnings, the cost line (from its figures), and for the last judged step where its TTFT went and what
    its tail requests share (``analysis/decompose.py``, ``analysis/tail.py``)."""
    rows = []
    for e in summary.fleet_events:
        rows.append({"metric": f"fleet: worker {e.worker} {e.kind}",
                     "count": f"step {', '.join(map(str, e.steps))}" if e.steps else "",
                     "p50": "not judged, level re-run" if e.steps else ""})
    rows += [{"metric": "clock", "p50": note} for note in summary.clock_warnings or ()]
    if summary.cost_line:
        rows.append({"metric": "cost", "p50": summary.cost_line})
    split = next((s for s in reversed(summary.steps) if s.ttft_split), None)
    if split is not None:
        rows.append({"metric": f"where TTFT goes, p50 ms (step {split.index})", **_split_cells(split.ttft_split)})
    tail = next((s for s in reversed(summary.steps) if s.tail), None)
    for a in tail.tail.attributions if tail is not None else ():
        if a.metric == "ttft_s" and a.verdict in ("cause", "time"):
            rows.append({"metric": f"tail p{a.quantile * 100:g} ttft (step {tail.index})", "count": a.n_tail,
                         "p50": a.line[:200]})
    return rows


def _split_cells(split: TtftSplit) -> dict:
    def ms(part: SplitPart | str | None) -> str:
        v = part.p50 if isinstance(part, SplitPart) else None  # server histograms: the estimate
        return "n/a" if v is None else f"{v:.1f}"

    c, srv = split.client, split.server
    share = c.new_connection_share
    cells = {"count": c.ttft.n if c.ttft and c.ttft.n is not None else 0, "p50": f"ttft {ms(c.ttft)}",
             "p90": f"headers {ms(c.headers)}", "p95": f"to first token {ms(c.headers_to_first_token)}",
             "p99": f"new conn {'n/a' if share is None else f'{share:.0%}'}"}
    if isinstance(srv.prefill, SplitPart):
        cells["p999"] = f"server prefill {ms(srv.prefill)}" + (
            f", queue {ms(srv.queue)}" if isinstance(srv.queue, SplitPart) else "")
    elif isinstance(srv.ttft, SplitPart):
        cells["p999"] = f"server ttft {ms(srv.ttft)}"
    else:  # the endpoint does not say, or did but not within this step (``analysis/server.NO_STAGE_DELTA``)
        cells["p999"] = "server: not reported" if (srv.source or UNKNOWN) == UNKNOWN else "server: not in this step"
    return cells


def _charts_page(view: RunView) -> str:
    from harness.report import charts  # matplotlib (~0.3 s of imports) on the first chart page, not at start-up

    summary = as_summary(view.summary_json(), "the live summary", walk=False)
    knee = summary.knee
    marker = (f"<p id='knee'>Knee: {knee.level:g} ({html.escape(str(knee.confidence))})</p>"
              if knee.found else "<p id='knee'>Knee: not found yet</p>")
    parts = [f"<h1>kneecap {html.escape(summary.scenario)} — run {html.escape(summary.run_id)}</h1>", marker]
    if len(view.history) >= 2:
        parts.append(charts.over_time(view.history))
    if summary.steps:
        parts += [charts.latency_vs_load(summary, "ttft"), charts.latency_vs_load(summary, "tpot"),
                  charts.throughput_vs_load(summary)]
    return ("<!doctype html><html><head><meta charset='utf-8'><meta http-equiv='refresh' content='5'>"
            "<title>kneecap charts</title><style>body{font:14px system-ui,sans-serif;margin:20px}"
            "svg{max-width:48%;height:auto;display:inline-block}</style></head><body>" + "".join(parts)
            + "</body></html>")


def register(environment: Any, view: RunView) -> None:
    web = environment.web_ui
    if web is None:
        return
    web.template_args["extended_tabs"] = [{"title": "LLM", "key": "llm"}]
    web.template_args["extended_tables"] = [{"key": "llm", "structure": [
        {"key": "metric", "title": "LLM metric"}, {"key": "count", "title": "count"},
        *({"key": q, "title": q} for q in ("p50", "p90", "p95", "p99", "p999"))]}]
    web.template_args["extended_csv_files"] = [
        {"href": "./kneecap/charts", "title": "kneecap charts: LLM latency over time and vs load"},
        {"href": "./kneecap/summary.json", "title": "kneecap summary.json (live)"}]
    auth = getattr(web, "auth_required_if_enabled", lambda f: f)
    bp = Blueprint("kneecap", __name__)

    @web.app.after_request
    def add_llm_tab(response: Response) -> Response:
        if request.path.endswith("/stats/requests") and response.is_json:
            data = response.get_json()
            data["extended_stats"] = [{"key": "llm", "data": llm_rows(view)}]
            response.set_data(json.dumps(data))
        return response

    @bp.route("/kneecap/charts")
    @auth
    def chart_page() -> Response:
        return Response(_charts_page(view), mimetype="text/html")

    @bp.route("/kneecap/summary.json")
    @auth
    def live_summary() -> Response:
        return Response(json.dumps(view.summary_json(), default=str), mimetype="application/json")

    web.app.register_blueprint(bp)
