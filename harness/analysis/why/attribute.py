"""Explain the tail: which request feature separates one step's slow requests from the rest. Pure.

For each latency metric (TTFT, TPOT, E2E, TTFO) and tail quantile (p99, p95), the tail is the requests
strictly above the step's quantile of that metric (rank ``floor(q·(n−1))``, as ``metrics/sketch.py``);
requests without the metric (failures, one-token answers) are left out of it. Each feature is tested,
tail against rest, with a test suited to it (``analysis/why/rank_tests.py``):

- numbers (prompt, output and cached tokens, in flight on the worker, waiting at the server, session
  turn): Mann–Whitney U; the effect is the ratio of medians ("4.1× longer prompts (median 3,900 vs 950
  tokens)"), or, when the rest's median is 0, the share above 0;
- flags (first on a new connection, after a failed request): Fisher's exact test (cheap at any count,
  ``rank_tests.fisher_exact``); the effect is the two shares ("71% vs 3%");
- ``worker``: does the tail concentrate on one worker — one-sided Fisher for the worker whose share
  grows most, Bonferroni ×K over the K workers;
- time: χ² of tail vs rest over ~n_tail/2 windows of the step; the effect is the tail's share in "hot"
  windows (tail share ≥ 3× the rest's) minus the rest's share there.

Holm–Bonferroni keeps the family-wise error of each (metric, quantile) at α = 0.01. A feature counts
when it is significant after that and its effect is material (``TailParams``); counted features are
ranked by effect size on one scale, |P(tail > rest) − P(tail < rest)| (rank-biserial) for numbers, the
share difference otherwise. Time is named only when no request feature counts: a tail clustered in
time but not in request features comes from outside this test. Fewer than 8 tail requests: "too few
tail requests to attribute" (the U test's normal approximation is off by > 0.01 below that).

Cost: every tail request is kept; the rest is a uniform sample of at most 5,000 requests (seeded,
so the same step gives the same answer; the result says when it sampled). Only the metrics are read for
every request (one pass each; only values above a bound from the sample are sorted); the features are read
for the rows tested, the tails and the sample (~20k of 100k), and counted, not kept per row. At 100k
requests the master's rows take ~0.17-0.2 s of CPU, ~8-9× a ``sorted()`` of their 100k TTFTs, on a 2-CPU EPYC VM
(``python -m benchmarks.tail_attribution``: ``explain_rows_ms`` against ``sorted_ms``).
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from harness.analysis.why.features import (
    CAUSES,
    FEATURES,
    MISSING,
    QUEUE_STATES,
    TailParams,
    client_made,
    code_features,
    connect_cost,
    explains,
    feature_test,
    flat_tail,
    mixture,
    share_phrase,
    time_test,
)
from harness.analysis.why.pauses import StepPauses
from harness.analysis.why.rank_tests import holm

if TYPE_CHECKING:
    import numpy as np

    from harness.analysis.why.counts import Coded

__all__ = ["CAUSES", "METRICS", "FeatureTest", "StepTails", "TailAttribution", "TailParams", "TailRow",
           "explain_columns", "explain_tail", "pause_words"]

METRICS = {"ttft_s": "TTFT", "tpot_s": "TPOT", "e2e_s": "E2E", "ttfo_s": "TTFO"}
ONLY_FOR = {"send_ms": ("ttft_s", "ttfo_s", "e2e_s"), "loop_lag_ms": ("ttft_s", "ttfo_s"),
            "late_first": ("ttft_s", "ttfo_s"), "in_pause": ("tpot_s", "e2e_s"), "in_pause_first": ("ttft_s", "ttfo_s")}
"""Features tested for some metrics only: the ones whose time they can be in. Writing the request is inside TTFT,
TTFO and E2E, never between two tokens; the loop's lag just before the send is inside none, but a loop behind at
the send reads the first token late (where the kernel does not date it). Tested against TPOT or E2E they named the
client for tails a busy machine made (7 of 38 attributions in 20 null runs, ``benchmarks/tail_null.py``). A pause
after the first token cannot hold a TTFT back: TTFT and TTFO test ``in_pause_first``, the rest ``in_pause``. When the
kernel dated the receives (``TailParams.kernel_stamps``), a late read is in no time but ``late_first``'s, and
``loop_lag_ms`` is not tested at all."""

@dataclass(frozen=True, slots=True, kw_only=True)
class TailRow:
    """One request of the step; None is missing (not measured, not known)."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None
    ttfo_s: float | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None
    new_connection: bool | None = None
    worker: str | int | None = None
    t_in_step_s: float | None = None
    """Seconds since the step began, at send."""
    in_flight: int | None = None
    """Requests in flight on the worker at send."""
    server_waiting: int | None = None
    """The server's waiting queue at send (nearest scrape)."""
    turn: int | None = None
    after_error: bool | None = None
    """The previous request on this connection failed."""
    in_pause: bool | None = None
    """In flight through a server-wide pause (``analysis/why/pauses.py``); None when the stream could not say."""
    in_pause_first: bool | None = None
    """Waited for its first token through a server-wide pause: the part of ``in_pause`` that can hold a TTFT back."""
    send_ms: float | None = None
    """Writing the request (its connect left out), ms."""
    loop_lag_ms: float | None = None
    """The worker's event-loop lag just before the send, ms."""
    late_stamps: bool | None = None
    """Some of its chunk times came from a late receive of several chunks (``RequestRecord.late_chunks``): the
    reader fell behind, so its TTFT (or a gap) may be the client's."""
    late_first: bool | None = None
    """Its first chunk came in such a receive (``metrics.rows.FLAG_LATE_FIRST``): its TTFT may be the reader's."""
    behind_long_prefill: bool | None = None
    """Waited for its first token while a long prompt was prefilled (``analysis/why/prefill_hol.py``); None for a long
    prompt itself."""


