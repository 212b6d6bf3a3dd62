"""The live dashboard's data (``/kneecap/live.json``): everything ``page.py`` draws, decided here so that the
page's script only draws and tests read the decisions without a browser.

From the live summary as a dict (its optional ``search`` block, the knee search's bracket and path, is read
raw: a staircase or constant run has none), the live windows (``LiveRun.history``) and the percentile rows.
The knee is shown only once it is confirmed or the run has ended: a candidate the next step refutes would
otherwise appear and vanish.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from msgspec import UnsetType

from harness.analysis.counted import not_counted
from harness.analysis.mix.classes import class_figures, mix_step
from harness.metrics.vocabulary import LIVE, PERCENTILES
from harness.report.validate import as_summary
from harness.summary import Step, Summary, level_unit
from harness.web.why import cache_rows, knee_rows, sessions_rows, why_rows

__all__ = ["COLUMNS", "MAX_HISTORY", "payload", "search_panel", "shown_knee"]

COLUMNS = ("count", *PERCENTILES, "max")
"""The percentile table's columns after ``metric`` (the LLM tab's and the page's): nothing but numbers."""
MAX_HISTORY = 1440
"""Windows sent to the page: 2 h at the default 5 s window (older ones leave the over-time chart)."""
PATH_KEYS = ("step", "level", "why", "verdict", "ended", "warmup_s", "warmup")


def payload(data: dict, history: Sequence[dict], table: list[dict], status: str) -> dict:
    """What the page draws: header, charts' points, percentile table, why, sessions, prefix cache, search."""
    summary = as_summary(data, "the live summary", walk=False)
    search = data.get("search") if isinstance(data.get("search"), dict) else None
    knee = shown_knee(summary)
    return {"title": f"kneecap {summary.scenario}: run {summary.run_id}", "unit": level_unit(summary.mode),
            "status": status, "stop_reason": summary.stop_reason, "knee": knee,
            "headline": _headline(summary, search, knee), "history": history[-MAX_HISTORY:],
            "live": list(LIVE), "steps": _step_points(summary), "slo": _slo_lines(summary),
            "columns": ["metric", *COLUMNS], "table": table,
            "why": knee_rows(summary, search) + why_rows(summary), "sessions": _sessions_panel(summary),
            "classes": _classes_panel(summary),
            "prefix_cache": _cache_panel(summary), "search": search_panel(summary, search)}


def shown_knee(summary: Summary) -> dict | None:
    """The knee to show: confirmed, or the last word of an ended run; else None."""
    knee = summary.knee
    if not knee.found or knee.level is None or not (knee.confirmed or summary.stop_reason):
        return None
    return {"level": knee.level, "step": knee.step_index, "confidence": knee.confidence, "confirmed": knee.confirmed}


def _headline(summary: Summary, search: dict | None, knee: dict | None) -> str:
    unit = level_unit(summary.mode)
    if knee is not None:
        said = "" if knee["confirmed"] else ", not confirmed: the run ended"
        return f"knee: {knee['level']:g} {unit} ({knee['confidence'] or 'no'} confidence{said})"
    if search and search.get("line"):
        return str(search["line"])
    return "no knee found" if summary.stop_reason else "no knee yet"


def _step_points(summary: Summary) -> list[dict]:
    """Each step's p50/p99 of the live metrics (``metrics.vocabulary.LIVE``) and its throughput, by load, for the
    charts against load (not the steps the fleet changed under: their level was re-run; nor a step without requests
    yet)."""
    out = []
    for s in summary.steps:
        if s.fleet_changed or not s.requests:
            continue
        point: dict = {"index": s.index, "level": s.level, "complete": s.complete,
                       "tokens_per_s": s.throughput.output_tokens_per_s, "goodput_per_s": s.throughput.goodput_per_s}
        for metric in LIVE:
            block = s.latency_ms.get(metric)
            if block is not None and block.count:
                point[f"{metric}_p50"], point[f"{metric}_p99"] = block.p50, block.p99
        out.append(point)
    return sorted(out, key=lambda p: p["level"])  # a search visits levels in any order; the charts go by load


def _slo_lines(summary: Summary) -> list[dict]:
    """The latency thresholds ("ttft: p(95)<500") as lines on their metric's chart."""
    out = []
    for t in summary.slo.thresholds:
        name, _, rule = t.partition(": ")
        try:
            out.append({"metric": name, "ms": float(rule.split("<")[-1].lstrip("=")), "label": f"SLO {rule}"})
        except ValueError:  # not a latency bound ("rate<0.01" is: its chart is not drawn)
            continue
    return out


