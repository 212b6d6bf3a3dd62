"""The run's verdict from its judged steps: the SLO section of summary.json and the exit code. Pure."""

from __future__ import annotations

from collections.abc import Sequence

from harness import exitcodes
from harness.analysis.results import SloVerdict, StepResult
from harness.analysis.slo import Threshold
from harness.workload.mix import TrafficClass

__all__ = ["EXIT_NO_VALID_RESULT", "EXIT_SLO_FAILED", "exit_code", "run_exit_code", "slo_verdict"]

# Aliases of the codes in harness.exitcodes, kept because this module has exported these names.
EXIT_SLO_FAILED = exitcodes.SLO_FAILED
EXIT_NO_VALID_RESULT = exitcodes.NO_VALID_RESULT


def slo_verdict(steps: list[StepResult], thresholds: tuple[Threshold, ...], knee_load: float | None,
                classes: Sequence[TrafficClass] = ()) -> SloVerdict:
    """Passed: every SLO held at every step up to the knee's load (every step when there is no knee);
    ``max_load_within_slo``: the largest load whose step met them all. A mix's classes' own thresholds count as the
    scenario's (each step judged them, ``analysis/classes.py``), named "[class] metric: ..."."""
    texts = [t.text for t in thresholds] + [f"[{c.name}] {t.text}" for c in classes for t in c.slo]
    if not texts:
        return SloVerdict(thresholds=[], passed=None, max_load_within_slo=None)
    judged = [s for s in steps if s.slo_passed is not None]
    upto = [s for s in judged if knee_load is None or s.level <= knee_load]
    within = [s.level for s in judged if s.slo_passed]
    return SloVerdict(thresholds=texts, passed=bool(upto) and all(s.slo_passed for s in upto),
                      max_load_within_slo=max(within) if within else None)


def exit_code(steps: list[StepResult], slo: SloVerdict) -> int:
    """``exitcodes.OK``; ``SLO_FAILED`` when an SLO failed; ``NO_VALID_RESULT`` when no request succeeded
    or no step with successes had a reliable generator."""
    measured = [s for s in steps if s.ok > 0]
    if not measured or not any(s.generator.reliable for s in measured):
        return exitcodes.NO_VALID_RESULT
    return exitcodes.SLO_FAILED if slo.passed is False else exitcodes.OK


def run_exit_code(steps: list[StepResult], slo: SloVerdict, *, merge_errors: int, lost: bool) -> int:
    """The whole precedence, in one place: ``ERROR`` when a worker report could not be merged (the figures miss
    data); else the steps' own code (``exit_code``); a run that would pass but lost a worker is ``DEGRADED``."""
    if merge_errors:
        return exitcodes.ERROR
    code = exit_code(steps, slo)
    return exitcodes.DEGRADED if code == exitcodes.OK and lost else code