@dataclass(frozen=True)
class FeatureTest:
    feature: str
    test: str
    n_tail: int
    n_rest: int
    p: float
    p_holm: float
    effect: float
    """Rank-biserial (numbers) or tail share − rest share (flags, worker, hot time windows); ranks the causes."""
    tail_value: float
    rest_value: float
    """Medians (numbers) or shares (the rest)."""
    material: bool
    significant: bool
    phrase: str
    """Reads after "p99 TTFT requests": "had 4.1× longer prompts (median 3,900 vs 950 tokens)"."""
    cause: str | None
    """A key of CAUSES, or None when this direction has no usual cause (e.g. shorter prompts in the tail)."""
    cause_words: str | None
    over: float | None = None
    """Numbers: where "above" separates tail from rest most; a tail request above it is one this feature explains
    (``shares``)."""


@dataclass(frozen=True)
class TailAttribution:
    metric: str
    quantile: float
    threshold_s: float | None
    n: int
    """Requests with this metric."""
    n_tail: int
    n_rest: int
    """Rest requests tested (a sample when ``sampled`` says so)."""
    verdict: str
    """"cause", "time" (clustered in time, not in features), "none" or "too_few"."""
    causes: list[str]
    """Features that count, largest effect first."""
    line: str
    correction: str = ""
    sampled: str | None = None
    tests: list[FeatureTest] = field(default_factory=list)
    shares: list[dict] = field(default_factory=list)
    """Per counted feature that explains single requests: {feature, explains, of, phrase}, most first."""

    def to_dict(self) -> dict:
        return _plain(asdict(self))


@dataclass(frozen=True)
class StepTails:
    """Every (metric, quantile) of one step, in order; ``lines`` for the report, ``to_dict`` for summary.json."""

    attributions: list[TailAttribution]
    pauses: StepPauses | None = None
    """The step's server-wide pauses, when its rows carried stream silences."""

    @property
    def lines(self) -> list[str]:
        return [a.line for a in self.attributions]

    def get(self, metric: str, quantile: float) -> TailAttribution | None:
        return next((a for a in self.attributions if a.metric == metric and a.quantile == quantile), None)

    def to_dict(self) -> dict:
        out: dict = {"attributions": [a.to_dict() for a in self.attributions]}
        if self.pauses is not None:
            out["pauses"] = self.pauses.to_dict()
        return out


