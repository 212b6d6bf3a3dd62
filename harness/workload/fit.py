"""``kneecap fit``: summarise a production log and fit length distributions to it. Pure.

Each candidate is fitted on half the rows (even rows) and judged on the other half (odd rows) by
the Kolmogorov–Smirnov distance D = max |F_data(x) − F_fit(x)|, so the empirical option (resampling
the fitted half) is judged on unseen data like the parametric ones. Candidates: lognormal (MLE on
log values), gamma (method of moments), normal (mean, std), empirical.

Session logs (``harness.workload.session_log``) also get ``fit_sessions``: one lognormal per quantity of
``workload.sessions`` — turns per session, first_input_tokens (turn 1's whole prompt), turn_input_tokens
(new tokens of later turns, compactions left out), output_tokens (every turn), think_time_s (gaps before
turns 2+) — by maximum likelihood on all the data. Counts are fitted as kneecap draws them,
``max(1, round(X))`` with X lognormal: a value k < 64 is the interval [k − ½, k + ½) (k = 1: everything
below 1.5), so a log full of 1-, 2- and 3-turn sessions does not bias the median up; above 64 rounding
moves ln k by < 1% and the closed form is used. Think times are continuous; gaps of 0 s cannot come
from a lognormal and are left out of the fit (counted). KS distances there are in-sample.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from harness.workload.session_log import SessionLog

__all__ = ["ColumnFit", "Fit", "LogNormalFit", "SessionFit", "fit_log", "fit_sessions", "ks_distance",
           "sessions_yaml", "workload_yaml"]


@dataclass
class ColumnFit:
    column: str
    count: int
    quantiles: dict[str, int]
    mean: float
    ks: dict[str, float]
    """KS distance on held-out rows per candidate: lognormal, gamma, normal, empirical."""
    params: dict[str, dict[str, float]]

    @property
    def best_parametric(self) -> str:
        return min((k for k in self.ks if k != "empirical"), key=self.ks.__getitem__)


@dataclass
class Fit:
    input: ColumnFit
    output: ColumnFit
    pearson_log: float
    spearman: float


def _normal_cdf(x: float, mean: float, std: float) -> float:
    return 0.5 * (1 + math.erf((x - mean) / (std * math.sqrt(2)))) if std > 0 else float(x >= mean)


def _gamma_p(a: float, x: float) -> float:
    """Regularised lower incomplete gamma P(a, x): series below a + 1, continued fraction above."""
    if x <= 0:
        return 0.0
    ln_pre = a * math.log(x) - x - math.lgamma(a)
    if x < a + 1:
        term = total = 1.0 / a
        n = a
        for _ in range(500):
            n += 1
            term *= x / n
            total += term
            if abs(term) < abs(total) * 1e-12:
                break
        return min(1.0, total * math.exp(ln_pre))
    b, c, d = x + 1 - a, 1e300, 1 / (x + 1 - a)
    h = d
    for i in range(1, 500):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = 1e-300 if abs(d) < 1e-300 else d
        c = b + an / c
        c = 1e-300 if abs(c) < 1e-300 else c
        d = 1 / d
        h *= d * c
        if abs(d * c - 1) < 1e-12:
            break
    return max(0.0, 1 - math.exp(ln_pre) * h)


def ks_distance(sample: Sequence[float], cdf: Callable[[float], float]) -> float:
    """One-sample KS distance of ``sample`` against ``cdf``, evaluated on both sides of each step."""
    xs = sorted(sample)
    n = len(xs)
    d = 0.0
    i = 0
    while i < n:
        j = bisect.bisect_right(xs, xs[i], i)
        if xs[i] == int(xs[i]):  # token counts: a count x stands for the continuous range [x - .5, x + .5)
            below, above = cdf(xs[i] - 0.5), cdf(xs[i] + 0.5)
        else:
            below = above = cdf(xs[i])
        d = max(d, abs(j / n - above), abs(i / n - below))
        i = j
    return d


def _fit_column(name: str, values: Sequence[int]) -> ColumnFit:
    train, test = values[0::2], values[1::2] or values
    pos = [max(v, 0.5) for v in train]
    logs = [math.log(v) for v in pos]
    mu, sigma = statistics.fmean(logs), statistics.pstdev(logs)
    mean, std = statistics.fmean(train), statistics.pstdev(train)
    shape, scale = (mean**2 / std**2, std**2 / mean) if std > 0 and mean > 0 else (1.0, max(mean, 1.0))
    sorted_train = sorted(train)

    def empirical_cdf(x: float) -> float:
        return bisect.bisect_right(sorted_train, x) / len(sorted_train)

    cdfs: dict[str, Callable[[float], float]] = {
        "lognormal": lambda x: _normal_cdf(math.log(x), mu, sigma) if x > 0 else 0.0,
        "gamma": lambda x: _gamma_p(shape, x / scale),
        "normal": lambda x: _normal_cdf(x, mean, std),
        "empirical": empirical_cdf,
    }
    s = sorted(values)
    qs = {f"p{round(q * 100, 1):g}": s[int(q * (len(s) - 1))] for q in (0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 1)}
    return ColumnFit(name, len(values), qs, statistics.fmean(values),
                     {k: round(ks_distance(test, f), 4) for k, f in cdfs.items()},
                     {"lognormal": {"median": round(math.exp(mu), 1), "sigma": round(sigma, 3)},
                      "gamma": {"shape": round(shape, 4), "scale": round(scale, 3)},
                      "normal": {"mean": round(mean, 1), "std": round(std, 1)}})


def _ranks(values: Sequence[float]) -> list[float]:
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2
        i = j + 1
    return ranks


def _corr(a: Sequence[float], b: Sequence[float]) -> float:
    try:
        return statistics.correlation(a, b)
    except statistics.StatisticsError:  # constant column
        return 0.0


def fit_log(input_name: str, inputs: Sequence[int], output_name: str, outputs: Sequence[int]) -> Fit:
    if len(inputs) < 2:
        raise ValueError(f"need at least 2 rows to fit, got {len(inputs)}")
    return Fit(_fit_column(input_name, inputs), _fit_column(output_name, outputs),
               round(_corr([math.log(max(v, 1)) for v in inputs], [math.log(max(v, 1)) for v in outputs]), 4),
               round(_corr(_ranks(inputs), _ranks(outputs)), 4))


def _param_line(c: ColumnFit) -> str:
    best = c.best_parametric
    p = c.params[best]
    args = ", ".join(f"{k}: {v:g}" for k, v in p.items())
    return f"{{dist: {best}, {args}, min: {max(1, c.quantiles['p0'])}, max: {c.quantiles['p100']}}}"


def workload_yaml(fit: Fit, log_path: str) -> str:
    """A ``workload:`` block: joint replay of the log (keeps the correlation), parametric alternative commented."""
    i, o = fit.input, fit.output
    return (
        "workload:\n"
        f"  # Joint replay of {log_path}: each request is a (prompt, output) pair that happened.\n"
        f"  joint: {{file: {log_path}, input: {i.column}, output: {o.column}, jitter: 0.05}}\n"
        f"  # Parametric alternative (loses the correlation: Spearman {fit.spearman:+.2f}):\n"
        f"  # input_tokens:  {_param_line(i)}   # KS {i.ks[i.best_parametric]:.3f}\n"
        f"  # output_tokens: {_param_line(o)}   # KS {o.ks[o.best_parametric]:.3f}\n"
        "  seed: 1\n")


# -- sessions -------------------------------------------------------------------------------------------------

_EXACT_ABOVE = 64
"""Counts from here up are fitted as exact values (rounding moves ln k by under 1%)."""


@dataclass
class LogNormalFit:
    name: str
    count: int
    median: float
    sigma: float
    quantiles: dict[str, float]
    ks: float
    """In-sample KS distance of the fitted lognormal (as rounded and clipped, for counts)."""
    zeros: int = 0
    """Values of 0 left out of the fit (think times only)."""


@dataclass
class SessionFit:
    sessions: int
    turns_total: int
    turns: LogNormalFit
    first_input_tokens: LogNormalFit
    turn_input_tokens: LogNormalFit | None
    """None: no session has a second turn (outside compactions)."""
    output_tokens: LogNormalFit
    think_time_s: LogNormalFit | None
    """None: every gap is 0 s (or no session has a second turn)."""
    max_context_tokens: int
    compactions: int
    keep_tokens: int | None
    """Median history size after a compaction (``compaction.keep_tokens``); None without compactions."""
    input_mode: str
    notes: tuple[str, ...]


def _phi(z: float) -> float:
    return 0.5 * (1 + math.erf(z / math.sqrt(2)))


def _nelder_mead(f: Callable[[float, float], float], x: tuple[float, float], step: tuple[float, float],
                 iters: int = 400) -> tuple[float, float]:
    """Minimise ``f`` over two variables (the simplex method; enough for a smooth two-parameter likelihood)."""
    pts = [x, (x[0] + step[0], x[1]), (x[0], x[1] + step[1])]
    vals = [f(*p) for p in pts]
    for _ in range(iters):
        order = sorted(range(3), key=vals.__getitem__)
        pts, vals = [pts[i] for i in order], [vals[i] for i in order]
        if abs(vals[2] - vals[0]) < 1e-10 * (1 + abs(vals[0])):
            break
        cx, cy = (pts[0][0] + pts[1][0]) / 2, (pts[0][1] + pts[1][1]) / 2
        refl = (2 * cx - pts[2][0], 2 * cy - pts[2][1])
        fr = f(*refl)
        if fr < vals[0]:
            exp = (3 * cx - 2 * pts[2][0], 3 * cy - 2 * pts[2][1])
            fe = f(*exp)
            pts[2], vals[2] = (exp, fe) if fe < fr else (refl, fr)
        elif fr < vals[1]:
            pts[2], vals[2] = refl, fr
        else:
            con = ((cx + pts[2][0]) / 2, (cy + pts[2][1]) / 2)
            fc = f(*con)
            if fc < vals[2]:
                pts[2], vals[2] = con, fc
            else:  # shrink towards the best point
                pts = [pts[0], *(((p[0] + pts[0][0]) / 2, (p[1] + pts[0][1]) / 2) for p in pts[1:])]
                vals = [vals[0], *(f(*p) for p in pts[1:])]
    return pts[min(range(3), key=vals.__getitem__)]


def _count_mle(values: Sequence[int]) -> tuple[float, float]:
    """(mu, sigma) of X lognormal with the values drawn as max(1, round(X)): see the module docstring."""
    logs = [math.log(max(v, 1)) for v in values]
    mu0, s0 = statistics.fmean(logs), statistics.pstdev(logs)
    small = Counter(max(v, 1) for v in values if v < _EXACT_ABOVE)
    if not small or len(set(values)) == 1:
        return mu0, s0
    big = [math.log(v) for v in values if v >= _EXACT_ABOVE]
    n_big, s1, s2 = len(big), sum(big), sum(x * x for x in big)
    bounds = {k: (math.log(k - 0.5) if k > 1 else -math.inf, math.log(k + 0.5)) for k in small}

    def nll(mu: float, log_s: float) -> float:
        s = math.exp(log_s)
        total = 0.0
        for k, n in small.items():
            lo, hi = bounds[k]
            p = _phi((hi - mu) / s) - (_phi((lo - mu) / s) if lo > -math.inf else 0.0)
            total -= n * math.log(max(p, 1e-300))
        if n_big:  # density of ln k (the Jacobian 1/k does not depend on mu, s)
            total += n_big * log_s + (s2 - 2 * mu * s1 + n_big * mu * mu) / (2 * s * s)
        return total

    mu, log_s = _nelder_mead(nll, (mu0, math.log(max(s0, 0.05))), (0.1, 0.1))
    return mu, math.exp(log_s)


def _quantiles(values: Sequence[float]) -> dict[str, float]:
    s = sorted(values)
    return {f"p{round(q * 100, 1):g}": s[int(q * (len(s) - 1))] for q in (0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 1)}


def _fit_counts(name: str, values: Sequence[int]) -> LogNormalFit:
    mu, sigma = _count_mle(values)

    def cdf(x: float) -> float:  # max(1, round(X)) <= x  (ks_distance asks at k ± 0.5)
        return 0.0 if x < 1 else _phi((math.log(x) - mu) / sigma) if sigma > 0 else float(math.log(x) >= mu)

    return LogNormalFit(name, len(values), math.exp(mu), sigma, _quantiles(values), ks_distance(values, cdf))


def _fit_seconds(name: str, values: Sequence[float]) -> LogNormalFit | None:
    pos = [v for v in values if v > 0]
    if not pos:
        return None
    logs = [math.log(v) for v in pos]
    mu, sigma = statistics.fmean(logs), statistics.pstdev(logs)

    def cdf(x: float) -> float:
        return 0.0 if x <= 0 else _phi((math.log(x) - mu) / sigma) if sigma > 0 else float(math.log(x) >= mu)

    return LogNormalFit(name, len(values), math.exp(mu), sigma, _quantiles(values), ks_distance(pos, cdf),
                        len(values) - len(pos))


def fit_sessions(log: SessionLog) -> SessionFit:
    """Lognormal fits of each quantity of ``workload.sessions`` (see the module docstring)."""
    scripts = log.scripts
    later = [t for s in scripts for t in s[1:]]
    grown = [t.input_tokens for t in later if not t.reset_tokens]
    resets = sorted(t.reset_tokens for t in later if t.reset_tokens)
    return SessionFit(
        sessions=len(scripts), turns_total=sum(len(s) for s in scripts),
        turns=_fit_counts("turns", [len(s) for s in scripts]),
        first_input_tokens=_fit_counts("first_input_tokens", [s[0].input_tokens for s in scripts]),
        turn_input_tokens=_fit_counts("turn_input_tokens", grown) if grown else None,
        output_tokens=_fit_counts("output_tokens", [t.output_tokens for s in scripts for t in s]),
        think_time_s=_fit_seconds("think_time_s", [t.think_s for t in later]) if later else None,
        max_context_tokens=log.max_context_tokens, compactions=len(resets),
        keep_tokens=resets[len(resets) // 2] if resets else None, input_mode=log.input_mode, notes=log.notes)


def _num(x: float) -> str:
    """A parameter as YAML reads it back: no exponent, a few significant digits."""
    return f"{round(x, 1):.10g}" if abs(x) >= 100 else f"{float(f'{x:.4g}'):.10g}"


def _lognormal_line(f: LogNormalFit, seconds: bool = False) -> str:
    lo = "" if seconds else "min: 1, "
    return (f"{{dist: lognormal, median: {_num(f.median)}, sigma: {_num(f.sigma)}, {lo}"
            f"max: {_num(f.quantiles['p100']) if seconds else round(f.quantiles['p100'])}}}")


def sessions_yaml(fit: SessionFit, log_path: str) -> str:
    """A ``workload: sessions:`` block of the fitted distributions; replaying the log is the commented option."""
    lines = ["workload:",
             f"  # {fit.sessions} session{'s' * (fit.sessions != 1)} ({fit.turns_total} turns) of {log_path}, "
             f"input_mode {fit.input_mode}: "
             "lognormal fits.",
             f"  # Or replay the logged sessions as they happened:  sessions: {{log: {log_path}}}",
             "  sessions:",
             f"    turns: {_lognormal_line(fit.turns)}   # KS {fit.turns.ks:.3f}",
             f"    first_input_tokens: {_lognormal_line(fit.first_input_tokens)}   "
             f"# KS {fit.first_input_tokens.ks:.3f}"]
    t = fit.turn_input_tokens
    lines.append(f"    turn_input_tokens: {_lognormal_line(t)}   # KS {t.ks:.3f}" if t else
                 "    turn_input_tokens: 1   # no session of the log has a second turn")
    lines.append(f"    output_tokens: {_lognormal_line(fit.output_tokens)}   # KS {fit.output_tokens.ks:.3f}")
    th = fit.think_time_s
    if th is None:
        lines.append("    think_time_s: 0   # every gap in the log is 0 s")
    else:
        zeros = f"; {th.zeros} of {th.count} gaps were 0 s, left out" if th.zeros else ""
        lines.append(f"    think_time_s: {_lognormal_line(th, seconds=True)}   # KS {th.ks:.3f}{zeros}")
    cap = fit.max_context_tokens
    if fit.keep_tokens is not None and cap >= 2:
        lines.append(f"    max_context_tokens: {cap}   # the largest context seen (prompt + answer)")
        lines.append(f"    compaction: {{keep_tokens: {min(fit.keep_tokens, cap - 1)}}}   # median history after "
                     f"the log's {fit.compactions} compactions")
    elif cap >= 2:
        lines.append(f"    # max_context_tokens: {cap}   # the largest context seen; uncomment to cap sessions there")
    lines.append("  seed: 1")
    return "\n".join(lines) + "\n"
