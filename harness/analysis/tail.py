"""Explain the tail: which request feature separates one step's slow requests from the rest. Pure.

For each latency metric (TTFT, TPOT, E2E, TTFO) and tail quantile (p99, p95), the tail is the requests
strictly above the step's quantile of that metric (rank ``floor(q·(n−1))``, as ``metrics/sketch.py``);
requests without the metric (failures, one-token answers) are left out of it. Each feature is tested,
tail against rest, with a test suited to it (``analysis/rank_tests.py``):

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
so the same step gives the same answer; the result says when it sampled). At 100k requests, all four
metrics and both quantiles take ~0.1 s of CPU (``python -m benchmarks.tail_attribution``).
"""

from __future__ import annotations

import math
import random
import re
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from itertools import compress
from operator import attrgetter

from harness.analysis.rank_tests import chi2_independence, fisher_exact, holm, mann_whitney_counts

__all__ = ["CAUSES", "METRICS", "FeatureTest", "StepTails", "TailAttribution", "TailParams", "TailRow", "explain_tail"]

METRICS = {"ttft_s": "TTFT", "tpot_s": "TPOT", "e2e_s": "E2E", "ttfo_s": "TTFO"}
CAUSES = {
    "prefill": "the tail is prefill-bound",
    "long_answers": "long answers",
    "queueing": "queueing",
    "connect": "connect/TLS",
    "one_worker": "one worker (client host?)",
    "cache_misses": "cache misses",
    "late_turns": "late session turns",
    "after_errors": "after errors (reconnects, retries)",
    "outside_noise": "noise from outside this test (shared infrastructure?)",
}


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


@dataclass(frozen=True)
class TailParams:
    quantiles: tuple[float, ...] = (0.99, 0.95)
    alpha: float = 0.01
    """Family-wise error per (metric, quantile), Holm–Bonferroni over the features tested."""
    min_tail: int = 8
    min_ratio: float = 1.5
    """Material numeric effect: medians ≥ 1.5× apart. A smaller gap in, say, prompt length moves prefill time by
    < 1.5×, too little to explain a p99 that usually sits 2–10× above the median."""
    min_share_points: float = 0.20
    """Material flag effect: shares ≥ 20 points apart, i.e. the flag accounts for at least a fifth of the tail."""
    max_rest: int = 5_000
    """Above this many requests the rest is a uniform sample of this size (every tail request is kept)."""
    seed: int = 0
    hot_factor: float = 3.0
    tail_per_window: int = 2
    """Expected tail requests per time window: fine enough to see a 200 ms stall, coarse enough for χ²."""


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

    def to_dict(self) -> dict:
        return _plain(asdict(self))


@dataclass(frozen=True)
class StepTails:
    """Every (metric, quantile) of one step, in order; ``lines`` for the report, ``to_dict`` for summary.json."""

    attributions: list[TailAttribution]

    @property
    def lines(self) -> list[str]:
        return [a.line for a in self.attributions]

    def get(self, metric: str, quantile: float) -> TailAttribution | None:
        return next((a for a in self.attributions if a.metric == metric and a.quantile == quantile), None)

    def to_dict(self) -> dict:
        return {"attributions": [a.to_dict() for a in self.attributions]}


def _plain(x: object) -> object:
    if isinstance(x, float):
        return x if math.isfinite(x) else None  # JSON has no inf/NaN
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_plain(v) for v in x]
    return x


@dataclass(frozen=True)
class _Numeric:
    name: str
    more: str
    less: str
    nonzero_more: str
    nonzero_less: str
    more_cause: str | None = None
    less_cause: str | None = None


NUMERIC = (
    _Numeric("prompt_tokens", "had {x}longer prompts (median {t} vs {r} tokens)",
             "had {x}shorter prompts (median {t} vs {r} tokens)", "had a prompt more often ({t} vs {r})",
             "had a prompt less often ({t} vs {r})", "prefill"),
    _Numeric("output_tokens", "had {x}longer answers (median {t} vs {r} tokens)",
             "had {x}shorter answers (median {t} vs {r} tokens)", "had an answer more often ({t} vs {r})",
             "had an answer less often ({t} vs {r})", "long_answers"),
    _Numeric("cached_tokens", "had {x}more cached prompt tokens (median {t} vs {r})",
             "had {x}fewer cached prompt tokens (median {t} vs {r})",
             "had cached prompt tokens more often ({t} vs {r})", "had cached prompt tokens less often ({t} vs {r})",
             None, "cache_misses"),
    _Numeric("server_waiting", "were sent while a median of {t} requests waited at the server ({r} for the rest)",
             "were sent while fewer requests waited at the server (median {t} vs {r})",
             "were sent while requests waited at the server ({t} vs {r})",
             "were sent while requests waited at the server less often ({t} vs {r})", "queueing"),
    _Numeric("in_flight", "were sent with a median of {t} requests in flight on their worker ({r} for the rest)",
             "were sent with fewer requests in flight on their worker (median {t} vs {r})",
             "were sent with other requests in flight on their worker ({t} vs {r})",
             "were sent with other requests in flight less often ({t} vs {r})", "queueing"),
    _Numeric("turn", "were later session turns (median turn {t} vs {r})",
             "were earlier session turns (median turn {t} vs {r})", "were past turn 0 more often ({t} vs {r})",
             "were past turn 0 less often ({t} vs {r})", "late_turns"),
)
FLAGS = {  # feature: (tail has it more often, less often, cause when more often)
    "new_connection": ("were first on a new connection ({t} vs {r})",
                       "were less often first on a new connection ({t} vs {r})", "connect"),
    "after_error": ("followed a failed request on their connection ({t} vs {r})",
                    "less often followed a failed request ({t} vs {r})", "after_errors"),
}
_FEATURES = (*(s.name for s in NUMERIC), *FLAGS, "worker", "t_in_step_s")
_MISSING = -math.inf