def _plain(x: object) -> Any:
    if isinstance(x, float):
        return x if math.isfinite(x) else None  # JSON has no inf/NaN
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_plain(v) for v in x]
    return x


def _tested(feature: str, metric: str, params: TailParams) -> bool:
    """``ONLY_FOR``, and ``loop_lag_ms`` for none when the kernel dated the receives."""
    return metric in ONLY_FOR.get(feature, METRICS) and not (feature == "loop_lag_ms" and params.kernel_stamps)


def _attribute(metric: str, q: float, thr: float, n: int, tail: list[int], rest: np.ndarray, ex: np.ndarray,
               uniform: list[int], cols: dict, coded: dict[str, Coded], times: np.ndarray, seconds: Callable[[], list],
               params: TailParams, sampled: str | None, words: Mapping[str, str],
               medians: tuple[float, float]) -> TailAttribution:
    label, ql = METRICS.get(metric, metric), f"p{100 * q:g}"
    head: dict[str, Any] = dict(metric=metric, quantile=q, threshold_s=thr, n=n, n_tail=len(tail), n_rest=len(rest),
                                sampled=sampled)
    if len(tail) < params.min_tail:
        return TailAttribution(**head, verdict="too_few", causes=[], line=f"{ql} {label}: too few tail requests to "
                               f"attribute ({len(tail)} above {ql} of {n})")
    if flat := flat_tail(medians, params):  # the tail is the distribution's own spread: no outliers to explain
        return TailAttribution(**head, verdict="none", causes=[], line=f"{ql} {label}: {flat}")
    import numpy as np
    at = np.array(tail, dtype=np.int64)
    found = (time_test(times[at], times[rest], params)
             if f == "t_in_step_s" else feature_test(f, coded[f], at, ex, params)
             for f in FEATURES if _tested(f, metric, params))
    raw = [r for r in found if r is not None]
    adjusted = holm([r["p"] for r in raw])
    tests = []
    for r, ph in zip(raw, adjusted, strict=True):
        said = (words.get(r["cause"]) or CAUSES.get(r["cause"])) if r["cause"] else None
        if r["cause"] == "connect":
            said = connect_cost(label, seconds(), list(map(cols["new_connection"].__getitem__, uniform)))
        tests.append(FeatureTest(**r, p_holm=ph, significant=ph <= params.alpha, cause_words=said))
    counted = sorted((t for t in tests if t.significant and t.material and t.feature != "t_in_step_s"),
                     key=lambda t: -abs(t.effect))
    counted, grew = client_made(counted)  # grew: what to say of the queue at send it took out, or ""
    shares = _shares(counted, tail, cols)
    timed = next((t for t in tests if t.feature == "t_in_step_s" and t.significant and t.material), None)
    if counted and timed is not None and {t.feature for t in counted} <= QUEUE_STATES \
            and abs(timed.effect) > abs(counted[0].effect):
        # Only the queue at send separates the tail, and the tail sits in a few windows more than it follows the
        # queue: the queue grew because something stalled then (the server, or outside this test), not the load.
        line = (f"{ql} {label} requests {timed.phrase}: {timed.cause_words}; the queue at send grew with it "
                f"({counted[0].phrase.removeprefix('were ')})")
        verdict, counted = "time", [timed, *counted]
    elif counted:
        top = counted[0]
        also = [w for w in dict.fromkeys(t.cause_words or re.sub(r" \(.*?\)", "", t.phrase) for t in counted[1:3])
                if w != top.cause_words]  # its words, no figures, each once
        line = f"{ql} {label} requests {top.phrase}" + (f": {top.cause_words}" if top.cause_words else "")
        line, verdict = line + (f" (also: {'; '.join(also)})" if also else ""), "cause"
        mixed = mixture(shares, len(tail))
        if len(mixed) > 1:  # several causes, each explaining tail requests the others do not: say so with shares
            parts = [f"{len(hit)} of {len(tail)} {phrase}" + (f" ({t.cause_words})" if t.cause_words else "")
                     for t, hit, phrase in mixed]
            line = f"{ql} {label}: {len(mixed)} causes — " + "; ".join(parts)
            counted = (first := [t for t, _, _ in mixed]) + [t for t in counted if t not in first]
        line += grew
    elif timed is not None:
        line, verdict = f"{ql} {label} requests {timed.phrase}: {timed.cause_words}", "time"
    else:
        line = f"{ql} {label}: no single cause ({len(tests)} features tested, Holm–Bonferroni at α = {params.alpha:g})"
        verdict = "none"
    return TailAttribution(**head, verdict=verdict, causes=[t.feature for t in counted] + ([timed.feature] if (
        timed and not counted) else []), line=line, tests=tests,
        correction=f"Holm–Bonferroni over {len(tests)} tests, family-wise α = {params.alpha:g}",
        shares=[{"feature": t.feature, "explains": len(hit), "of": len(tail), "phrase": phrase}
                for t, hit, phrase in shares])


