"""Each feature of a request, how ``analysis/why/attribute.py`` tests it tail against rest, and its words. Pure.

Numbers (Mann–Whitney U on value counts), flags (Fisher; ``in_pause``: ``analysis/why/pauses.py``;
``behind_long_prefill``: ``analysis/why/prefill_hol.py``), the worker (one-sided Fisher for the worker whose share
grows most, ×K workers) and time (χ² over windows); see ``tail.py``'s docstring for the rules. Each test
returns the fields of a ``FeatureTest`` but its Holm-adjusted p, or None when the feature cannot be tested
(too few known values, a constant). A phrase reads after "p99 TTFT requests"; CAUSES gives the cause words.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.analysis.why.rank_tests import chi2_independence, fisher_exact

if TYPE_CHECKING:  # numpy is imported when a tail is first explained, not when a worker or master starts
    import numpy as np

    from harness.analysis.why.counts import Coded


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
    min_lead: float = 1.10
    """A tail whose median is less than this many times the rest's has nothing that stands out to explain: its
    requests are the distribution's own spread (20 null runs: "time" named for tails 3-6% above the rest)."""
    tail_per_window: int = 2
    """Expected tail requests per time window: fine enough to see a 200 ms stall, coarse enough for χ²."""
    kernel_stamps: bool = False
    """The step's receives were dated by the kernel (``client/inflight.py``): a worker's loop that lagged cannot
    have dated a first token late (a first chunk read with later ones is ``late_first``), so ``loop_lag_ms`` is
    not tested (``tail.ONLY_FOR``). Tested, it named the client for TTFT tails the client did not make (once in each
    of two sets of 20 runs of ``benchmarks/tail_null.py`` on a busy machine: the tail's client part 0.29 and 0.39
    ms, the rest's 0.15 and 0.14)."""

    def __post_init__(self) -> None:
        problems = [f"quantiles: each must be in (0, 1), got {q!r}" for q in self.quantiles if not 0 < q < 1]
        problems += ["quantiles: give at least one, got ()"] if not self.quantiles else []
        problems += [f"alpha: must be in (0, 1), got {self.alpha!r}"] if not 0 < self.alpha < 1 else []
        problems += [f"min_tail: must be >= 2, got {self.min_tail!r}"] if self.min_tail < 2 else []
        problems += [f"max_rest: must be >= 100, got {self.max_rest!r}"] if self.max_rest < 100 else []
        problems += [f"min_ratio: must be > 1, got {self.min_ratio!r}"] if not self.min_ratio > 1 else []
        problems += [f"min_lead: must be >= 1, got {self.min_lead!r}"] if not self.min_lead >= 1 else []
        problems += [f"tail_per_window: must be >= 1, got {self.tail_per_window!r}"] if self.tail_per_window < 1 else []
        if problems:
            raise ValueError("TailParams: " + "; ".join(problems))

__all__ = ["CAUSES", "FEATURES", "MISSING", "QUEUE_STATES", "TailParams", "client_made", "code_features",
           "connect_cost", "explains", "feature_test", "flat_tail", "median_of", "mixture", "share_phrase", "time_test"]

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
    "pauses": "every stream stopped at once",
    "hol": "head-of-line blocking behind long prefills; consider chunked prefill",
    "client": "the load generator (it was behind: this is the client, not the server)",
}


@dataclass(frozen=True)
class _Numeric:
    name: str
    more: str
    less: str
    nonzero_more: str
    nonzero_less: str
    more_cause: str | None = None
    less_cause: str | None = None
    above: str = ""
    """A minority of the tail far above the rest (medians alike): "... over {v} ... more often ({t} vs {r})"."""
    floor: float = 0.0
    """Values up to this count as 0: below it the feature cannot add to a latency that needs explaining (a 0.3 ms
    send of a long prompt's body is not the client holding the tail back)."""