def _num(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 10 or v == int(v) else f"{v:.1f}"


def _pct(v: float) -> str:
    return f"{100 * v:.0f}%"


def _counts(vals: list) -> Counter:
    c = Counter(vals)
    c.pop(None, None)  # missing
    return c


def _median(c: Counter) -> float:
    keys, half, seen = sorted(c), sum(c.values()) / 2, 0
    for i, k in enumerate(keys):
        seen += c[k]
        if seen > half:
            return k
        if seen == half:  # an even count splitting exactly here: the mean of the two middle values
            return (k + keys[i + 1]) / 2
    raise ValueError("median of no values")


def _rest_counts(uniform: Counter, excluded: Iterable) -> Counter:
    """The rest's value counts: the uniform sample's (counted once per step) minus its tail and missing rows."""
    c = uniform.copy()
    c.subtract(excluded)
    return Counter({k: v for k, v in c.items() if v > 0 and k is not None})


def _numeric(spec: _Numeric, ct: Counter, cr: Counter, params: TailParams) -> dict | None:
    nt, nr = sum(ct.values()), sum(cr.values())
    if nt < params.min_tail or nr < params.min_tail or len(ct.keys() | cr.keys()) < 2:
        return None  # too few known values, or a constant: nothing to test
    u = mann_whitney_counts(ct, cr)
    mt, mr = _median(ct), _median(cr)
    if mr > 0:
        ratio = mt / mr
        more = u.rank_biserial > 0
        material = ratio >= params.min_ratio if more else ratio <= 1 / params.min_ratio
        x = "" if ratio == 0 else f"{ratio if more else 1 / ratio:.1f}× "
        phrase = (spec.more if more else spec.less).format(x=x, t=_num(mt), r=_num(mr))
    else:  # the rest is mostly zeros (an idle queue, no cache hits): compare how often it is above zero
        st = sum(c for v, c in ct.items() if v > 0) / nt
        sr = sum(c for v, c in cr.items() if v > 0) / nr
        more = st > sr
        material = abs(st - sr) >= params.min_share_points and (u.rank_biserial > 0) == more
        if more and mt > 0:
            phrase = spec.more.format(x="", t=_num(mt), r=_num(mr))
        else:
            phrase = (spec.nonzero_more if more else spec.nonzero_less).format(t=_pct(st), r=_pct(sr))
    cause = spec.more_cause if more else spec.less_cause
    return dict(feature=spec.name, test="mann-whitney-u", n_tail=nt, n_rest=nr, p=u.p, effect=u.rank_biserial,
                tail_value=mt, rest_value=mr, material=material, phrase=phrase, cause=cause)


def _flag(name: str, ct: Counter, cr: Counter, params: TailParams) -> dict | None:
    a, b, c, d = ct[True], ct[False], cr[True], cr[False]
    if a + b < params.min_tail or c + d < params.min_tail or a + c == 0 or b + d == 0:
        return None
    st, sr = a / (a + b), c / (c + d)
    more_phrase, less_phrase, cause = FLAGS[name]
    phrase = (more_phrase if st > sr else less_phrase).format(t=_pct(st), r=_pct(sr))
    return dict(feature=name, test="fisher-exact", n_tail=a + b, n_rest=c + d, p=fisher_exact(a, b, c, d),
                effect=st - sr, tail_value=st, rest_value=sr, material=abs(st - sr) >= params.min_share_points,
                phrase=phrase, cause=cause if st > sr else None)


def _worker(ct: Counter, cr: Counter, params: TailParams) -> dict | None:
    nt, nr = sum(ct.values()), sum(cr.values())
    workers = sorted(ct.keys() | cr.keys(), key=str)
    if nt < params.min_tail or nr < params.min_tail or len(workers) < 2:
        return None
    w = max(workers, key=lambda k: ct[k] / nt - cr[k] / nr)
    a, c = ct[w], cr[w]
    p = min(1.0, len(workers) * fisher_exact(a, nt - a, c, nr - c, alternative="greater"))
    st, sr = a / nt, c / nr
    return dict(feature="worker", test=f"fisher-exact (one-sided, ×{len(workers)} workers)", n_tail=nt, n_rest=nr,
                p=p, effect=st - sr, tail_value=st, rest_value=sr, material=st - sr >= params.min_share_points,
                phrase=f"came from worker {w} ({_pct(st)} vs {_pct(sr)} of the rest)", cause="one_worker")


def _bins(vals: list[float], k: int, per_s: float) -> list[int]:
    counts = [0] * k
    for b, c in Counter(map(int, map(per_s.__mul__, vals))).items():  # C-level binning
        counts[min(k - 1, max(0, b))] += c
    return counts


def _time(tail: list, rest: list, params: TailParams) -> dict | None:
    t, r = [v for v in tail if v is not None], [v for v in rest if v is not None]
    if len(t) < params.min_tail or len(r) < params.min_tail:
        return None
    span = max(max(t), max(r))
    if span <= 0:
        return None
    k = min(500, max(2, len(t) // params.tail_per_window))
    width = span / k
    tc, rc = _bins(t, k, 1 / width), _bins(r, k, 1 / width)
    _, p = chi2_independence(tc, rc)
    nt, nr = len(t), len(r)
    hot = [i for i in range(k) if tc[i] > 0 and tc[i] / nt >= params.hot_factor * rc[i] / nr]
    st, sr = sum(tc[i] for i in hot) / nt, sum(rc[i] for i in hot) / nr
    phrase = (f"were spread over time, not over request features: {_pct(st)} of them fell in {len(hot)} of {k} "
              f"windows of {width:.2g} s that held {_pct(sr)} of the other requests")
    return dict(feature="t_in_step_s", test=f"chi-square ({k} windows)", n_tail=nt, n_rest=nr, p=p, effect=st - sr,
                tail_value=st, rest_value=sr, material=st - sr >= params.min_share_points, phrase=phrase,
                cause="outside_noise")


def _connect_cost(label: str, metric: list, flags: list) -> str:
    """"+38 ms TTFT": the median metric on a new connection minus on a reused one, over the uniform sample."""
    new = [m for m, f in zip(metric, flags, strict=True) if f is True and m != _MISSING]
    old = [m for m, f in zip(metric, flags, strict=True) if f is False and m != _MISSING]
    if not new or not old:
        return CAUSES["connect"]
    return f"{CAUSES['connect']}, +{1000 * (statistics.median(new) - statistics.median(old)):.0f} ms {label}"


def _attribute(metric: str, q: float, thr: float, n: int, tail: list[int], rest: list[int], excluded: list[int],
               uniform: list[int], cols: dict[str, list], base: dict[str, Counter], mcol: list, params: TailParams,
               sampled: str | None) -> TailAttribution:
    label, ql = METRICS.get(metric, metric), f"p{100 * q:g}"
    head = dict(metric=metric, quantile=q, threshold_s=thr, n=n, n_tail=len(tail), n_rest=len(rest), sampled=sampled)
    if len(tail) < params.min_tail:
        line = f"{ql} {label}: too few tail requests to attribute ({len(tail)} above {ql} of {n})"
        return TailAttribution(**head, verdict="too_few", causes=[], line=line)
    raw = []
    for name in _FEATURES:
        col = cols[name]
        tv = list(map(col.__getitem__, tail))
        if name == "t_in_step_s":
            res = _time(tv, list(map(col.__getitem__, rest)), params)
        else:
            ct, cr = _counts(tv), _rest_counts(base[name], map(col.__getitem__, excluded))
            spec = next((s for s in NUMERIC if s.name == name), None)
            res = (_numeric(spec, ct, cr, params) if spec else _flag(name, ct, cr, params) if name in FLAGS
                   else _worker(ct, cr, params))
        if res is not None:
            raw.append(res)
    adjusted = holm([r["p"] for r in raw])
    tests = []
    for r, ph in zip(raw, adjusted, strict=True):
        words = CAUSES.get(r["cause"]) if r["cause"] else None
        if r["cause"] == "connect":
            words = _connect_cost(label, list(map(mcol.__getitem__, uniform)),
                                  list(map(cols["new_connection"].__getitem__, uniform)))
        tests.append(FeatureTest(**r, p_holm=ph, significant=ph <= params.alpha, cause_words=words))
    counted = sorted((t for t in tests if t.significant and t.material and t.feature != "t_in_step_s"),
                     key=lambda t: -abs(t.effect))
    correction = f"Holm–Bonferroni over {len(tests)} tests, family-wise α = {params.alpha:g}"
    timed = next((t for t in tests if t.feature == "t_in_step_s" and t.significant and t.material), None)
    if counted:
        top = counted[0]
        also = [t.cause_words or re.sub(r" \(.*?\)", "", t.phrase) for t in counted[1:3]]  # its words, no figures
        line = f"{ql} {label} requests {top.phrase}" + (f": {top.cause_words}" if top.cause_words else "")
        line += f" (also: {'; '.join(also)})" if also else ""
        verdict = "cause"
    elif timed is not None:
        line, verdict = f"{ql} {label} requests {timed.phrase}: {timed.cause_words}", "time"
    else:
        line = f"{ql} {label}: no single cause ({len(tests)} features tested, Holm–Bonferroni at α = {params.alpha:g})"
        verdict = "none"
    return TailAttribution(**head, verdict=verdict, causes=[t.feature for t in counted] + ([timed.feature] if (
        timed and not counted) else []), line=line, correction=correction, tests=tests)


def _column(rows: Sequence[TailRow], name: str) -> tuple[list, int]:
    """A metric's values, missing ones (None, NaN: failures, one-token answers) as -inf; and how many are known."""
    col = list(map(attrgetter(name), rows))
    try:
        if not math.isnan(sum(col)):  # one C-level pass finds both: None raises, NaN propagates
            return col, len(col)
    except TypeError:
        pass
    col = [_MISSING if v is None or v != v else v for v in col]
    return col, len(col) - col.count(_MISSING)


def _tails(col: list, known: int, uniform: list[int], quantiles: Sequence[float]) -> list[tuple[float, float, list]]:
    """Each quantile's exact threshold and the indices above it. When the rest is sampled, the sample's quantile a
    few standard errors lower bounds them first, so only the top few percent are sorted, not 100k values."""
    n, missing = len(col), len(col) - known
    lowest = missing + math.floor(min(quantiles) * (known - 1))
    cand: Sequence[int] = range(n)
    known_sample = sorted(v for v in map(col.__getitem__, uniform) if v != _MISSING) if len(uniform) < n else []
    if known_sample:
        q = min(quantiles)
        q_low = max(0.0, q - 0.01 - 4 * math.sqrt(q * (1 - q) / len(known_sample)))
        bound = float(known_sample[math.floor(q_low * (len(known_sample) - 1))])
        above = list(compress(range(n), map(bound.__lt__, col)))
        cand = above if n - len(above) <= lowest else cand  # else the sample misled us (rare): sort everything
    vals = sorted(map(col.__getitem__, cand))
    offset = n - len(vals)
    out = []
    for q in quantiles:
        thr = float(vals[missing + math.floor(q * (known - 1)) - offset])  # float: int.__lt__(float) is NotImplemented
        out.append((q, thr, [i for i in cand if col[i] > thr]))
    return out


def explain_tail(rows: Sequence[TailRow], params: TailParams = TailParams(),
                 metrics: Sequence[str] = tuple(METRICS)) -> StepTails:
    """Attribute each metric's p99 and p95 tail to a feature of the requests (module docstring); metrics that no
    request has are left out."""
    n = len(rows)
    uniform = sorted(random.Random(params.seed).sample(range(n), params.max_rest)) if n > params.max_rest else list(
        range(n))
    found = []
    for m in metrics:
        col, known = _column(rows, m)
        if known:
            found.append((m, col, known, _tails(col, known, uniform, params.quantiles)))
    needed = sorted(set(uniform).union(*(t for *_, per_q in found for _, _, t in per_q)))
    pos = {i: j for j, i in enumerate(needed)}
    sub = list(map(rows.__getitem__, needed))
    cols = {f: list(map(attrgetter(f), sub)) for f in _FEATURES}
    uni = list(map(pos.__getitem__, uniform))
    base = {f: Counter(map(cols[f].__getitem__, uni)) for f in _FEATURES if f != "t_in_step_s"}
    out = []
    for m, col, known, per_q in found:
        mcol = list(map(col.__getitem__, needed))
        for q, thr, tail in per_q:
            rest = [j for j in uni if _MISSING < mcol[j] <= thr]
            excluded = [j for j in uni if not _MISSING < mcol[j] <= thr]
            sampled = None
            if n > params.max_rest:
                sampled = (f"every tail request and a uniform sample of {len(rest)} of the {known - len(tail)} others "
                           f"(seed {params.seed})")
            out.append(_attribute(m, q, thr, known, list(map(pos.__getitem__, tail)), rest, excluded, uni, cols, base,
                                  mcol, params, sampled))
    return StepTails(out)
