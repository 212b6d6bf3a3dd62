"""The regression gate: for each metric that matters, did NEW regress from BASE, improve, or change by less than
this pair of runs can tell? Pure: two ``Summary`` values in, a ``GateResult`` out (``kneecap compare --gate``).

    result = gate(read_run("base"), read_run("new"), DEFAULTS)
    result.verdict                  # "regressed" or "passed"
    [c.why for c in result.regressed]

The rule (docs/gate.md): a check is *regressed* only when the change is past its threshold in the bad direction
AND the two runs' intervals (``intervals.py``, widened by ``NOISE_WIDEN``) separate, so noise never reads as a
regression; *improved* is the same the other way; anything else is *no detectable change*, with the smallest
change in the bad direction this pair could have detected (``Check.detectable``, from the interval widths), so
"no change" is never read as "no regression of any size". Levels are matched by load (a search visits them out
of order); only levels judged in both runs are compared, the others are named in ``GateResult.notes``.

The knee (``knee.py``'s load) is its own check: it moved by at least its threshold (grid steps: the staircase's
step or a search's resolution) AND at a level both runs ran between the two knees, the knee metric's p99 or the
error rate separates the same way, or it is no detectable change. A knee in one run only counts when the other
run held a load past it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from msgspec import UNSET

from harness.analysis.counted import WHY, not_counted
from harness.capacity.checks import Check, Decision, GateResult
from harness.capacity.intervals import Interval, latency_interval, poisson_interval, separated, wilson_interval
from harness.capacity.knee_check import knee_check
from harness.spec.gate import GateSpec, GateThreshold
from harness.summary import level_unit

if TYPE_CHECKING:
    from harness.summary import Step, Summary

__all__ = ["NOISE_WIDEN", "Check", "Decision", "GateResult", "gate", "judged_steps", "mismatches"]

NOISE_WIDEN = 1.0
"""Each interval is widened this many times about its value before the runs are compared: the square root of the
design effect (how much more two A/A runs differ than their intervals say, mean z² of the log-ratio), measured
by ``benchmarks/gate_honesty.py`` on 10 A/A pairs on the simulator: 0.47 over 222 percentile checks, 0.18 over 56
rate checks, none past z 1.96. Below 1: the intervals (sketch accuracy and generator lag included) already cover
the runs' noise, so they are used as they are, not narrowed (docs/gate.md)."""


def _host(url: str) -> str:
    """A host as the refusal compares it: the built-in simulator gets a free port on every run, so a loopback
    address is the same host whatever its port."""
    parts = urlsplit(url)
    if parts.hostname in ("127.0.0.1", "localhost", "::1"):
        return f"{parts.scheme}://loopback{parts.path.rstrip('/')}"
    return url.rstrip("/")


def mismatches(base: Summary, new: Summary) -> list[str]:
    """Why these two runs are not the same configuration (scenario, host, model); empty when they are."""
    out = []
    if base.scenario != new.scenario:
        out.append(f"different scenarios ({base.scenario!r} vs {new.scenario!r})")
    if _host(base.host) != _host(new.host):
        out.append(f"different hosts ({base.host} vs {new.host})")
    if base.model != new.model:
        out.append(f"different models ({base.model!r} vs {new.model!r})")
    return out


def judged_steps(s: Summary, who: str) -> tuple[dict[float, Step], list[str]]:
    """A run's counted steps by load level (``analysis.counted``), and a note for each step with requests that
    does not count. A level run twice keeps its step with the most requests."""
    out: dict[float, Step] = {}
    notes = []
    unit = level_unit(s.mode)
    for st in s.steps:
        why = not_counted(st)
        key = round(st.level, 6)
        if why:
            if st.requests:
                notes.append(f"{who} step {st.index} ({key:g} {unit}) not compared: {WHY[why]}")
        elif key not in out or st.requests > out[key].requests:
            out[key] = st
    return out, notes


