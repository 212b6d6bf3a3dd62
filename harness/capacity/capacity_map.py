"""The capacity map of a sweep: per cell its knee, the largest load within SLO and what it carries there, the
Pareto frontier of output tokens/s against tokens/s per user over every cell's steps, and the best cell. Pure.

``capacity_map(cells, sweep=...)`` returns the body of ``sweep.json`` (docs/sweep.md lists its fields)::

    body = capacity_map(outcomes, sweep={"name": "seqs", "axes": [...], "started": ..., "ended": ..., "folder": ...})
    body["best"]["line"]   # "Best for the SLO: max_num_seqs=8 — 24 users within SLO at 1,830 output tokens/s (...)"

Which steps count: the run's own rule (``analysis/counted.py``): a step counts when it measured requests, is
complete, its generator kept time and the fleet did not change under it; any other step is kept in
``frontier.points`` with ``excluded`` saying why, and is neither "within SLO" nor on the frontier. The largest load
within SLO is the run's (``analysis.verdict.within_slo``): the largest level L such that every counted, judged step
at a level <= L met every SLO. A file from before that rule may say otherwise (``slo.max_load_within_slo`` counted
every judged step that passed); the cell then says both.

The frontier's x is each step's median tokens/s per user (``tokens_per_s_per_user.p50``: per request
(n − 1) / (E2E − TTFT), the interactivity a user sees), y its output tokens/s over the measured part. A counted
point is Pareto-optimal when no other counted point is at least as high on both and higher on one.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, overload

from msgspec import UNSET

from harness.analysis.counted import WHY, not_counted
from harness.analysis.verdict import within_slo
from harness.capacity.cells import CellOutcome
from harness.summary import Step, Summary, level_unit

__all__ = ["SCHEMA", "X_FIGURE", "Y_FIGURE", "best_line", "capacity_map", "pareto"]

SCHEMA = "kneecap.sweep/1"
X_FIGURE = "tokens_per_s_per_user.p50"
"""The frontier's x: a step's median per-request streaming speed, (n − 1) / (E2E − TTFT), tokens/s."""
Y_FIGURE = "throughput.output_tokens_per_s"
"""The frontier's y: a step's output tokens/s over its measured part (after warm-up)."""


@dataclass(frozen=True, kw_only=True)
class StepView:
    """One step of one cell as the map counts it."""

    cell: int
    cell_name: str
    step: int
    load: float
    unit: str
    requests_per_s: float
    output_tokens_per_s: float
    per_user: float | None
    """Median tokens/s per user; None when the step streamed no tokens."""
    slo_passed: bool | None
    excluded: str | None
    """Why the step does not count (module docstring); None when it does."""
    cost: dict[str, Any] | None

    @property
    def label(self) -> str:
        return f"{self.cell_name} @ {self.load:g} {self.unit}"


@overload  # a level in, a level out: None only from None
def _level(x: float) -> float: ...
@overload
def _level(x: float | None) -> float | None: ...
def _level(x: float | None) -> float | int | None:
    """A load as the summary file has it: 16, not 16.0 (msgspec reads every level as a float)."""
    return int(x) if x is not None and float(x).is_integer() else x


def _excluded(step: Step) -> str | None:
    why = not_counted(step)
    return None if why is None else WHY[why]


def _cost(step: Step) -> dict[str, Any] | None:
    c = step.cost
    if c is UNSET:
        return None
    return {"currency": c.currency, "flat_per_mtok": c.flat_per_mtok, "metered_per_mtok": c.metered_per_mtok,
            "metered_blended_per_mtok": c.metered_blended_per_mtok, "notes": list(c.notes)}


def _views(cell: CellOutcome, summary: Summary) -> list[StepView]:
    unit = level_unit(summary.mode)
    return [StepView(cell=cell.index, cell_name=cell.name, step=s.index, load=_level(s.level), unit=unit,
                     requests_per_s=s.throughput.requests_per_s,
                     output_tokens_per_s=s.throughput.output_tokens_per_s,
                     per_user=s.tokens_per_s_per_user.p50 if s.tokens_per_s_per_user.count else None,
                     slo_passed=s.slo_passed, excluded=_excluded(s), cost=_cost(s)) for s in summary.steps]


def _within_slo(views: list[StepView]) -> tuple[StepView | None, str]:
    """The step at the largest load within SLO (module docstring) and, when there is none, why."""
    judged = [v for v in views if v.excluded is None and v.slo_passed is not None]
    best = within_slo((v.load, v.step, bool(v.slo_passed)) for v in judged)
    if best is not None:
        return next(v for v in judged if v.step == best[1]), ""
    if not judged:
        return None, "no complete step with a reliable generator was judged against the SLO"
    lightest = min(judged, key=lambda v: v.load)
    return None, f"an SLO failed already at the lightest judged load ({lightest.load:g} {lightest.unit})"


def _at(v: StepView | None) -> dict[str, Any] | None:
    if v is None:
        return None
    return {"load": v.load, "step": v.step, "requests_per_s": v.requests_per_s,
            "output_tokens_per_s": v.output_tokens_per_s, "tokens_per_s_per_user_p50": v.per_user, "cost": v.cost}


def _knee(summary: Summary, views: list[StepView]) -> dict[str, Any]:
    k = summary.knee
    step = next((v for v in views if k.found and v.step == k.step_index), None)
    return {"found": k.found, "confirmed": k.confirmed, "load": _level(k.level) if k.found else None,
            "step": k.step_index if k.found else None, "metric": k.metric, "tail": k.tail,
            "confidence": k.confidence, "reason": k.reason,
            "requests_per_s": step.requests_per_s if step else None,
            "output_tokens_per_s": step.output_tokens_per_s if step else None}


def _cell(cell: CellOutcome, views: list[StepView]) -> dict[str, Any]:
    s = cell.summary
    out: dict[str, Any] = {"index": cell.index, "name": cell.name, "params": dict(cell.params),
                           "run_dir": cell.run_dir, "report": posixpath.join(cell.run_dir, "report.html"),
                           "exit_code": cell.exit_code, "error": cell.error, "server": cell.server,
                           "result": s is not None}
    if s is None:
        return out
    thresholds = list(s.slo.thresholds)
    within, why = _within_slo(views) if thresholds else (None, "no SLO given")
    run_figure = s.slo.max_load_within_slo
    if thresholds and run_figure != (within.load if within else None):
        shown = "none" if run_figure is None else f"{run_figure:g}"
        why = "; ".join(w for w in (why, f"the run's own figure is {shown}: its file is from before the one rule "
                                    "of counted steps (it counted every judged step that passed)") if w)
    out.update(mode=s.mode, unit=level_unit(s.mode), steps=len(s.steps), knee=_knee(s, views),
               slo={"thresholds": thresholds, "passed": s.slo.passed, "run_max_load_within_slo": _level(run_figure)},
               within_slo=_at(within), within_slo_note=why,
               excluded_steps=[{"step": v.step, "load": v.load, "why": v.excluded} for v in views if v.excluded])
    return out


def pareto(points: Sequence[tuple[float, float]]) -> list[int]:
    """The positions of the Pareto-optimal points (higher is better on both), by x ascending: a point is on the
    frontier when no other is at least as high on both and higher on one (equal points are both on it)."""
    on = [i for i, (x, y) in enumerate(points)
          if not any(ox >= x and oy >= y and (ox > x or oy > y) for ox, oy in points)]
    return sorted(on, key=lambda i: (points[i][0], -points[i][1]))


def _frontier(views: list[StepView], cells: dict[int, dict[str, Any]]) -> dict[str, Any]:
    points: list[dict[str, Any]] = []
    for v in views:
        excluded = v.excluded or (None if v.per_user is not None else "no tokens/s per user measured")
        within = cells[v.cell].get("within_slo")
        points.append({"cell": v.cell, "cell_name": v.cell_name, "step": v.step, "load": v.load, "unit": v.unit,
                       "label": v.label, "x": v.per_user, "y": v.output_tokens_per_s,
                       "requests_per_s": v.requests_per_s, "slo_passed": v.slo_passed,
                       "within_slo": excluded is None and within is not None and v.load <= within["load"],
                       "excluded": excluded, "pareto": False})
    counted = [i for i, p in enumerate(points) if p["excluded"] is None]
    front = [counted[i] for i in pareto([(points[i]["x"], points[i]["y"]) for i in counted])]
    for i in front:
        points[i]["pareto"] = True
    return {"x": X_FIGURE, "y": Y_FIGURE,
            "x_meaning": "median tokens/s per user at the step: per request (n - 1) / (E2E - TTFT)",
            "y_meaning": "output tokens/s over the step's measured part",
            "rule": "counted steps only (complete, reliable generator, fleet unchanged); a point is on the frontier "
                    "when no other is at least as high on both axes and higher on one",
            "points": points, "pareto": front}


@dataclass(frozen=True, kw_only=True)
class _Pick:
    cell: int
    name: str
    load: float
    unit: str
    output_tokens_per_s: float | None


def _rank(cells: list[dict[str, Any]], basis: str) -> tuple[list[_Pick], bool]:
    """The candidate cells best first, and whether their loads were in different units (then ranked by output
    tokens/s: users and req/s do not compare)."""
    key = "within_slo" if basis == "slo" else "knee"
    picks = [_Pick(cell=c["index"], name=c["name"], load=c[key]["load"], unit=c["unit"],
                   output_tokens_per_s=c[key]["output_tokens_per_s"])
             for c in cells if c["result"] and c[key] is not None and c[key]["load"] is not None
             and (basis != "slo" or c["slo"]["thresholds"])]
    mixed = len({p.unit for p in picks}) > 1
    tok = [(p.output_tokens_per_s or 0.0) for p in picks]
    order = sorted(range(len(picks)), key=lambda i: (tok[i],) if mixed else (picks[i].load, tok[i]), reverse=True)
    return [picks[i] for i in order], mixed


def _best(cells: list[dict[str, Any]]) -> dict[str, Any]:
    ran = [c for c in cells if c["result"]]
    basis = "slo" if any(c["slo"]["thresholds"] for c in ran) else "knee"
    out: dict[str, Any] = {"basis": basis, "cell": None, "name": None, "load": None, "unit": None,
                           "output_tokens_per_s": None, "next": None, "mixed_units": False,
                           "cells": len(cells), "with_result": len(ran)}
    if not ran:
        out["basis"] = "none"
    else:
        picks, mixed = _rank(cells, basis)
        out["mixed_units"] = mixed
        if picks:
            top = picks[0]
            out.update(cell=top.cell, name=top.name, load=top.load,
                       unit=top.unit, output_tokens_per_s=top.output_tokens_per_s)
            if len(picks) > 1:
                out["next"] = asdict(picks[1])
    out["line"] = best_line(out)
    return out


def _tok(x: float | None) -> str:
    return "no" if x is None else f"{x:,.0f}"


def best_line(best: dict[str, Any]) -> str:
    """The best cell in one sentence, from ``best``'s fields (``sweep.json`` ``best``)."""
    if best["basis"] == "none":
        return f"No cell has a result: all {best['cells']} cells failed (each cell's error is in the table)."
    if best["name"] is None:
        if best["basis"] == "slo":
            return ("No cell held the SLO at any load measured reliably: no best cell for the SLO "
                    f"({best['with_result']} of {best['cells']} cells ran).")
        return f"No SLO given and no cell found a knee: no best cell ({best['with_result']} of {best['cells']} ran)."
    nxt = best["next"]
    after = f" (next: {nxt['name']} at {nxt['load']:g} {nxt['unit']})" if nxt else ""
    ranked = " (ranked by output tokens/s: the cells' loads are in users and req/s)" if best["mixed_units"] else ""
    if best["basis"] == "slo":
        return (f"Best for the SLO: {best['name']} — {best['load']:g} {best['unit']} within SLO at "
                f"{_tok(best['output_tokens_per_s'])} output tokens/s{after}{ranked}")
    return (f"Best by the knee (no SLO given): {best['name']} — knee at {best['load']:g} {best['unit']}, "
            f"{_tok(best['output_tokens_per_s'])} output tokens/s there{after}{ranked}")


def capacity_map(cells: Sequence[CellOutcome], *, sweep: dict) -> dict:
    """The body of ``sweep.json``: ``sweep`` (the sweep's own facts, as given), ``cells`` in order, ``failed``,
    the ``frontier`` and the ``best`` cell (docs/sweep.md)."""
    views = {c.index: _views(c, c.summary) if c.summary is not None else [] for c in cells}
    rows = [_cell(c, views[c.index]) for c in cells]
    by_index = {r["index"]: r for r in rows}
    return {"schema": SCHEMA, "sweep": dict(sweep), "cells": rows,
            "failed": [{"index": r["index"], "name": r["name"], "run_dir": r["run_dir"], "error": r["error"],
                        "exit_code": r["exit_code"]} for r in rows if not r["result"]],
            "frontier": _frontier([v for c in cells for v in views[c.index]], by_index),
            "best": _best(rows)}
