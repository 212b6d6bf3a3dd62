"""The tests behind tail attribution (``analysis/why/attribute.py``), in pure Python: no numpy, no scipy. Pure.

- ``mann_whitney_u``: two-sided Mann–Whitney U, the normal approximation with the tie correction and a
  continuity correction (scipy's ``mannwhitneyu(..., method="asymptotic")``). Its error against the exact
  permutation p is < 0.01 from about 8 per group; ``tail.py`` refuses tails smaller than that.
  It works on value → count maps (``mann_whitney_counts``): cost grows with the distinct values, not the
  requests, so a 5,000 × 5,000 test of token counts takes ~1 ms.
- ``fisher_exact``: Fisher's exact test on a 2×2 table, two-sided (the tables no likelier than the one
  seen, as R and scipy sum them) or one-sided "greater"; terms below 1e-30 of the likeliest are left out.
- ``chi2_independence``: Pearson's chi-square on a 2×K table (K ≥ 2), for counts too large for Fisher.
- ``holm``: Holm–Bonferroni step-down adjusted p-values (family-wise error ≤ α, any dependence).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate, repeat
from operator import add, mul

__all__ = ["UTest", "chi2_independence", "chi2_sf", "fisher_exact", "holm", "mann_whitney_counts", "mann_whitney_u",
           "normal_sf"]


@dataclass(frozen=True)
class UTest:
    u: float
    """U of the first sample: pairs (x, y) with x > y, plus half the ties."""
    z: float
    p: float
    """Two-sided."""
    rank_biserial: float
    """2U / (n_x n_y) − 1, in [−1, 1]: P(x > y) − P(x < y); +1 when every x is above every y."""


def normal_sf(z: float) -> float:
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def mann_whitney_u(x: Iterable[float], y: Iterable[float]) -> UTest:
    """Two-sided U test of x against y (both non-empty; no None or NaN)."""
    return mann_whitney_counts(Counter(x), Counter(y))


def mann_whitney_counts(cx: Mapping[float, int], cy: Mapping[float, int]) -> UTest:
    """The U test on value → count maps: one pass over the distinct values, so integer features (token counts,
    queue lengths: a few thousand distinct values among 10,000 requests) cost little."""
    nx, ny = sum(cx.values()), sum(cy.values())
    if nx == 0 or ny == 0:
        raise ValueError(f"mann_whitney_u needs two non-empty samples, got {nx} and {ny} values")
    keys = sorted(cy)
    below = list(accumulate(map(cy.__getitem__, keys), initial=0))
    xs, cs = list(cx), list(cx.values())
    tied = list(map(cy.get, xs, repeat(0)))
    # In C-level passes, not a loop per value: U's terms are counts and half counts, so their sums are exact (< 2^53)
    # in any order; ties: Σ(t³ − t) over the union's values, t = x's count + y's.
    u = sum(map(mul, cs, map(below.__getitem__, map(bisect_left, repeat(keys), xs)))) + 0.5 * sum(map(mul, cs, tied))
    n = nx + ny
    ties = sum(map(pow, map(add, cs, tied), repeat(3))) - sum(map(pow, tied, repeat(3))) \
        + sum(map(pow, cy.values(), repeat(3))) - n
    var = nx * ny / 12.0 * ((n + 1) - ties / (n * (n - 1))) if n > 1 else 0.0
    mu = nx * ny / 2.0
    if var <= 0:  # every value equal: no evidence either way
        return UTest(u, 0.0, 1.0, 0.0)
    z = max(abs(u - mu) - 0.5, 0.0) / math.sqrt(var)
    return UTest(u, math.copysign(z, u - mu), min(1.0, 2.0 * normal_sf(z)), 2.0 * u / (nx * ny) - 1.0)


def fisher_exact(a: int, b: int, c: int, d: int, alternative: str = "two-sided") -> float:
    """p of the 2×2 table [[a, b], [c, d]] under fixed margins; "greater": a this large or larger."""
    if min(a, b, c, d) < 0:
        raise ValueError(f"fisher_exact needs counts >= 0, got {[[a, b], [c, d]]}")
    if alternative not in ("two-sided", "greater"):
        raise ValueError(f"alternative must be 'two-sided' or 'greater', got {alternative!r}")
    r1, c1, n = a + b, a + c, a + b + c + d
    lo, hi = max(0, c1 - (n - r1)), min(r1, c1)
    mode = min(hi, max(lo, (r1 + 1) * (c1 + 1) // (n + 2)))
    # Hypergeometric terms relative to the mode's, by the ratio of neighbours, walking out until they are
    # negligible (< 1e-30 of the mode's) and past a: ~12 standard deviations of terms, not all min(r1, c1).
    up, p, k = [1.0], 1.0, mode
    while k < hi and (p > 1e-30 or k < a):
        p *= (r1 - k) * (c1 - k) / ((k + 1) * (n - r1 - c1 + k + 1))
        k += 1
        up.append(p)
    down, p, k = [], 1.0, mode
    while k > lo and (p > 1e-30 or k > a):
        p *= k * (n - r1 - c1 + k) / ((r1 - k + 1) * (c1 - k + 1))
        k -= 1
        down.append(p)
    terms = down[::-1] + up  # terms[i] is k = mode - len(down) + i
    first = mode - len(down)
    total = math.fsum(terms)
    if alternative == "greater":
        return min(1.0, math.fsum(terms[max(0, a - first):]) / total)
    cut = terms[a - first] * (1 + 1e-7)  # tables as likely as the observed one count (floating noise)
    return min(1.0, math.fsum(t for t in terms if t <= cut) / total)


def _gamma_q(s: float, x: float) -> float:
    """Regularized upper incomplete gamma Q(s, x) (series below s+1, continued fraction above)."""
    if x <= 0:
        return 1.0
    lead = -x + s * math.log(x) - math.lgamma(s)
    if x < s + 1:
        term = total = 1.0 / s
        k = s
        while abs(term) > abs(total) * 1e-15:
            k += 1
            term *= x / k
            total += term
        return max(0.0, 1.0 - total * math.exp(lead))
    tiny = 1e-300  # Lentz's method
    b = x + 1 - s
    c, d = 1 / tiny, 1 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - s)
        b += 2
        d = an * d + b
        d = d if abs(d) > tiny else tiny
        c = b + an / c
        c = c if abs(c) > tiny else tiny
        d = 1 / d
        h *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return math.exp(lead) * h


def chi2_sf(x: float, df: int) -> float:
    """P(χ²_df ≥ x)."""
    if df < 1:
        raise ValueError(f"chi2_sf needs df >= 1, got {df}")
    return _gamma_q(df / 2.0, x / 2.0)


def chi2_independence(top: Sequence[int], bottom: Sequence[int]) -> tuple[float, float]:
    """Pearson's χ² and its p for the 2×K table [top, bottom]; columns empty in both rows are dropped."""
    cols = [(t, b) for t, b in zip(top, bottom, strict=True) if t + b > 0]
    nt, nb = sum(t for t, _ in cols), sum(b for _, b in cols)
    n = nt + nb
    if len(cols) < 2 or nt == 0 or nb == 0:
        return 0.0, 1.0
    stat = 0.0
    for t, b in cols:
        et, eb = nt * (t + b) / n, nb * (t + b) / n
        stat += (t - et) ** 2 / et + (b - eb) ** 2 / eb
    return stat, chi2_sf(stat, len(cols) - 1)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values, in the input's order (reject where adjusted p ≤ α)."""
    m = len(pvalues)
    out = [1.0] * m
    running = 0.0
    for rank, i in enumerate(sorted(range(m), key=pvalues.__getitem__)):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out