def _relative_floor(worse: int, b: Interval, n: Interval) -> float | None:
    """The smallest relative change in the bad direction at which the intervals would separate, were NEW BASE
    scaled by it with NEW's relative widths; None when BASE's far side or NEW's near side is unbounded."""
    if b.value <= 0 or n.value <= 0:
        return None
    if worse > 0:
        near = n.lo / n.value  # NEW's low end as a share of its value
        return None if b.hi is None or near <= 0 else b.hi / (b.value * near) - 1
    if n.hi is None:
        return None
    return -(1 - b.lo / (b.value * n.hi / n.value))


def _points_floor(b: Interval, requests: int, widen: float) -> float | None:
    """The smallest rise of the error rate (points) at which NEW's Wilson interval would clear BASE's top."""
    if b.hi is None or b.hi >= 1:
        return None
    top = b.hi  # a float from here on (the nested function does not see the test above)

    def clears(d: float) -> bool:
        p = min(1.0, b.value + d)
        ci = wilson_interval(round(p * requests), requests)
        return ci is not None and ci.widen(widen).lo > top

    lo, hi = 0.0, 1.0 - b.value
    if not clears(hi):
        return None
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if clears(mid) else (mid, hi)
    return hi


def _decide(t: GateThreshold, what: str, b: Interval, n: Interval, change: float, detectable: float | None,
            fmt: Callable[[float], str]) -> tuple[Decision, str]:
    """The rule, and its sentence: past the threshold AND the intervals separate, either way."""
    bad, good = separated(t.worse, b, n)
    x = change * t.worse  # > 0: worse
    figures = f"{t.say(change)} ({fmt(b.value)} → {fmt(n.value)})"
    cis = f"{b.text()} vs {n.text()}"
    if x >= t.limit and bad:
        return "regressed", f"{what} {figures}: past {t.text} and the intervals separate ({cis})"
    if -x >= t.limit and good:
        return "improved", f"{what} {figures}: past {t.text} the good way and the intervals separate ({cis})"
    if detectable is None:
        floor = "no regression of any size was detectable (an interval is unbounded: too few samples)"
    else:
        coarse = f", coarser than {t.text}" if abs(detectable) > t.limit else ""
        floor = f"smallest detectable: {t.say(detectable)}{coarse}"
    if abs(x) >= t.limit:
        return "no detectable change", f"{what} {figures} is past {t.text} but the intervals {cis} overlap; {floor}"
    return "no detectable change", f"{what} {figures} is within {t.text}; {floor}"


def _percentile(t: GateThreshold, level: float, unit: str, bs: Step, ns: Step, widen: float) -> Check | None:
    bp, np_ = bs.latency_ms.get(t.metric), ns.latency_ms.get(t.metric)
    if bp is None or np_ is None or not bp.count or not np_.count:
        return None
    stat = t.stat or "p99"
    bv, nv = getattr(bp, stat), getattr(np_, stat)
    bi = latency_interval(t.metric, bp, stat, bs.generator.lag_p99_ms)
    ni = latency_interval(t.metric, np_, stat, ns.generator.lag_p99_ms)
    what = f"{t.name} at {level:g} {unit}"
    change = nv / bv - 1 if bv else None
    common = dict(metric=t.metric, stat=stat, level=level, base=bv, new=nv, change=change, threshold=t)
    if bi is None or ni is None or change is None:
        old = [who for who, p in (("BASE", bp), ("NEW", np_)) if p.count >= 2 and getattr(p, f"{stat}_ci", None)
               in (None, UNSET)]
        cause = f"{' and '.join(old)}'s summary.json has no {stat}_ci (written before kneecap kept it)" if old \
            else f"{min(bp.count, np_.count)} samples give no interval of the {stat}"
        return Check(**common, detectable=None, decision="no detectable change",
                     why=f"{what}: {cause}; no regression of any size was detectable")
    bi, ni = bi.widen(widen), ni.widen(widen)
    detectable = _relative_floor(t.worse, bi, ni)
    decision, why = _decide(t, what, bi, ni, change, detectable, lambda v: f"{v:.4g} ms")
    return Check(**common, detectable=detectable, decision=decision, why=why, base_ci=bi, new_ci=ni)


