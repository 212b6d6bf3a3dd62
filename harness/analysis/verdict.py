"""The run's verdict from its counted steps: the SLO section of summary.json and the exit code. Pure.

Only counted steps (``analysis.counted``) pass or fail an SLO. ``run_exit_code`` is the one writer of a run's
exit code: every fact that changes it (a lost master, a report that could not be merged, a sink that failed, a
lost worker) comes in as ``ExitFacts``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import groupby

from harness import exitcodes
from harness.analysis.counted import not_counted
from harness.analysis.results import SloVerdict, StepResult
from harness.spec.slo import Threshold
from harness.workload.mix import TrafficClass

__all__ = [
    "EXIT_NO_VALID_RESULT",
    "EXIT_SLO_FAILED",
    "OVERFLOW_LIMIT",
    "ExitFacts",
    "exit_code",
    "invalid",
    "run_exit_code",
    "slo_verdict",
    "within_slo",
]

# Aliases of the codes in harness.exitcodes, kept because this module has exported these names.
EXIT_SLO_FAILED = exitcodes.SLO_FAILED
EXIT_NO_VALID_RESULT = exitcodes.NO_VALID_RESULT


def within_slo(judged: Iterable[tuple[float, int, bool]]) -> tuple[float, int] | None:
    """The largest load within SLO from counted steps' ``(load, step index, passed)``: the largest load L such that
    every counted step at a load <= L met every SLO; with its step (a level run twice: its last). None when the
    lightest load failed, or nothing was judged."""
    best = None
    for load, group in groupby(sorted(judged), key=lambda j: j[0]):
        at = list(group)
        if not all(passed for _, _, passed in at):
            break
        best = (load, at[-1][1])
    return best


def slo_verdict(steps: list[StepResult], thresholds: tuple[Threshold, ...], knee_load: float | None,
                classes: Sequence[TrafficClass] = ()) -> SloVerdict:
    """Passed: every SLO held at every counted step up to the knee's load (every counted step when there is no
    knee); None when no counted step was judged. ``max_load_within_slo``: ``within_slo``. A mix's classes' own
    thresholds count as the scenario's (each step judged them, ``analysis/mix/classes.py``), named "[class] metric"."""
    texts = [t.text for t in thresholds] + [f"[{c.name}] {t.text}" for c in classes for t in c.slo]
    if not texts:
        return SloVerdict(thresholds=[], passed=None, max_load_within_slo=None)
    judged = [s for s in steps if s.slo_passed is not None and not_counted(s) is None]
    upto = [s for s in judged if knee_load is None or s.level <= knee_load]
    best = within_slo((s.level, s.index, bool(s.slo_passed)) for s in judged)
    return SloVerdict(thresholds=texts, passed=all(s.slo_passed for s in upto) if upto else None,
                      max_load_within_slo=best[0] if best else None)


@dataclass(frozen=True, kw_only=True)
class ExitFacts:
    """What happened to the run beyond its steps."""

    master_lost: bool = False
    """The master ended without its summary: the steps are its last checkpoint's."""
    merge_errors: int = 0
    """Worker reports that could not be merged (the figures miss data)."""
    sink_failed: bool = False
    """A live result sink (InfluxDB) failed to close: points may be missing."""
    worker_lost: bool = False


OVERFLOW_LIMIT = 0.01
"""A run whose requests overflowed the model's context more often than this is invalid (AIPerf's AgentX rule)."""


def invalid(steps: Sequence[StepResult]) -> str | None:
    """Why the run's figures are not its workload's (its requests overflowed the model's context past
    ``OVERFLOW_LIMIT``), or None."""
    requests = sum(s.requests for s in steps)
    n = sum(s.failures.get("context_overflow", 0) for s in steps)
    if not requests or n / requests <= OVERFLOW_LIMIT:
        return None
    return (f"{n / requests:.1%} of requests ({n:,} of {requests:,}) overflowed the model's context (the limit is "
            f"{OVERFLOW_LIMIT:.0%}): the server did not run the workload's prompts, so these figures are not the "
            "workload's")


def exit_code(steps: Sequence[StepResult], slo: SloVerdict | None) -> int:
    """``exitcodes.OK``; ``SLO_FAILED`` when an SLO failed; ``NO_VALID_RESULT`` when no request succeeded, no step
    with successes counted (its generator could not keep time, or it was cut short) or the run is ``invalid``."""
    if not any(s.ok > 0 and not_counted(s) is None for s in steps) or invalid(steps):
        return exitcodes.NO_VALID_RESULT
    return exitcodes.SLO_FAILED if slo is not None and slo.passed is False else exitcodes.OK


def run_exit_code(steps: Sequence[StepResult], slo: SloVerdict | None, facts: ExitFacts = ExitFacts()) -> int:
    """The whole precedence, in one place: ``MASTER_LOST``; else ``ERROR`` when figures may miss data (a report
    not merged, a sink failed); else the steps' own code (``exit_code``); a run that would pass but lost a worker
    is ``DEGRADED``."""
    if facts.master_lost:
        return exitcodes.MASTER_LOST
    if facts.merge_errors or facts.sink_failed:
        return exitcodes.ERROR
    code = exit_code(steps, slo)
    return exitcodes.DEGRADED if code == exitcodes.OK and facts.worker_lost else code