NUMERIC = (
    _Numeric("prompt_tokens", "had {x}longer prompts (median {t} vs {r} tokens)",
             "had {x}shorter prompts (median {t} vs {r} tokens)", "had a prompt more often ({t} vs {r})",
             "had a prompt less often ({t} vs {r})", "prefill",
             above="had prompts over {v} tokens more often ({t} vs {r})"),
    _Numeric("output_tokens", "had {x}longer answers (median {t} vs {r} tokens)",
             "had {x}shorter answers (median {t} vs {r} tokens)", "had an answer more often ({t} vs {r})",
             "had an answer less often ({t} vs {r})", "long_answers",
             above="had answers over {v} tokens more often ({t} vs {r})"),
    _Numeric("cached_tokens", "had {x}more cached prompt tokens (median {t} vs {r})",
             "had {x}fewer cached prompt tokens (median {t} vs {r})",
             "had cached prompt tokens more often ({t} vs {r})", "had cached prompt tokens less often ({t} vs {r})",
             None, "cache_misses"),
    _Numeric("server_waiting", "were sent while a median of {t} requests waited at the server ({r} for the rest)",
             "were sent while fewer requests waited at the server (median {t} vs {r})",
             "were sent while requests waited at the server ({t} vs {r})",
             "were sent while requests waited at the server less often ({t} vs {r})", "queueing",
             above="were sent while over {v} requests waited at the server more often ({t} vs {r})"),
    _Numeric("in_flight", "were sent with a median of {t} requests in flight on their worker ({r} for the rest)",
             "were sent with fewer requests in flight on their worker (median {t} vs {r})",
             "were sent with other requests in flight on their worker ({t} vs {r})",
             "were sent with other requests in flight less often ({t} vs {r})", "queueing",
             above="were sent with over {v} requests in flight on their worker more often ({t} vs {r})"),
    _Numeric("send_ms", "took {x}longer to send (median {t} vs {r} ms)",
             "took {x}less time to send (median {t} vs {r} ms)", "took over 1 ms to send more often ({t} vs {r})",
             "took over 1 ms to send less often ({t} vs {r})", "client",
             above="took over {v} ms to send more often ({t} vs {r})", floor=1.0),
    _Numeric("loop_lag_ms", "were sent while the worker's loop lagged {x}more (median {t} vs {r} ms)",
             "were sent while the worker's loop lagged less (median {t} vs {r} ms)",
             "were sent while the worker's loop lagged over 1 ms ({t} vs {r})",
             "were sent while the worker's loop lagged over 1 ms less often ({t} vs {r})", "client",
             above="were sent while the worker's loop lagged over {v} ms more often ({t} vs {r})", floor=1.0),
    _Numeric("turn", "were later session turns (median turn {t} vs {r})",
             "were earlier session turns (median turn {t} vs {r})", "were past turn 0 more often ({t} vs {r})",
             "were past turn 0 less often ({t} vs {r})", "late_turns",
             above="were past turn {v} more often ({t} vs {r})"),
)
FLAGS = {  # feature: (tail has it more often, less often, cause when more often)
    "new_connection": ("were first on a new connection ({t} vs {r})",
                       "were less often first on a new connection ({t} vs {r})", "connect"),
    "after_error": ("followed a failed request on their connection ({t} vs {r})",
                    "less often followed a failed request ({t} vs {r})", "after_errors"),
    "in_pause": ("were in flight through a server-wide pause ({a} of {n}, vs {r} of the rest)",
                 "were less often in flight through a server-wide pause ({t} vs {r})", "pauses"),
    "in_pause_first": ("waited for their first token through a server-wide pause ({a} of {n}, vs {r} of the rest)",
                       "less often waited for their first token through a server-wide pause ({t} vs {r})", "pauses"),
    "late_stamps": ("had chunk times from a late read: the load generator's reader fell behind ({t} vs {r})",
                    "less often had chunk times from a late read ({t} vs {r})", "client"),
    "late_first": ("had their first chunk read late, together with the chunks after it ({t} vs {r})",
                   "less often had their first chunk read late ({t} vs {r})", "client"),
    "behind_long_prefill": ("were held up by a long prompt's prefill, waiting for their first token or mid-stream "
                            "({t} vs {r})", "were less often held up by a long prompt's prefill ({t} vs {r})", "hol"),
}
FEATURES = (*(s.name for s in NUMERIC), *FLAGS, "worker", "t_in_step_s")
QUEUE_STATES = {"server_waiting", "in_flight"}
"""Features that are states at send, not properties of the request: a stall raises them too, and a client that
falls behind (it sends in bursts)."""
MISSING = -math.inf
"""A missing metric value in a column: sorts first, never above a threshold."""