def _shares(counted: list[FeatureTest], tail: list[int],
            cols: Mapping[str, Sequence[Any] | np.ndarray]) -> list[tuple[FeatureTest, set, str]]:
    """Each counted feature that explains single requests, with the tail requests it explains, most first."""
    out = []
    for t in counted:
        phrase = share_phrase(t.feature, t.over)
        if phrase is not None:
            col = cols[t.feature]
            out.append((t, {i for i in tail if explains(t.feature, col[i], t.over)}, phrase))
    return sorted(out, key=lambda x: -len(x[1]))


def _tails(col: np.ndarray, known: int, quantiles: Sequence[float]) -> list[tuple[float, float, np.ndarray]]:
    """Each quantile's exact threshold (a value of the column: in the rows' tenths of a millisecond, an integer) and
    the indices above it, ascending. ``col``: float64, missing values NaN; ``known``: how many are not. One
    partition of the known values for all the quantiles (a sort of 100k values as Python ints cost more than the
    tests that follow)."""
    import numpy as np

    vals = col[~np.isnan(col)] if known < len(col) else col
    ranks = [math.floor(q * (known - 1)) for q in quantiles]
    part = np.partition(vals, ranks)
    return [(q, float(part[k]), np.flatnonzero(col > part[k])) for q, k in zip(quantiles, ranks, strict=True)]


def _upper_median(values: np.ndarray) -> float:
    """``median_of`` of an array: the upper median, 0 for none."""
    import numpy as np

    k = len(values) // 2
    return float(np.partition(values, k)[k]) if len(values) else 0.0


DEFAULT_PARAMS = TailParams()


def explain_tail(rows: Sequence[TailRow] | Mapping[str, Sequence], params: TailParams = DEFAULT_PARAMS,
                 metrics: Sequence[str] = tuple(METRICS), words: Mapping[str, str] | None = None) -> StepTails:
    """Attribute each metric's p99 and p95 tail to a feature of the requests (module docstring); metrics that no
    request has are left out. ``rows``: TailRows, or the same as columns (a list per TailRow field, all as long;
    what the master builds from the workers' rows without a TailRow per request); ``words``: as ``explain_columns``."""
    if isinstance(rows, Mapping):
        return explain_columns(rows, params, metrics=metrics, words=words)
    rows = rows if isinstance(rows, list) else list(rows)

    def feature(name: str) -> Callable[[list[int]], list]:  # read for the rows tested only
        return lambda idx: list(map(attrgetter(name), map(rows.__getitem__, idx)))

    return explain_columns({m: list(map(attrgetter(m), rows)) for m in METRICS}, params, metrics=metrics,
                           derived={f: feature(f) for f in FEATURES}, words=words)


