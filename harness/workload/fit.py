"""``kneecap fit``: summarise a production log and fit length distributions to it. Pure.

Each candidate is fitted on half the rows (even rows) and judged on the other half (odd rows) by
the Kolmogorov–Smirnov distance D = max |F_data(x) − F_fit(x)|, so the empirical option (resampling
the fitted half) is judged on unseen data like the parametric ones. Candidates: lognormal (MLE on
log values), gamma (method of moments), normal (mean, std), empirical.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["ColumnFit", "Fit", "fit_log", "ks_distance", "workload_yaml"]


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
