"""Knee search: which load to probe next, from the steps measured so far. Pure.

Levels live on the grid ``min + k·resolution`` up to ``max`` (the staircase's levels at ``step = resolution``),
so a search and a staircase at the same resolution can only disagree on the knee by what they measured. Judging
is the staircase's: ``find_knee`` over the probed levels sorted by load (the latest probe of each level). From it:

1. **Start** at ``min``.
2. **Grow** geometrically while no knee shows: the grid level at or above twice the highest probed (capped at
   ``max``). A queue seen at the server, or throughput growing at less than 0.8× the load, slows growth to 1.5×.
3. **Bracket**: a knee at level a breaks to the next probed level b; everything up to a is good, past it is past
   the knee. A pair wider than the resolution whose p99 broke by the latency half of the signature alone (doubled
   with throughput no longer in proportion, or quadrupled; not where the server says nothing waited) is looked
   into first when it lies below: a wide pair can straddle the knee with throughput still growing across it.
   **Predict** the knee inside the bracket: a batch-limited server's capacity is its running requests while
   requests waited (it says so in /metrics); otherwise Little's law, N = X·R: closed loop, a's per-user throughput
   held up to the best throughput seen (``a·T_max/T_a``); open loop, the best completion rate seen. Probe the grid
   level at the prediction, then the one just past it (``PREDICTIONS`` such probes a search), while inside the
   bracket and not probed yet; else bisect.
4. **Done** when ``b − a ≤ resolution`` and the knee is confirmed by ``confirm_steps`` levels past b (if none was
   probed past b: probe ``b + max(resolution, b − a)``); "no knee up to max" once ``max`` was probed without one.

Everything the chooser says is a ``Decision``: the level (or None: done), why, the bracket and the state.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from harness.analysis.knee import KneeFinding, KneeParams, StepPoint, by_load, find_knee
from harness.analysis.steps import StepInfo

__all__ = ["DRAIN_E2E_FACTOR", "PREDICTED", "Decision", "Probe", "SearchGrid", "choose", "drain_warmup",
           "search_line", "search_summary", "verdicts"]

DRAIN_E2E_FACTOR = 1.5
"""Going down in load, the warm-up lasts this many times the heavier step's e2e p99 (``drain_warmup``):
every request that step started, queued ones included, has finished by then (its e2e measured that wait)."""
LATENCY_BRACKET_RATIO = 2.0
"""A pair of levels whose p99 broke without the knee's throughput plateau is looked into when the p99 at least
doubled while throughput grew by less than ``LATENCY_BRACKET_THROUGHPUT_ELASTICITY`` × the load, or when it at
least quadrupled: past capacity requests wait whole service times, while a light level's p99 moves with the batch
and with noise (an open loop's Poisson bursts double a 100-request p99 easily)."""
LATENCY_BRACKET_THROUGHPUT_ELASTICITY = 0.9
PREDICTIONS = 2
"""Probes a search spends at and just past predicted knees: a prediction that follows the last good level (Little's
law near capacity does) would otherwise walk up the grid one resolution a step; then it bisects."""
PREDICTED = "the predicted knee"
"""How a level chosen by prediction says so in its ``why`` (``Probe.predicted`` reads it back)."""
NEAR_THROUGHPUT_ELASTICITY = 0.8
"""Below this throughput elasticity between the last two probes, the load is nearing capacity: grow by 1.5×."""


@dataclass(frozen=True)
class Probe:
    """One measured level, as the chooser sees it."""

    point: StepPoint
    requests_per_s: float = 0.0
    waiting_mean: float | None = None
    """The server's waiting requests over the step (None: it does not say)."""
    running_max: float | None = None
    predicted: bool = False
    """The level was chosen at or just past a predicted knee (``PREDICTIONS`` such probes at most)."""

    @property
    def level(self) -> float:
        return self.point.load


@dataclass(frozen=True)
class SearchGrid:
    lo: float
    hi: float
    resolution: float
    integer: bool = True
    """Closed loop: users are whole."""

    def snap_up(self, x: float) -> float:
        """The smallest grid level >= ``x`` (the top of the grid past it)."""
        k = math.ceil((x - self.lo) / self.resolution - 1e-9)
        return self._at(min(max(k, 0), self.count - 1))

    def snap_down(self, x: float) -> float:
        k = math.floor((x - self.lo) / self.resolution + 1e-9)
        return self._at(min(max(k, 0), self.count - 1))

    @property
    def count(self) -> int:
        return math.floor((self.hi - self.lo) / self.resolution + 1e-9) + 1

    @property
    def top(self) -> float:
        return self._at(self.count - 1)

    def index(self, level: float) -> int:
        return round((level - self.lo) / self.resolution)

    def _at(self, k: int) -> float:
        v = self.lo + k * self.resolution
        return round(v) if self.integer else round(v, 9)


@dataclass(frozen=True)
class Decision:
    level: float | None
    """The next level to probe; None: the search is done."""
    why: str
    state: str
    """"growing", "bracketing", "confirming", "done", "no knee"."""
    bracket: tuple[float, float] | None = None
    """(last good level, first level past the knee) once a knee shows."""
    knee: KneeFinding | None = None
    top: float | None = None
    """Growing: the highest level probed so far."""


def _latest(probes: list[Probe]) -> list[Probe]:
    """The probes of the points the judging sees (``knee.by_load``: the latest of each level, by load)."""
    by_index = {p.point.index: p for p in probes}
    return [by_index[pt.index] for pt in by_load([p.point for p in probes])]


def judge(probes: list[Probe], params: KneeParams, label: str = "p99") -> KneeFinding:
    """The staircase's knee over the probed levels, sorted by load."""
    return find_knee(by_load([p.point for p in probes]), params, label=label)


def verdicts(levels: list[float], knee: KneeFinding) -> list[str]:
    """Each level's verdict against the knee: "good" up to it, "past" beyond it ("good" everywhere without one)."""
    return ["good" if not knee.found or lv <= (knee.load or 0) else "past" for lv in levels]


def choose(probes: list[Probe], grid: SearchGrid, params: KneeParams | None = None, *, open_loop: bool = False,
           label: str = "p99") -> Decision:
    """Where to probe next (module docstring)."""
    params = params or KneeParams()
    if not probes:
        return Decision(grid.lo, "start at min", "growing")
    pts = _latest(probes)
    knee = judge(probes, params, label)
    # Where p99 broke between two levels farther apart than the resolution, the knee may lie between them even when
    # the full signature shows only higher up (throughput still grew a little across the wide pair, e.g. 64 -> 128
    # users around a capacity of 100): the lowest such pair is looked into first.
    wide = [(a, b) for a, b in _latency_breaks(pts, params) if b - a > grid.resolution + 1e-9
            and (not knee.found or b <= (knee.load or 0.0))]
    if wide:
        nxt, why = _inside(pts, grid, *wide[0], open_loop)
        return Decision(nxt, f"p99 rose faster than load between {wide[0][0]:g} and {wide[0][1]:g}: {why}",
                        "bracketing", wide[0], knee)
    if not knee.found:  # a latency break at the resolution with throughput still growing is no knee: look higher
        return _grow(pts, grid, knee)
    a = knee.load or 0.0
    b = min(p.level for p in pts if p.level > a)
    if b - a > grid.resolution + 1e-9:
        nxt, why = _inside(pts, grid, a, b, open_loop)
        return Decision(nxt, why, "bracketing", (a, b), knee)
    if knee.confirmed or params.confirm_steps == 0:
        return Decision(None, f"knee at {a:g}: bracket {a:g}..{b:g} within the resolution {grid.resolution:g}",
                        "done", (a, b), knee)
    nxt = grid.snap_up(b + max(grid.resolution, b - a))
    if nxt <= b:
        return Decision(None, f"knee at {a:g}, not confirmed: nothing past {b:g} up to max {grid.top:g}",
                        "done", (a, b), knee)
    return Decision(nxt, f"confirm the knee at {a:g}: past {b:g}", "confirming", (a, b), knee)


def _latency_breaks(pts: list[Probe], params: KneeParams) -> list[tuple[float, float]]:
    """Neighbouring probed levels (a, b) where b's p99 CI lies above a's and p99 grew faster than load (latency
    elasticity above ``params.min_latency_elasticity``) and at least doubled (``LATENCY_BRACKET_RATIO``) while
    throughput stopped growing in proportion, or quadrupled: the latency half of the knee's signature. Not where the
    server reports that nothing waited at b."""
    out = []
    for x, y in itertools.pairwise(pts):
        if y.waiting_mean is not None and y.waiting_mean < 0.5:
            continue  # the server says nothing queued at b: its p99 rose for another reason (prefill, noise)
        a, b = x.point, y.point
        if not (a.reliable and b.reliable) or a.p99 <= 0 or b.p99 <= 0 or a.load <= 0 or b.p99 != b.p99:
            continue
        lo_b = b.ci[0] if b.ci else b.p99
        hi_a = (a.ci[1] if a.ci else a.p99) + max(0.0, b.lag_ms - a.lag_ms)  # not the client's lag (knee.py)
        ratio = b.p99 / a.p99
        e_t = _elasticity(a.throughput, b.throughput, a.load, b.load)
        grew = ratio >= 2 * LATENCY_BRACKET_RATIO or (
            ratio >= LATENCY_BRACKET_RATIO and (e_t is None or e_t < LATENCY_BRACKET_THROUGHPUT_ELASTICITY))
        if lo_b > hi_a and grew and math.log(ratio) / math.log(b.load / a.load) > params.min_latency_elasticity:
            out.append((a.load, b.load))
    return out


def _grow(pts: list[Probe], grid: SearchGrid, knee: KneeFinding) -> Decision:
    top = pts[-1]
    if top.level >= grid.top - 1e-9:
        return Decision(None, f"no knee up to max {grid.top:g}", "no knee", knee=knee)
    factor, why = 2.0, "no knee yet: double"
    if top.waiting_mean is not None and top.waiting_mean >= 0.5:
        factor, why = 1.5, f"requests waited at the server ({top.waiting_mean:.1f}): grow 1.5x"
    elif len(pts) >= 2:
        prev = pts[-2]
        e_t = _elasticity(prev.point.throughput, top.point.throughput, prev.level, top.level)
        if e_t is not None and e_t < NEAR_THROUGHPUT_ELASTICITY:
            factor, why = 1.5, f"throughput grew slower than load (elasticity {e_t:.2f}): grow 1.5x"
    nxt = grid.snap_up(max(top.level * factor, top.level + grid.resolution))
    return Decision(nxt, why, "growing", knee=knee, top=top.level)


def _elasticity(t0: float, t1: float, l0: float, l1: float) -> float | None:
    if t0 <= 0 or t1 <= 0 or l0 <= 0 or l1 <= l0:
        return None
    return math.log(t1 / t0) / math.log(l1 / l0)


def predict(pts: list[Probe], a: float, b: float, open_loop: bool) -> tuple[float, str] | None:
    """The knee's likely load inside the bracket (a, b), with where the figure came from; None: no basis."""
    past = [p for p in pts if p.level >= b]
    queued = [p for p in past if p.waiting_mean is not None and p.waiting_mean >= 0.5 and p.running_max]
    if queued and not open_loop:
        running = queued[0].running_max or 0.0
        return running, f"the server ran {running:g} requests while others waited"
    good = next((p for p in pts if p.level == a), None)
    if good is None:
        return None
    if open_loop:
        best = max(p.requests_per_s for p in pts)
        return (best, f"the best completion rate seen, {best:.3g} req/s") if best > 0 else None
    t_max = max(p.point.throughput for p in pts)
    if good.point.throughput <= 0:
        return None
    n = a * t_max / good.point.throughput
    return n, f"Little's law: {a:g} users' throughput held up to the best seen, {t_max:.0f} tokens/s"


def _inside(pts: list[Probe], grid: SearchGrid, a: float, b: float, open_loop: bool) -> tuple[float, str]:
    """The next level strictly inside the bracket (a, b): the prediction, just past it, else the midpoint."""
    probed = {p.level for p in pts}
    guess = predict(pts, a, b, open_loop) if sum(p.predicted for p in pts) < PREDICTIONS else None
    if guess is not None:
        n, source = guess
        at = grid.snap_down(n)  # once both are probed the guess has had its chance: bisect (no march up the grid)
        for level, where in ((at, "at"), (grid.snap_up(at + grid.resolution), "just past")):
            if a < level < b and level not in probed:
                return level, f"{where} {PREDICTED} {n:.3g} ({source})"
    mid = grid.snap_down((a + b) / 2)
    if not a < mid < b:
        mid = grid.snap_up((a + b) / 2)
    return mid, f"bisect {a:g}..{b:g}"


def search_line(decision: Decision | None, current: StepInfo | None, unit: str) -> str:
    """Where a search stands: "knee between 24 and 32 users; next: 28", "no knee up to 64 users; next: 128"."""
    if decision is None:
        return f"searching: first level {current.level:g} {unit}" if current is not None else "searching"
    nxt = f"; next: {decision.level:g}" if decision.level is not None else ""
    if decision.state == "done" and decision.knee is not None and decision.knee.found:
        return f"knee at {decision.knee.load:g} {unit} ({decision.why})"
    if decision.state == "no knee":
        return decision.why + f" {unit}"
    if decision.bracket is not None:
        a, b = decision.bracket
        verb = "confirming" if decision.state == "confirming" else "next"
        return f"knee between {a:g} and {b:g} {unit}" + (f"; {verb}: {decision.level:g}" if nxt else "")
    return f"no knee yet up to {decision.top or 0:g} {unit}{nxt}"


def search_summary(*, mode: str, grid: SearchGrid, unit: str, steps: list[StepInfo], judged: set[int],
                   knee: KneeFinding, decision: Decision | None, current: StepInfo | None,
                   stopped: bool = False) -> dict:
    """summary.json's ``search``: the grid, where the search stands and its path (levels in visiting order, why
    each was chosen, its verdict against the knee, why it ended, how it was warmed). ``stopped``: the run ended
    (its stop reason is set), whoever ended it."""
    path = []
    for s in steps:
        verdict = ("pending" if s.ended is None else "not judged" if s.index not in judged
                   else verdicts([s.level], knee)[0])
        path.append({"step": s.index, "level": s.level, "why": s.why, "verdict": verdict, "ended": s.ended_why,
                     "warmup_s": s.warmup_s, "warmup": s.warmup_why or "the plan's"})
    state = decision.state if decision is not None else "growing"
    if stopped and (decision is None or decision.level is not None):
        state = "stopped"  # ended by something else than the search (error storm, interrupt, abort_on_fail)
    return {"mode": mode, "unit": unit, "min": grid.lo, "max": grid.top, "resolution": grid.resolution,
            "state": state, "bracket": list(decision.bracket) if decision and decision.bracket else None,
            "next": decision.level if decision is not None and state != "stopped" else None,
            "line": search_line(decision, current, unit), "path": path}


def drain_warmup(prev: StepInfo, level: float, e2e_p99_s: float | None, *, warmup_s: float, max_duration_s: float,
                 unit: str) -> tuple[float | None, str]:
    """The warm-up of a step at ``level`` after ``prev``: the plan's (None), or, going down in load, long enough for
    ``prev``'s requests to finish (``DRAIN_E2E_FACTOR`` × its e2e p99, at most the step's max duration): the
    lighter step must not measure the heavier one's queue."""
    if level >= prev.level or e2e_p99_s is None:
        return None, ""
    drain = min(DRAIN_E2E_FACTOR * e2e_p99_s, max_duration_s)
    if drain <= warmup_s:
        return None, ""
    return drain, f"drain after {prev.level:g} {unit}: {DRAIN_E2E_FACTOR:g} x its e2e p99 ({e2e_p99_s:.1f} s)"