def explain_columns(columns: Mapping[str, Sequence[Any] | np.ndarray], params: TailParams = DEFAULT_PARAMS, *,
                    metrics: Sequence[str] = tuple(METRICS), per_s: int = 1,
                    derived: Mapping[str, Callable[[list[int]], list]] | None = None,
                    pauses: StepPauses | None = None, words: Mapping[str, str] | None = None) -> StepTails:
    """``explain_tail`` of columns as stored: the metrics in 1/``per_s`` s (the rows' tenths of a millisecond:
    10,000; only ranks and a few values are read, so no column is converted), and a feature in ``derived`` computed
    for the rows tested only (the tails and the rest's sample, ~20% of 100k): ``derived[f](indices)`` is its values
    at those indices, in that order. The answer is the same as from the whole columns in seconds. ``pauses``: the
    step's server-wide pauses, for the words of the ``in_pause`` cause and the result; ``words``: a cause's words
    with this step's figures (``CAUSES`` otherwise)."""
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise ValueError(f"explain_tail: unknown metrics {unknown}; choose from {list(METRICS)}")
    import numpy as np  # here, not at import: workers and masters start without it

    n = len(next(iter(columns.values()), ()))
    uniform = sorted(random.Random(params.seed).sample(range(n), params.max_rest)) if n > params.max_rest else list(
        range(n))
    found = []
    for m in metrics:
        col = np.asarray(columns[m], dtype=np.float64)  # None: NaN, missing (failures, one-token answers)
        known = n - int(np.isnan(col).sum())
        if known:
            found.append((m, col, known, _tails(col, known, params.quantiles)))
    at = np.array(uniform, dtype=np.int64)
    needed = np.union1d(at, np.concatenate([t for *_, per_q in found for _, _, t in per_q] or [at])).astype(np.int64)
    idx = needed.tolist()
    derived = derived or {}
    cols = {f: derived[f](idx) if f in derived else _gather(columns[f], needed, idx) if f in columns
            else [None] * len(idx) for f in FEATURES}
    words = {**(words or {}), **({"pauses": pause_words(pauses)} if pauses is not None and pauses.pauses else {})}
    uni = np.searchsorted(needed, at)  # the uniform sample's positions among the rows tested
    coded = code_features(cols, uni)
    times = np.array(cols["t_in_step_s"], dtype=np.float64)  # None: NaN
    out = []
    for m, col, known, per_q in found:
        values = col[at]

        def seconds(values: np.ndarray = values) -> list:  # only the connect cost reads them: missing as MISSING
            return (np.where(np.isnan(values), MISSING, values) / per_s).tolist()

        for q, thr, tail in per_q:
            in_rest = values <= thr  # NaN: never
            rest, excluded = uni[in_rest], uni[~in_rest]
            sampled = None
            if n > params.max_rest:
                sampled = (f"every tail request and a uniform sample of {len(rest)} of the {known - len(tail)} others "
                           f"(seed {params.seed})")
            medians = (_upper_median(col[tail]) / per_s, _upper_median(values[in_rest]) / per_s)
            out.append(_attribute(m, q, thr / per_s, known, np.searchsorted(needed, tail).tolist(), rest, excluded,
                                  uni.tolist(), cols, coded, times, seconds, params, sampled, words, medians))
    return StepTails(out, pauses)


def _gather(col: Sequence[Any] | np.ndarray, needed: np.ndarray, idx: list[int]) -> Sequence[Any] | np.ndarray:
    """A column's values at the rows tested: an array's by one gather, a list's as a list."""
    import numpy as np

    return col[needed] if isinstance(col, np.ndarray) else list(map(col.__getitem__, idx))


def pause_words(pauses: StepPauses) -> str:
    """The pauses' figures and what they suggest: the server (seen on every worker), or one client host."""
    seen = {w for p in pauses.pauses for w in p.workers}
    if pauses.workers > 1 and len(seen) == 1:
        return f"{pauses.words()}: one worker's streams stopped, not the others' (that client host stalled?)"
    what = "the server stops periodically" if pauses.period else "the server stopped every stream at once"
    return f"{pauses.words()}: {what} — garbage collection, a noisy neighbour or a scheduler outside this test?"