def _latest(summary: Summary, has: str, informative: str) -> Step | None:
    """The latest step with block ``has``, preferring one where ``informative`` (a predicate's name) holds."""
    steps = [s for s in summary.steps if getattr(s, has)]
    return next((s for s in reversed(steps) if _INFORMATIVE[informative](s)), steps[-1] if steps else None)


_INFORMATIVE = {
    "ended": lambda s: s.sessions.ended > 0,  # the running step has none ended at its start
    "counted": lambda s: bool(s.prefix_cache.client.requests or s.prefix_cache.server.queries),
}


def _sessions_panel(summary: Summary) -> dict | None:
    step = _latest(summary, "sessions", "ended")
    if step is None:
        return None
    s = step.sessions
    assert not isinstance(s, UnsetType)  # _latest gives a step with sessions
    by_turn = step.prefix_cache.client.by_turn if step.prefix_cache else None
    turns = [{"turn": label, "calls": t.calls, "ok": t.ok,
              "ttft_p50": t.ttft_ms.p50 if t.ttft_ms else None, "ttft_p99": t.ttft_ms.p99 if t.ttft_ms else None,
              "cached": by_turn.get(label) if isinstance(by_turn, dict) else None}
             for label, t in s.by_turn.items()]
    return {"step": step.index, "level": step.level, "figures": sessions_rows(step), "turns": turns}


def _classes_panel(summary: Summary) -> dict | None:
    """A mix's classes at the knee's step, else the last judged one: one figure per class (``analysis.mix.classes``)."""
    step = mix_step(summary)
    if step is None:
        return None
    return {"step": step.index, "level": step.level, "figures": [list(f) for f in class_figures(step)]}


def _cache_panel(summary: Summary) -> dict | None:
    step = _latest(summary, "prefix_cache", "counted")
    if step is None:
        return None
    assert not isinstance(step.prefix_cache, UnsetType)  # _latest gives a step with a prefix cache
    return {"step": step.index, "level": step.level, "figures": cache_rows(step.prefix_cache)}


def search_panel(summary: Summary, search: dict | None) -> dict:
    """The knee search as the plan says it (bracket, next level, the levels tried and their verdicts); without a
    search (staircase, constant), the steps as good or past the knee."""
    if search:
        path: list[dict[str, Any]] = [{k: p.get(k) for k in PATH_KEYS} for p in search.get("path") or ()
                                      if isinstance(p, dict)]
        return {"mode": search.get("mode"), "unit": search.get("unit") or level_unit(summary.mode),
                "state": search.get("state"), "line": search.get("line") or "", "min": search.get("min"),
                "max": search.get("max"), "resolution": search.get("resolution"), "bracket": search.get("bracket"),
                "next": search.get("next"), "path": path}
    unit = level_unit(summary.mode)
    voided = {s.level for s in summary.steps if s.fleet_changed}
    path = [{"step": s.index, "level": s.level, "verdict": _verdict(s, summary), "ended": None,
             "why": "start" if not i else "re-run: the fleet changed" if s.level in voided and not s.fleet_changed
             else "the next level up", "warmup_s": s.warmup_s, "warmup": "the plan's"}
            for i, s in enumerate(summary.steps)]
    levels = [p["level"] for p in path]
    knee = shown_knee(summary)
    tried = f"{len({*levels})} level{'s' if len({*levels}) != 1 else ''} tried"
    line = (f"staircase: {tried}; " + (f"knee at {knee['level']:g} {unit}" if knee else
                                       "no knee found" if summary.stop_reason else "no knee yet"))
    state = ("done" if knee else "no knee") if summary.stop_reason else "growing"
    return {"mode": "open staircase" if summary.mode == "open" else "staircase", "unit": unit, "state": state,
            "line": line, "min": min(levels, default=None), "max": max(levels, default=None), "resolution": None,
            "bracket": None, "next": None, "path": path}


def _verdict(step: Step, summary: Summary) -> str:
    """A staircase step against the knee found so far (the knee is the last good step)."""
    if not step.complete and not step.fleet_changed:
        return "not judged" if summary.stop_reason else "pending"  # an ended run cut it short
    if not_counted(step) is not None:
        return "not judged"
    knee = summary.knee
    return "past" if knee.found and knee.step_index is not None and step.index > knee.step_index else "good"
