"""The regression gate's results, typed: one ``Check`` per gated metric (and level), a ``GateResult`` for the pair
of runs (``gate.py`` decides them, ``gate_report.py`` writes them for the console, JUnit and Markdown). Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from harness.capacity.intervals import Interval
from harness.spec.gate import GateThreshold

__all__ = ["Check", "Decision", "GateResult"]

Decision = Literal["regressed", "improved", "no detectable change"]


@dataclass(frozen=True, kw_only=True)
class Check:
    """One gated metric at one load level (the knee: at none)."""

    metric: str
    stat: str | None
    level: float | None
    base: float | None
    """BASE's value: ms, requests/s, a fraction (error rate), or the knee's load."""
    new: float | None
    change: float | None
    """NEW against BASE in the threshold's unit: relative (0.12 = +12%), points (0.004 = +0.4 pp), steps (-1)."""
    threshold: GateThreshold
    detectable: float | None
    """The smallest change in the bad direction (signed, the threshold's unit) at which this pair's intervals would
    have separated; None: nothing was detectable (no interval, too few samples)."""
    decision: Decision
    why: str
    """One sentence with the figures."""
    base_ci: Interval | None = None
    new_ci: Interval | None = None

    @property
    def name(self) -> str:
        """``tpot p50 @ 8`` (the unit is the result's), ``knee``."""
        return self.threshold.name + ("" if self.level is None else f" @ {self.level:g}")


@dataclass(frozen=True, kw_only=True)
class GateResult:
    checks: tuple[Check, ...]
    unit: str
    """The load's unit: ``users`` or ``req/s``."""
    levels: tuple[float, ...]
    """The levels judged in both runs, ascending."""
    notes: tuple[str, ...]
    """What was not compared and why: levels in one run only, steps not judged."""
    widen: float

    @property
    def regressed(self) -> list[Check]:
        return [c for c in self.checks if c.decision == "regressed"]

    @property
    def improved(self) -> list[Check]:
        return [c for c in self.checks if c.decision == "improved"]

    @property
    def verdict(self) -> str:
        """``regressed`` when any check regressed, else ``passed``."""
        return "regressed" if self.regressed else "passed"
