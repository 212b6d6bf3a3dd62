"""The live dashboard's inputs without a run: a live summary in the middle of a knee search (sessions and prefix
cache from a real sessions run's summary, a ``search`` block as the search plan writes it), and the page served
from memory in a browser page (``serve``), so the test drives every poll's answer."""

from __future__ import annotations

import copy
import json
import pathlib
from collections.abc import Callable

from harness.web.dashboard import payload
from harness.web.page import PAGE

__all__ = ["BASE", "LINE", "mid_search", "serve"]

BASE = "http://kneecap.test/kneecap/"
"""Where the page is served from memory (never resolved: the browser's route answers it)."""
GOLDEN = pathlib.Path(__file__).resolve().parent.parent / "report" / "golden" / "summary-v3-sessions.json"
LINE = "knee between 24 and 32 users; next: 28"


def _visit(step: int, level: float, why: str, verdict: str, ended: str | None) -> dict:
    return {"step": step, "level": level, "why": why, "verdict": verdict, "ended": ended, "warmup_s": 5.0,
            "warmup": "the plan's"}


def mid_search(*, confirmed: bool = False) -> dict:
    """A live summary 6 levels into a search of 2-256 users, bracketing between 24 and 32; its knee a candidate
    at 24 (``confirmed``: confirmed, the search done)."""
    data = copy.deepcopy(json.loads(GOLDEN.read_text()))
    path = [_visit(0, 2, "start at min", "good", "precision"), _visit(1, 4, "double", "good", "precision"),
            _visit(2, 64, "double", "past", "min_requests"), _visit(3, 32, "halve the bracket", "past", "max_duration"),
            _visit(4, 24, "halve the bracket", "good", "precision"),
            _visit(5, 28, "halve the bracket", "pending", None)]
    data["search"] = {"mode": "search", "unit": "users", "min": 2, "max": 256, "resolution": 2,
                      "state": "done" if confirmed else "bracketing", "bracket": [24, 32],
                      "next": None if confirmed else 28, "line": "knee at 24 users" if confirmed else LINE,
                      "path": path}
    data["stop_reason"] = "knee confirmed at 24" if confirmed else None
    data["knee"] = {**data["knee"], "found": True, "confirmed": confirmed, "step_index": 3, "users": 24,
                    "confidence": "medium" if confirmed else "low", "reason": "ttft p99 broke past 24 users"}
    return data


def serve(page: object, answers: Callable[[], dict]) -> None:
    """Serve the dashboard at ``BASE`` in ``page`` (a Playwright page), each poll answered with ``answers()``'s
    summary as ``/kneecap/live.json`` would say it."""
    table = [{"metric": "ttft (ms)", "count": 120, "p50": 41.5, "p90": 60.25, "p95": 70.0, "p99": 90.125,
              "p999": 99.0, "max": 101.5}]
    history = [{"t": 5.0 * i, "load": 2.0 * (i + 1), "ttft_p50": 20.0 + i, "ttft_p99": 40.0 + 3 * i,
                "tpot_p50": 2.0, "tpot_p99": 3.0 + i / 10} for i in range(6)]

    def live(route: object) -> None:
        body = json.dumps(payload(answers(), history, table, "step 5: 28 users"))
        route.fulfill(body=body, content_type="application/json")  # type: ignore[attr-defined]

    def page_html(route: object) -> None:
        route.fulfill(body=PAGE, content_type="text/html")  # type: ignore[attr-defined]

    page.route(lambda url: url.split("?")[0] == BASE, page_html)  # type: ignore[attr-defined]
    page.route(lambda url: url.split("?")[0] == BASE + "live.json", live)  # type: ignore[attr-defined]