def _num(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 10 or v == int(v) else f"{v:.1f}"


def _pct(v: float) -> str:
    return f"{100 * v:.0f}%"


def _numeric(spec: _Numeric, coded: Coded, ct: np.ndarray, cr: np.ndarray, params: TailParams) -> dict | None:
    nt, nr = int(ct.sum()), int(cr.sum())
    if nt < params.min_tail or nr < params.min_tail or int(((ct + cr) > 0).sum()) < 2:
        return None  # too few known values, or a constant: nothing to test
    from harness.analysis.why.counts import mann_whitney_arrays, median, quantile, separation, share_above

    u = mann_whitney_arrays(ct, cr)
    keys, values = coded.keys, coded.values
    mt, mr = median(keys, ct), median(keys, cr)
    if mr > 0:
        ratio = mt / mr
        more = u.rank_biserial > 0
        material = ratio >= params.min_ratio if more else ratio <= 1 / params.min_ratio
        x = "" if ratio == 0 else f"{ratio if more else 1 / ratio:.1f}× "
        phrase = (spec.more if more else spec.less).format(x=x, t=_num(mt), r=_num(mr))
        if more and not material and spec.above:
            # A minority far above the rest (3% of prompts 10× longer, half the tail): the medians hide it, the
            # share above the rest's 95th percentile does not.
            v = quantile(keys, cr, 0.95)
            assert values is not None  # a numeric feature's: code_column(numeric=True) made them
            st, sr = share_above(values, ct, v, nt), share_above(values, cr, v, nr)
            if st - sr >= params.min_share_points:
                material, phrase = True, spec.above.format(v=_num(v), t=_pct(st), r=_pct(sr))
    else:  # the rest is mostly zeros (an idle queue, no cache hits): compare how often it is above zero
        assert values is not None  # a numeric feature's: code_column(numeric=True) made them
        st, sr = share_above(values, ct, 0, nt), share_above(values, cr, 0, nr)
        more = st > sr
        material = abs(st - sr) >= params.min_share_points and (u.rank_biserial > 0) == more
        if more and mt > 0:
            phrase = spec.more.format(x="", t=_num(mt), r=_num(mr))
        else:
            phrase = (spec.nonzero_more if more else spec.nonzero_less).format(t=_pct(st), r=_pct(sr))
    cause = spec.more_cause if more else spec.less_cause
    over = separation(keys, ct, cr) if more and spec.above else None  # what "explains" a tail request (shares)
    return dict(feature=spec.name, test="mann-whitney-u", n_tail=nt, n_rest=nr, p=u.p, effect=u.rank_biserial,
                tail_value=mt, rest_value=mr, material=material, phrase=phrase, cause=cause, over=over)


def share_phrase(name: str, over: float | None) -> str | None:
    """How a tail request this feature explains reads after "7 of 14": "had prompts over 4,000 tokens", "were in
    flight through a server-wide pause"; None for a feature that explains no single request (time, worker)."""
    if name in FLAGS:
        return FLAGS[name][0].split(" (")[0]
    spec = next((s for s in NUMERIC if s.name == name), None)
    if spec is None or not spec.above or over is None:
        return None
    return spec.above.split(" more often")[0].format(v=_num(over))


def explains(name: str, value: object, over: float | None) -> bool:
    """Does a tail request with this ``value`` of feature ``name`` have it (a flag) or lie above ``over``?"""
    if name in FLAGS:
        return value is True
    return over is not None and value is not None and value > over  # type: ignore[operator]  # over: numeric features only


def _flag(name: str, ct: dict, cr: dict, params: TailParams) -> dict | None:
    a, b, c, d = ct.get(True, 0), ct.get(False, 0), cr.get(True, 0), cr.get(False, 0)
    if a + b < params.min_tail or c + d < params.min_tail or a + c == 0 or b + d == 0:
        return None
    st, sr = a / (a + b), c / (c + d)
    more_phrase, less_phrase, cause = FLAGS[name]
    phrase = (more_phrase if st > sr else less_phrase).format(t=_pct(st), r=_pct(sr), a=a, n=a + b)
    return dict(feature=name, test="fisher-exact", n_tail=a + b, n_rest=c + d, p=fisher_exact(a, b, c, d),
                effect=st - sr, tail_value=st, rest_value=sr, material=abs(st - sr) >= params.min_share_points,
                phrase=phrase, cause=cause if st > sr else None)


def _worker(ct: dict, cr: dict, params: TailParams) -> dict | None:
    nt, nr = sum(ct.values()), sum(cr.values())
    workers = sorted(ct.keys() | cr.keys(), key=str)
    if nt < params.min_tail or nr < params.min_tail or len(workers) < 2:
        return None
    w = max(workers, key=lambda k: ct.get(k, 0) / nt - cr.get(k, 0) / nr)
    a, c = ct.get(w, 0), cr.get(w, 0)
    p = min(1.0, len(workers) * fisher_exact(a, nt - a, c, nr - c, alternative="greater"))
    st, sr = a / nt, c / nr
    return dict(feature="worker", test=f"fisher-exact (one-sided, ×{len(workers)} workers)", n_tail=nt, n_rest=nr,
                p=p, effect=st - sr, tail_value=st, rest_value=sr, material=st - sr >= params.min_share_points,
                phrase=f"came from worker {w} ({_pct(st)} vs {_pct(sr)} of the rest)", cause="one_worker")


def _bins(vals: np.ndarray, k: int, per_s: float) -> list[int]:
    import numpy as np

    # int() of each product, as the windows were always cut (truncation, clipped into the first and last window)
    return np.bincount(np.clip((vals * per_s).astype(np.int64), 0, k - 1), minlength=k).tolist()


def time_test(tail: np.ndarray, rest: np.ndarray, params: TailParams) -> dict | None:
    """Time (``t_in_step_s``, float arrays, NaN where unknown): are the tail's send times clustered in windows the
    rest's are not (χ²)?"""
    import numpy as np

    t, r = tail[~np.isnan(tail)], rest[~np.isnan(rest)]
    if len(t) < params.min_tail or len(r) < params.min_tail:
        return None
    span = max(float(t.max()), float(r.max()))
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


def connect_cost(label: str, metric: list, flags: list) -> str:
    """"connect/TLS, +38 ms TTFT": the median metric on a new connection minus on a reused one (uniform sample)."""
    new = [m for m, f in zip(metric, flags, strict=True) if f is True and m != MISSING]
    old = [m for m, f in zip(metric, flags, strict=True) if f is False and m != MISSING]
    if not new or not old:
        return CAUSES["connect"]
    return f"{CAUSES['connect']}, {1000 * (statistics.median(new) - statistics.median(old)):+.0f} ms {label}"


def code_features(cols: Mapping[str, Sequence[Any] | np.ndarray], uniform: np.ndarray) -> dict[str, Coded]:
    """Every feature but time coded once per step (``tail_counts``): ``cols`` over the rows tested, ``uniform`` the
    rest's sample among them."""
    from harness.analysis.why.counts import code_column

    floors = {s.name: s.floor for s in NUMERIC}
    return {f: code_column(cols[f], uniform, floors.get(f, 0.0), numeric=f in floors) for f in FEATURES
            if f != "t_in_step_s"}


def feature_test(name: str, coded: Coded, tail: np.ndarray, excluded: np.ndarray, params: TailParams) -> dict | None:
    """Test feature ``name`` on the tail's rows against the rest's: the uniform sample's rows but ``excluded``
    (positions in the coded columns). Time is ``time_test``."""
    from harness.analysis.why.counts import as_counter, counts

    ct, cr = counts(coded, tail, excluded)
    spec = next((s for s in NUMERIC if s.name == name), None)
    if spec is not None:
        return _numeric(spec, coded, ct, cr, params)
    ctd, crd = as_counter(coded, ct), as_counter(coded, cr)
    return _flag(name, ctd, crd, params) if name in FLAGS else _worker(ctd, crd, params)


def median_of(values: Iterable) -> float:
    v = sorted(values)
    return float(v[len(v) // 2]) if v else 0.0


def flat_tail(medians: tuple[float, float], params: TailParams) -> str | None:
    """The words for a tail whose median (seconds) is under ``min_lead`` × the rest's; None for a tail that stands
    out."""
    tm, rm = medians
    if rm > 0 and tm < params.min_lead * rm:
        return (f"the tail is {100 * (tm / rm - 1):.0f}% above the rest (median {1000 * tm:,.1f} vs {1000 * rm:,.1f} "
                "ms): nothing stands out to explain")
    return None


def mixture(shares: list[tuple[Any, set, str]], n_tail: int) -> list[tuple[Any, set, str]]:
    """The causes of a mixed tail: by requests explained, each explaining at least a fifth of the tail (2 at
    least) that the ones before it do not."""
    floor = max(2, 0.2 * n_tail)
    kept: list[tuple[Any, set, str]] = []
    seen: set = set()
    for t, hit, phrase in shares:
        if len(hit) >= floor and len(hit - seen) >= floor:
            kept.append((t, hit, phrase))
            seen |= hit
    return kept


def client_made(counted: list) -> tuple[list, str]:
    """``counted`` (significant, material feature tests, largest effect first) without the queue at send when a
    client feature separates the tail at least as much: a client that falls behind reads late and sends in bursts,
    so the queue at send follows it, no cause of its own. Also the words for the line that say so ("" if kept)."""
    grew = [t for t in counted if t.feature in QUEUE_STATES]
    client = next((t for t in counted if t.cause == "client"), None)
    if client is None or not grew or abs(client.effect) < abs(grew[0].effect):
        return counted, ""
    return ([t for t in counted if t.feature not in QUEUE_STATES],
            f"; the queue at send grew with it ({grew[0].phrase.removeprefix('were ')})")
