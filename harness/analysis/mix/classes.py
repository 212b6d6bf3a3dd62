"""Each class of a mix measured apart (``workload.mix``): its share, latencies, failures and SLO verdict. Pure.

From the step's request rows (``metrics.rows``, which the master keeps for tail attribution), so a class's
quantiles are exact order statistics of its own requests — until a step passes ``ROWS_CAP`` requests, when the
rows are a uniform sample of them and the block says so (``sampled``). Quantiles as everywhere in kneecap: the
value at rank ⌊q·(n−1)⌋; for an SLO, failed requests rank as misses (above every latency, below every speed), as
the step's own SLO does (``analysis/judge.py``). ITL is not in the rows (a request's chunks stay on its worker),
so a class's SLO judges ``metrics.vocabulary.CLASS_SLO_METRICS``: TTFT, TPOT, E2E, TTFO, tokens/s per user, the
error rate and the short-answer rate.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from msgspec import structs, to_builtins

from harness.analysis.knee import StepPoint
from harness.metrics.aggregate import ci_ranks
from harness.metrics.rows import FLAG_FAILED, FLAG_LENGTH_ASKED, FLAG_SHORT
from harness.metrics.vocabulary import CLASS_LATENCIES, HEADLINE
from harness.spec.slo import Threshold
from harness.summary import SloCheck, Step, Summary
from harness.workload.mix import TrafficClass, Workload

__all__ = ["QUANTILES", "ClassStep", "class_checks", "class_figures", "class_point", "class_rows", "class_steps",
           "class_tail_lines", "mix_step", "probe_line", "probe_step"]

QUANTILES = (0.5, 0.9, 0.95, 0.99)
_TENTHS_PER_MS = 10


@dataclass
class ClassStep:
    name: str
    weight_share: float | None
    """The share of requests the scenario asked of this class (its weight over all weights; beside classes of fixed
    ``users``, that times the share of the step's requests the weighted classes made); None for probes and for a
    class of fixed users."""
    requests: int
    share: float | None
    """The share of the step's measured requests that were this class's (None: no requests)."""
    failed: int
    error_rate: float | None
    latency_ms: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per latency: count and p50, p90, p95, p99 over the class's successful requests."""
    tokens_per_s_per_user: dict[str, float] | None = None
    """Each request's streaming speed, (output tokens − 1) / (E2E − TTFT): count, p50, p5, p1; None: no request
    streamed two tokens."""
    output_tokens: int = 0
    short_answers: int = 0
    """Its successful answers that asked for an exact length and ended before it (``steps[].answers``' rule)."""
    short_answer_share: float | None = None
    """``short_answers`` over its answers that asked for an exact length; None: none asked."""
    slo: list[SloCheck] = field(default_factory=list)
    slo_passed: bool | None = None
    sampled: str | None = None
    cancelled: int = 0
    """Requests of this class a user hung up on (outside ``requests``, as the step's ``cancelled``)."""
    cancelled_share: float | None = None
    tail: dict | None = None
    """Its own tail attribution among its requests (``analysis.mix.rows``); None: too few rows."""
    ttft_split: dict | None = None
    tokens: dict[str, int] | None = None
    """Its measured requests' tokens: uncached ``input``, ``cached_input``, ``output``."""
    users: int | None = None
    """The fleet's users fixed on this class (``users:``); None for a weighted class."""
    cost: dict | None = None
    """With ``cost:``: ``output_share``, and with metered prices ``test_cost`` and ``per_request``."""
    answers: dict | None = None
    """``verify:``: its answers compared (``verified``, ``changed``, ``changed_share``) and checked (``checked``,
    ``failed``, ``failed_share``); None: none of its requests was a verify request."""

    def to_json(self) -> dict:
        return to_builtins(asdict(self))  # its SLO checks are the summary's Structs


def class_checks(classes: Sequence[ClassStep]) -> list[SloCheck]:
    """Every class's SLO checks named by their class (``[name] threshold``), for the step's verdict."""
    return [structs.replace(c, threshold=f"[{k.name}] {c.threshold}") for k in classes for c in k.slo]


def class_steps(cols: Mapping[str, Sequence[Any]], classes: Sequence[TrafficClass], rows_seen: int) -> list[ClassStep]:
    """Every class's figures from the step's row ``columns`` (``analysis.why.rows.columns``); ``rows_seen``: the
    measured requests the rows stand for (more than the rows past ``ROWS_CAP``)."""
    n = len(cols["flags"])
    by_class = class_rows(cols, len(classes))
    # the weights share the weighted classes' requests (those of fixed users' classes are what those users made)
    weighted_n = sum(len(idx) for c, idx in zip(classes, by_class, strict=True) if c.users is None)
    total_weight = sum(c.weight for c in classes) / (weighted_n / n if weighted_n and n else 1.0)
    sampled = (f"from a uniform sample of {n:,} of the step's {rows_seen:,} requests" if rows_seen > n else None)
    out = [_one(cols, c, idx, total_weight, n, sampled) for c, idx in zip(classes, by_class, strict=True)]
    for step, c in zip(out, classes, strict=True):
        if c.users is not None:
            step.weight_share, step.users = None, c.users
    return out


def class_rows(cols: Mapping[str, Sequence[Any]], n_classes: int) -> list[list[int]]:
    """The row indices of each class, in row order."""
    out: list[list[int]] = [[] for _ in range(n_classes)]
    for i, c in enumerate(cols["class"]):
        if c is not None and 0 <= c < n_classes:
            out[c].append(i)
    return out


def probe_step(cols: Mapping[str, Sequence[Any]]) -> ClassStep:
    """The step's probe requests (``load.probes``: all of them, tiny, none the users') as one class named "probe";
    ``share`` and ``weight_share`` do not apply (None)."""
    probe = TrafficClass(name="probe", weight=1.0, workload=Workload(input_tokens=None, output_tokens=None, joint=None))
    out = _one(cols, probe, list(range(len(cols["flags"]))), 1.0, 0, None)
    out.weight_share = out.share = None
    return out


def _one(cols: Mapping[str, Sequence[Any]], cls: TrafficClass, idx: list[int], total_weight: float, n: int,
         sampled: str | None) -> ClassStep:
    flags = cols["flags"]
    failed = sum(1 for i in idx if flags[i] & FLAG_FAILED)
    ok = [i for i in idx if not flags[i] & FLAG_FAILED]
    values = {m: sorted(v for i in ok if (v := cols[m][i]) is not None) for m in CLASS_LATENCIES}
    speeds = sorted(s for i in ok if (s := _speed(cols, i)) is not None)
    out = ClassStep(name=cls.name, weight_share=round(cls.weight / total_weight, 6), requests=len(idx),
                    share=round(len(idx) / n, 6) if n else None, failed=failed,
                    error_rate=round(failed / len(idx), 6) if idx else None,
                    output_tokens=sum(cols["output"][i] or 0 for i in ok), sampled=sampled)
    asked = [i for i in ok if flags[i] & FLAG_LENGTH_ASKED]
    out.short_answers = sum(1 for i in asked if flags[i] & FLAG_SHORT)
    out.short_answer_share = round(out.short_answers / len(asked), 6) if asked else None
    out.latency_ms = {m: _quantiles(v, 1 / _TENTHS_PER_MS) for m, v in values.items() if v}
    if speeds:
        out.tokens_per_s_per_user = {"count": len(speeds), "p50": _rank(speeds, 0.5), "p5": _rank(speeds, 0.05),
                                     "p1": _rank(speeds, 0.01)}
    out.slo = [_check(t, values, speeds, failed, len(idx), out.short_answer_share) for t in cls.slo]
    out.slo_passed = all(c.passed for c in out.slo) if out.slo else None
    return out


def _speed(cols: Mapping[str, Sequence[Any]], i: int) -> float | None:
    out, ttft, e2e = cols["output"][i], cols["ttft"][i], cols["e2e"][i]
    if out is None or out <= 1 or ttft is None or e2e is None or e2e <= ttft:
        return None
    return round((out - 1) / ((e2e - ttft) / (1000 * _TENTHS_PER_MS)), 3)


def _rank(values: list, q: float) -> float:
    return values[math.floor(q * (len(values) - 1))]


def _quantiles(values: list[int], scale: float) -> dict[str, float]:
    return {"count": len(values), **{f"p{100 * q:g}": round(_rank(values, q) * scale, 3) for q in QUANTILES}}


def _check(t: Threshold, values: dict[str, list], speeds: list[float], failed: int, requests: int,
           short_share: float | None) -> SloCheck:
    """A class's threshold; failures rank as misses (after every latency, before every speed)."""
    if t.metric == "error_rate":
        observed: float | str | None = failed / requests if requests else None
    elif t.metric == "short_answer_rate":
        observed = short_share
    else:
        q = t.percentile / 100  # type: ignore[operator]  # p(...): percentile set
        ranked = speeds if t.metric == "tokens_per_s_per_user" else values.get(t.metric, [])
        n = len(ranked) + failed
        observed = None
        if n:
            r = math.floor(q * (n - 1))
            if t.metric == "tokens_per_s_per_user":
                observed = 0.0 if r < failed else ranked[r - failed]
            else:
                observed = "inf" if r >= len(ranked) else round(ranked[r] / _TENTHS_PER_MS, 3)
    passed = observed is not None and (t.passes(math.inf) if observed == "inf" else t.passes(observed))  # type: ignore[arg-type]  # a float here: "inf" is the only str
    return SloCheck(threshold=t.text, observed=round(observed, 6) if isinstance(observed, float) else observed,
                    passed=passed, abort_on_fail=t.abort_on_fail)


def class_point(cols: Mapping[str, Sequence[Any]], class_index: int, metric: str, *, index: int, load: float,
                reliable: bool, duration_s: float, lag_ms: float = 0.0) -> StepPoint:
    """The step as the knee finder sees it when the knee follows one class (``load.knee.class``): the class's p99 of
    ``metric`` (ms, failures ranked as misses) and its order-statistic CI, and its own output tokens/s."""
    flags, col, out = cols["flags"], cols[metric], cols["output"]
    mine = [i for i, c in enumerate(cols["class"]) if c == class_index]
    failed = sum(1 for i in mine if flags[i] & FLAG_FAILED)
    values = sorted(v for i in mine if not flags[i] & FLAG_FAILED and (v := col[i]) is not None)
    n = len(values) + failed

    def at(rank: int) -> float:
        return values[rank] / _TENTHS_PER_MS if rank < len(values) else math.inf

    p99 = at(math.floor(0.99 * (n - 1))) if n else math.nan
    ci = (at(ci_ranks(n, 0.99)[0]), at(ci_ranks(n, 0.99)[1])) if n >= 2 else None
    work = sum(out[i] or 0 for i in mine if not flags[i] & FLAG_FAILED)
    return StepPoint(index, load, p99, ci, work / max(duration_s, 1e-9), reliable, n, lag_ms)


def mix_step(summary: Summary) -> Step | None:
    """The step whose classes a reader sees first: the knee's, else the last judged step that has them."""
    steps = [st for st in summary.steps if isinstance(st.classes, list) and st.classes]
    return next((st for st in steps if st.index == summary.knee.step_index), steps[-1]) if steps else None


def class_figures(step: Step) -> list[tuple[str, str]]:
    """Each class of ``step`` in words: "75 requests (75%, weight 75%), TTFT p95 30.0 ms, ...; SLO passed"."""
    out = []
    for c in step.classes or ():
        lat = ", ".join(f"{m.upper()} p95 {p.p95:,.{0 if p.p95 >= 100 else 1}f} ms" for m in HEADLINE
                        if (p := c.latency_ms.get(m)) is not None and p.p95 is not None)
        failed = [f"{x.threshold} ({x.observed})" for x in c.slo if not x.passed]
        slo = "" if c.slo_passed is None else "; SLO passed" if c.slo_passed else f"; SLO FAILED: {', '.join(failed)}"
        share = f"{100 * c.share:.0f}%" if c.share is not None else "-"
        asked = f"{c.users} users" if c.users is not None else f"weight {100 * (c.weight_share or 0):.0f}%"
        head = f"{c.requests} requests ({share}, {asked})"
        gone = f", {c.cancelled} cancelled ({100 * (c.cancelled_share or 0):.0f}%)" if c.cancelled else ""
        out.append((c.name, head + (f", {c.failed} failed" if c.failed else "") + gone + (f", {lat}" if lat else "")
                    + slo))
    return out


def class_tail_lines(step: Step, metric: str) -> list[tuple[str, str]]:
    """Each class's p99 ``metric`` tail in words, where its own attribution names a cause (``verdict`` cause or
    time): (class, line)."""
    out = []
    for c in step.classes or ():
        found = next((a for a in (c.tail.attributions if c.tail else ()) if a.metric == f"{metric}_s"
                      and a.quantile == 0.99 and a.verdict in ("cause", "time")), None)
        if found is not None:
            out.append((c.name, found.line))
    return out


def probe_line(summary: Summary) -> str | None:
    """``load.probes``: their TTFT at the knee's step (else the last judged one) against the first step's, the wait a
    new request met as the load grew; None without probes."""
    steps = [st for st in summary.steps if st.probes and st.probes.latency_ms.get("ttft")]
    if not steps:
        return None
    at = next((st for st in steps if st.index == summary.knee.step_index), steps[-1])

    def ttft(st: Step) -> str:
        p = st.probes.latency_ms["ttft"]  # type: ignore[union-attr]  # steps with probes only (filtered above)
        return f"p50 {p.p50:,.1f} ms, p95 {p.p95:,.1f} ms over {p.count} probes"

    first = f" (step {steps[0].index}: {ttft(steps[0])})" if steps[0] is not at else ""
    return f"probes (step {at.index}): TTFT {ttft(at)}{first}"
