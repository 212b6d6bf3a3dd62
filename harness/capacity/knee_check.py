"""The regression gate's knee check: did the knee's load move by its threshold, and does a level both runs ran
between the two knees show it? Pure.

A knee's load is only known to its grid (the staircase's step, a search's resolution), so a move of one step can
be a knee sitting on the boundary between two levels. The move counts when, at a level both runs judged between
the two knees, the knee metric's p99 — else its p95 or p50, since a p99 from fewer than 368 samples is unbounded
above — or the error rate separates the same way (``intervals.separated``): at BASE's knee level a NEW run whose
knee fell one step is past its knee, and its latency there must show it. A knee found in
one run only counts when the other run held a load past it (its highest judged level): a change of at least that.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, cast

from msgspec import UNSET

from harness.capacity.checks import Check, Decision
from harness.capacity.intervals import latency_interval, separated, wilson_interval
from harness.metrics.vocabulary import CI_PERCENTILES
from harness.spec.gate import GateThreshold
from harness.summary import level_unit

if TYPE_CHECKING:
    from harness.summary import Step, Summary

__all__ = ["grid", "knee_check"]


def grid(s: Summary) -> float | None:
    """The run's load grid: a search's resolution, else the smallest gap between the levels it ran (a staircase's
    step); None with a single level."""
    if s.search is not UNSET:
        return s.search.resolution
    levels = sorted({round(st.level, 6) for st in s.steps})
    gaps = [b - a for a, b in itertools.pairwise(levels)]
    return min(gaps) if gaps else None


def _evidence(metric: str, worse: int, lo: float, hi: float, b_steps: dict[float, Step], n_steps: dict[float, Step],
              widen: float) -> str | None:
    """The first level in (lo, hi] both runs judged where NEW's knee-metric p99, or its error rate, lies wholly on
    the ``worse`` side (+1: worse, -1: better) of BASE's; its sentence, or None."""
    for level in sorted(set(b_steps) & set(n_steps)):
        if not lo < level <= hi:
            continue
        bs, ns = b_steps[level], n_steps[level]
        bp, np_ = bs.latency_ms.get(metric), ns.latency_ms.get(metric)
        for stat in reversed(CI_PERCENTILES):  # a p99 from < 368 samples bounds nothing above: the body may show it
            bi = bp and bp.count and latency_interval(metric, bp, stat, bs.generator.lag_p99_ms)
            ni = np_ and np_.count and latency_interval(metric, np_, stat, ns.generator.lag_p99_ms)
            if bi and ni and separated(+1, bi.widen(widen), ni.widen(widen))[0 if worse > 0 else 1]:
                return f"at {level:g} its {metric} {stat} went {bi.value:.4g} → {ni.value:.4g} ms (intervals separate)"
        be, ne = wilson_interval(bs.requests - bs.ok, bs.requests), wilson_interval(ns.requests - ns.ok, ns.requests)
        if be and ne and separated(+1, be.widen(widen), ne.widen(widen))[0 if worse > 0 else 1]:
            return f"at {level:g} its error rate went {be.value:.2%} → {ne.value:.2%} (intervals separate)"
    return None


def _change(t: GateThreshold, step: float | None, base: float, new: float) -> float | None:
    if t.unit == "steps":
        return None if not step else (new - base) / step
    return new / base - 1 if base else None


def knee_check(t: GateThreshold, base: Summary, new: Summary, b_steps: dict[float, Step], n_steps: dict[float, Step],
               widen: float) -> Check:
    """The knee's check (module docstring); ``b_steps``/``n_steps``: each run's judged steps by level."""
    unit = level_unit(new.mode)
    bk = base.knee.level if base.knee.found else None
    nk = new.knee.level if new.knee.found else None
    grids = [g for g in (grid(base), grid(new)) if g]
    step = max(grids) if grids else None  # the coarser grid: the finer cannot show what the coarser hides
    b_top, n_top = max(b_steps, default=None), max(n_steps, default=None)
    detectable = None if step is None or (t.unit == "relative" and not bk) else \
        t.worse * (1.0 if t.unit == "steps" else step / cast(float, bk))  # relative (a knee's other unit): bk set

    def check(decision: Decision, why: str, change: float | None = None) -> Check:
        return Check(metric="knee", stat=None, level=None, base=bk, new=nk, change=change, threshold=t,
                     detectable=detectable, decision=decision, why=why)

    if t.unit == "steps" and step is None:
        return check("no detectable change", "the knee: each run ran one level, so there is no grid to count "
                                             "steps on")
    if bk is None and nk is None:
        return check("no detectable change", f"the knee: neither run found one (BASE ran up to {b_top:g}, NEW up "
                                             f"to {n_top:g} {unit}); this pair resolves one step past that")
    if bk is not None and nk is not None:
        at, moved = f"the knee {bk:g} → {nk:g} {unit}", (bk, nk)
    elif bk is not None:  # NEW found none: it held every level it ran
        if n_top is None or n_top <= bk:
            return check("no detectable change", f"the knee: BASE's at {bk:g} {unit}; NEW found none but never "
                                                 f"ran past {bk:g}")
        at, moved = f"the knee {bk:g} → none up to {n_top:g} {unit} (at least)", (bk, n_top)
    else:
        assert nk is not None  # the two tests above leave NEW's knee found, BASE's not
        if b_top is None or b_top <= nk:
            return check("no detectable change", f"the knee: NEW's at {nk:g} {unit}; BASE found none but never "
                                                 f"ran past {nk:g}")
        at, moved = f"the knee none up to {b_top:g} → {nk:g} {unit} (at least)", (b_top, nk)
    change = _change(t, step, *moved)
    if change is None:
        return check("no detectable change", f"{at}: no grid to measure the move on")
    x = change * t.worse
    lo, hi = sorted(moved)
    if abs(x) < t.limit:
        return check("no detectable change", f"{at} ({t.say(change)}) is within {t.text}", change)
    past = f"past {t.text}" + ("" if x > 0 else " the good way")
    if why := _evidence(new.knee.metric, 1 if x > 0 else -1, lo, hi, b_steps, n_steps, widen):
        decision: Decision = "regressed" if x > 0 else "improved"
        return check(decision, f"{at} ({t.say(change)}, {past}); {why}", change)
    return check("no detectable change", f"{at} ({t.say(change)}) is {past}, but no level both runs judged "
                                         f"in ({lo:g}, {hi:g}] shows it beyond the noise: a knee on a boundary "
                                         "between two levels", change)

