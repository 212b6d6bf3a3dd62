"""A run's summary from its record: the knee's reason, the SLO verdict, the cost and the exit code. Pure.

``summarize`` is the one place a run becomes its ``RunSummary``: the master (``load/master.py``) only
gathers the facts it owns (run id, host, times, stop reason, unreadable reports, worker clocks) and calls
it, at the end and whenever the web UI or the shape needs the run as it stands. Nothing here reads a
clock or mutates the ledger: the same ledger and facts give the same summary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from harness.analysis.cost.pricing import run_cost
from harness.analysis.results import RunSummary, StepResult
from harness.analysis.search import search_summary
from harness.analysis.server import explain
from harness.analysis.sessions import explain_cache
from harness.analysis.verdict import ExitFacts, invalid, run_exit_code, slo_verdict
from harness.summary import level_unit

if TYPE_CHECKING:
    from harness.analysis.ledger import Ledger

__all__ = ["RunFacts", "knee_why", "summarize"]


@dataclass(frozen=True, kw_only=True)
class RunFacts:
    """What the master knows of a run beyond its ledger."""

    run_id: str
    host: str
    started_at: float
    ended_at: float
    stop_reason: str | None = None
    merge_errors: int = 0
    """Worker reports that could not be merged (e.g. another kneecap version): the run exits 1."""
    sink_failed: bool = False
    """A live result sink failed to close (its points may be missing): the run exits 1."""
    clocks: dict[str, dict] = field(default_factory=dict)
    clock_warnings: list[str] = field(default_factory=list)


def summarize(ledger: Ledger, steps: list[StepResult], facts: RunFacts) -> RunSummary:
    """The run's summary from its ledger and its steps' results as they stand (``Ledger.results``)."""
    sc, knee = ledger.scenario, ledger.knee
    knee_index = knee.step_index if knee.found else None
    why = "" if knee_index is None else knee_why(steps, knee_index, sc.load.knee_metric, sc.load.knee_class)
    reason = f"{knee.reason}; {why}" if why else knee.reason
    slo = slo_verdict(steps, sc.slo, knee.load if knee.found else None, sc.workload.mix)
    cost = None if sc.cost is None else run_cost(
        sc.cost, [s.cost for s in steps if s.cost is not None], knee_index=knee_index,
        judged={s.index: s.slo_passed for s in steps if s.index in ledger.judged},
        max_load_within_slo=slo.max_load_within_slo, slo_given=bool(slo.thresholds), unit=level_unit(ledger.mode))
    code = run_exit_code(steps, slo, ExitFacts(merge_errors=facts.merge_errors, sink_failed=facts.sink_failed,
                                               worker_lost=any(e.kind == "lost" for e in ledger.fleet_events)))
    return RunSummary(run_id=facts.run_id, scenario=sc.name, host=facts.host, model=sc.endpoint.model,
                      started_at=facts.started_at, ended_at=facts.ended_at, mode=ledger.mode,
                      stop_reason=facts.stop_reason, workers=len(ledger.fleet.worker_step), steps=steps, knee=knee,
                      knee_metric=sc.load.knee_metric, knee_reason=reason, knee_why=why, slo=slo, exit_code=code,
                      fleet_events=list(ledger.fleet_events), merge_errors=facts.merge_errors, cost=cost,
                      clocks=facts.clocks, clock_warnings=facts.clock_warnings,
                      search=_search(ledger, stopped=facts.stop_reason is not None), invalid=invalid(steps))


def _search(ledger: Ledger, *, stopped: bool) -> dict | None:
    if not ledger.search:
        return None
    return search_summary(mode=ledger.scenario.load.mode, grid=ledger.grid, unit=level_unit(ledger.mode),
                          steps=ledger.steps, judged=set(ledger.judged), knee=ledger.knee, decision=ledger.decision,
                          current=ledger.current, stopped=stopped)


def knee_why(steps: list[StepResult], knee_index: int, metric: str, knee_class: str | None = None) -> str:
    """Why the knee is where it is, beyond the curve: the server's queue and the prefix cache at the knee step
    against the step after it, and what the knee metric's p99 tail was made of past it."""
    at = next((s for s in steps if s.index == knee_index), None)
    # the step just past it in load (a search visits levels in any order): the lightest heavier judged step
    heavier = [s for s in steps if at is not None and s.level > at.level]
    after = min(heavier, key=lambda s: (s.level, -s.index), default=None)
    server = explain(at.server if at else None, after.server if after else None)
    cache = explain_cache(at.prefix_cache if at else None, after.prefix_cache if after else None)
    return "; ".join(w for w in (server, cache, _tail_why(after, metric, knee_class)) if w)


def _tail_why(after: StepResult | None, metric: str, knee_class: str | None) -> str:
    """The tail attribution of the knee metric's p99 in the step after the knee, when it names a cause: of the
    knee's class's own requests when the knee follows one class (``load.knee.class``)."""
    tail = after.tail if after else None
    if after is not None and knee_class is not None:
        tail = next((c.get("tail") for c in after.classes or () if c["name"] == knee_class), None)
    found = {a["quantile"]: a for a in (tail or {}).get("attributions", ()) if a["metric"] == f"{metric}_s"}
    p99 = found.get(0.99)
    # p95's words when p99 had too few requests to attribute (a short step); the line names its quantile
    pick = found.get(0.95) if p99 is not None and p99["verdict"] == "too_few" else p99
    if pick is not None and pick["verdict"] in ("cause", "time"):
        return f"past it, {pick['line']}" + (f" (class {knee_class})" if knee_class else "")
    return ""