def _rate(t: GateThreshold, level: float, unit: str, bs: Step, ns: Step, widen: float) -> Check:
    """Throughput (successful requests: a failure that ends at once is no work done) or goodput (requests that met
    every SLO) per second over the measured duration, Poisson on the count."""
    def of(st: Step) -> Interval | None:
        count = st.ok if t.metric == "throughput" else round(st.throughput.goodput_per_s * st.duration_s)
        return poisson_interval(count, st.duration_s)

    bi, ni = of(bs), of(ns)
    what = f"{t.name} at {level:g} {unit}"
    if bi is None or ni is None or bi.value <= 0:
        return Check(metric=t.metric, stat=None, level=level, base=None if bi is None else bi.value,
                     new=None if ni is None else ni.value,
                     change=None, threshold=t, detectable=None, decision="no detectable change",
                     why=f"{what}: BASE has no {t.metric} to compare against")
    bi, ni = bi.widen(widen), ni.widen(widen)
    change = ni.value / bi.value - 1
    detectable = _relative_floor(t.worse, bi, ni)
    decision, why = _decide(t, what, bi, ni, change, detectable, lambda v: f"{v:.4g}/s")
    return Check(metric=t.metric, stat=None, level=level, base=bi.value, new=ni.value, change=change, threshold=t,
                 detectable=detectable, decision=decision, why=why, base_ci=bi, new_ci=ni)


def _errors(t: GateThreshold, level: float, unit: str, bs: Step, ns: Step, widen: float) -> Check:
    """Failed / all requests, Wilson; judged steps have requests, so both intervals exist."""
    b, n = wilson_interval(bs.requests - bs.ok, bs.requests), wilson_interval(ns.requests - ns.ok, ns.requests)
    bi, ni = (b or Interval(0.0, 0.0, 1.0)).widen(widen), (n or Interval(0.0, 0.0, 1.0)).widen(widen)
    change = ni.value - bi.value
    detectable = _points_floor(bi, ns.requests, widen)
    decision, why = _decide(t, f"error rate at {level:g} {unit}", bi, ni, change, detectable,
                            lambda v: f"{v * 100:.2f}%")
    return Check(metric=t.metric, stat=None, level=level, base=bi.value, new=ni.value, change=change, threshold=t,
                 detectable=detectable, decision=decision, why=why, base_ci=bi, new_ci=ni)


def gate(base: Summary, new: Summary, spec: GateSpec, *, widen: float = NOISE_WIDEN) -> GateResult:
    """Every check of ``spec`` at every level both runs judged, then the knee (module docstring's rule)."""
    if base.mode != new.mode:
        raise ValueError(f"a {base.mode}-loop run and an {new.mode}-loop run have no common load levels")
    unit = level_unit(new.mode)
    b_steps, b_notes = judged_steps(base, "BASE")
    n_steps, n_notes = judged_steps(new, "NEW")
    levels = sorted(set(b_steps) & set(n_steps))
    notes = [*b_notes, *n_notes]
    for who, mine, other in (("BASE", b_steps, n_steps), ("NEW", n_steps, b_steps)):
        if only := sorted(set(mine) - set(other)):
            notes.append(f"only {who} ran {', '.join(f'{x:g}' for x in only)} {unit}: not compared")
    checks: list[Check] = []
    for level in levels:
        bs, ns = b_steps[level], n_steps[level]
        checks += [c for t in spec.latency() if (c := _percentile(t, level, unit, bs, ns, widen)) is not None]
        checks += [_rate(t, level, unit, bs, ns, widen) for m in ("throughput", "goodput") if (t := spec.get(m))]
        if t := spec.get("error_rate"):
            checks.append(_errors(t, level, unit, bs, ns, widen))
    if t := spec.get("knee"):
        checks.append(knee_check(t, base, new, b_steps, n_steps, widen))
    return GateResult(checks=tuple(checks), unit=unit, levels=tuple(levels), notes=tuple(notes), widen=widen)
