"""The "LLM" and "LLM why" tabs and the ``/kneecap/`` routes on Locust's Flask app (see the package docstring)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol

from flask import Blueprint, Response, redirect, request
from msgspec import UnsetType

from harness.analysis.ledger import Ledger
from harness.analysis.plain import rounded
from harness.analysis.steps import StepInfo, step_health
from harness.metrics.aggregate import summarize_sketch
from harness.report.validate import as_summary
from harness.summary import Summary, level_unit
from harness.web.dashboard import COLUMNS, payload
from harness.web.page import PAGE
from harness.web.why import cache_rows, knee_rows, sessions_text, why_rows

__all__ = ["LiveRun", "llm_rows", "register", "status_line", "why_tab_rows"]


class LiveRun(Protocol):
    """What the pages read of a running master (``load/run_view.py`` serves it): declared here, so that web/ needs
    nothing of load/."""

    @property
    def ledger(self) -> Ledger: ...
    @property
    def stop_reason(self) -> str | None: ...
    @property
    def history(self) -> Sequence[dict]: ...
    def summary_json(self) -> dict: ...

_SKETCHES = (("ttft", "ttft (ms)", 1000.0), ("tpot", "tpot (ms)", 1000.0), ("itl", "itl (ms)", 1000.0),
             ("e2e", "e2e (ms)", 1000.0), ("tokens_per_s", "tokens/s per user", 1.0),
             ("session_ttft", "session ttft (ms)", 1000.0), ("session_duration", "session duration (ms)", 1000.0),
             ("session_model_time", "session time on the endpoint (ms)", 1000.0),
             ("session_context", "session final context (tokens)", 1.0))


def _shown_step(view: LiveRun) -> StepInfo | None:
    """The running step; once the run ended in a step's warm-up (a knee confirmed just after the next step began),
    the last step with a measured request, whose figures the page then keeps showing."""
    ledger = view.ledger
    cur = ledger.current
    if cur is None or view.stop_reason is None or ledger.measured(cur.index).requests:
        return cur
    return next((s for s in reversed(ledger.steps) if ledger.measured(s.index).requests), cur)


def llm_rows(view: LiveRun) -> list[dict]:
    """The running step's merged percentiles (from the fleet's sketches, not Locust's rounded ones): one row a
    metric that has data, every column after ``metric`` a number."""
    ledger = view.ledger
    step = _shown_step(view)
    if step is None:
        return []
    b = ledger.measured(step.index)
    rows = []
    for name, label, scale in _SKETCHES:
        s = b.sketches.get(name)
        if s is not None and s.count:
            figures = summarize_sketch(s, scale)
            rows.append({"metric": label, **{c: rounded(figures[c]) for c in COLUMNS}})  # a reader's precision
    return rows


def status_line(view: LiveRun) -> str:
    """The running step: its level, requests, goodput, failures, and whether its generator was reliable."""
    ledger = view.ledger
    step = _shown_step(view)
    if step is None:
        return "waiting for the first step"
    b = ledger.measured(step.index)
    state = ledger.state(step.index)
    gen = state.generator if state is not None else None
    reliable = "reliable" if gen is None or step_health(gen, b).reliable else "NOT reliable (lagging)"
    ended = f"; run ended: {view.stop_reason}" if view.stop_reason else ""
    return (f"step {step.index}: {step.level:g} {level_unit(ledger.mode)}, {b.requests} requests ({b.good} good, "
            f"{sum(b.failures.values())} failed), generator {reliable}{ended}")


def why_tab_rows(view: LiveRun, summary: Summary, search: dict | None) -> list[dict]:
    """The "LLM why" tab: the step, the knee, the why rows, the latest sessions and prefix cache, the dashboard."""
    rows = [{"topic": "step", "text": status_line(view)}, *knee_rows(summary, search), *why_rows(summary)]
    sessions = next((s for s in reversed(summary.steps) if s.sessions and s.sessions.ended), None)
    if sessions is not None:
        rows.append({"topic": f"sessions (step {sessions.index})", "text": sessions_text(sessions)})
    cache = next((s for s in reversed(summary.steps) if s.prefix_cache and (
        s.prefix_cache.client.requests or s.prefix_cache.server.queries)), None)
    if cache is not None and not isinstance(cache.prefix_cache, UnsetType):  # set: the step was picked for it
        said = cache_rows(cache.prefix_cache)
        rows.append({"topic": f"prefix cache (step {cache.index})", "text": "; ".join(f"{k}: {v}" for k, v in said)})
    rows.append({"topic": "dashboard", "text": "live charts, the search and these rows: ./kneecap/"})
    return rows


def _search(data: dict) -> dict | None:
    return data.get("search") if isinstance(data.get("search"), dict) else None


def register(environment: Any, view: LiveRun) -> None:
    web = environment.web_ui
    if web is None:
        return
    web.template_args["extended_tabs"] = [{"title": "LLM", "key": "llm"}, {"title": "LLM why", "key": "llm_why"}]
    web.template_args["extended_tables"] = [
        {"key": "llm", "structure": [{"key": "metric", "title": "LLM metric"},
                                     *({"key": c, "title": c} for c in COLUMNS)]},
        {"key": "llm_why", "structure": [{"key": "topic", "title": "topic"}, {"key": "text", "title": "why"}]}]
    web.template_args["extended_csv_files"] = [
        {"href": "./kneecap/", "title": "kneecap live dashboard: charts, knee search, why, sessions"},
        {"href": "./kneecap/summary.json", "title": "kneecap summary.json (live)"}]
    auth = getattr(web, "auth_required_if_enabled", lambda f: f)
    bp = Blueprint("kneecap", __name__)

    @web.app.after_request
    def add_llm_tabs(response: Response) -> Response:
        if request.path.endswith("/stats/requests") and response.is_json:
            data = response.get_json()
            live = view.summary_json()
            summary = as_summary(live, "the live summary", walk=False)  # ~1 ms, as summary.json says it
            data["extended_stats"] = [{"key": "llm", "data": llm_rows(view)},
                                      {"key": "llm_why", "data": why_tab_rows(view, summary, _search(live))}]
            response.set_data(json.dumps(data))
        return response

    @bp.route("/kneecap/")
    @auth
    def dashboard() -> Response:
        return Response(PAGE, mimetype="text/html")

    @bp.route("/kneecap/live.json")
    @auth
    def live_json() -> Response:
        data = payload(view.summary_json(), view.history, llm_rows(view), status_line(view))
        return Response(json.dumps(data, default=str), mimetype="application/json")

    @bp.route("/kneecap/charts")
    def charts() -> Any:
        return redirect("./", code=302)  # the old server-rendered chart page: the dashboard draws it live

    @bp.route("/kneecap/summary.json")
    @auth
    def live_summary() -> Response:
        return Response(json.dumps(view.summary_json(), default=str), mimetype="application/json")

    # Under Locust's --web-base-path its own routes move; ours move with them (the tabs' links are relative).
    web.app.register_blueprint(bp, url_prefix=getattr(environment.parsed_options, "web_base_path", None) or None)
