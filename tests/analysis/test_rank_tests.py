"""The statistics under tail attribution, against textbook values and brute force (numpy; scipy is not a dependency)."""

from __future__ import annotations

import bisect
import itertools
import math
from collections import Counter

import numpy as np
import pytest

from harness.analysis.why.rank_tests import (
    chi2_independence,
    chi2_sf,
    fisher_exact,
    holm,
    mann_whitney_counts,
    mann_whitney_u,
    normal_sf,
)


def test_u_test_matches_scipys_documented_example():
    # scipy.stats.mannwhitneyu docs: males vs females, U1 = 17; method="asymptotic" gives p = 0.11134688653314041.
    res = mann_whitney_u([19, 22, 16, 29, 24], [20, 11, 17, 12])
    assert res.u == 17 and res.p == pytest.approx(0.11134688653314041, rel=1e-9)
    assert res.rank_biserial == pytest.approx(2 * 17 / 20 - 1)


def _brute_u(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """U by comparing every pair; z from average ranks of the union and the tie-corrected variance."""
    u = float((x[:, None] > y[None, :]).sum() + 0.5 * (x[:, None] == y[None, :]).sum())
    both = np.concatenate([x, y])
    _, inverse, counts = np.unique(both, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    avg_rank = (ends - (counts - 1) / 2)[inverse]
    assert avg_rank[: len(x)].sum() - len(x) * (len(x) + 1) / 2 == pytest.approx(u)  # the rank-sum definition
    n, nx, ny = len(both), len(x), len(y)
    var = nx * ny / 12 * ((n + 1) - float((counts**3 - counts).sum()) / (n * (n - 1)))
    return u, (abs(u - nx * ny / 2) - 0.5) / math.sqrt(var)


def test_u_test_against_brute_force_with_ties():
    rng = np.random.default_rng(3)
    for nx, ny, levels in [(8, 9, 5), (30, 200, 12), (500, 700, 40), (50, 60, 10_000)]:
        x, y = rng.integers(0, levels, nx), rng.integers(1, levels + 1, ny)
        res = mann_whitney_u(x.tolist(), y.tolist())
        u, z = _brute_u(x, y)
        assert res.u == pytest.approx(u) and abs(res.z) == pytest.approx(z)
        assert res.p == pytest.approx(min(1.0, 2 * normal_sf(z)))


def test_u_test_p_is_close_to_the_exact_permutation_p():
    """From 8 per group (the smallest tail attributed) the normal approximation is within 0.01 of exact."""
    x, y = [3.1, 4.7, 5.0, 5.2, 6.8, 7.5, 8.1, 9.9], [1.2, 2.5, 2.9, 3.3, 4.1, 4.4, 5.6, 6.0]
    both, observed = x + y, mann_whitney_u(x, y).u
    us = []
    for idx in itertools.combinations(range(16), 8):
        sx = [both[i] for i in idx]
        sy = [both[i] for i in range(16) if i not in idx]
        us.append(sum((a > b) + 0.5 * (a == b) for a in sx for b in sy))
    mu = 32
    exact = sum(abs(u - mu) >= abs(observed - mu) for u in us) / len(us)
    assert abs(mann_whitney_u(x, y).p - exact) < 0.01


def test_u_test_edges():
    assert mann_whitney_u([1, 1, 1], [1, 1]).p == 1.0
    assert mann_whitney_u(list(range(100, 120)), list(range(20))).rank_biserial == 1.0
    with pytest.raises(ValueError, match="two non-empty samples"):
        mann_whitney_u([], [1.0])


def _brute_fisher(a: int, b: int, c: int, d: int) -> tuple[float, float]:
    r1, c1, n = a + b, a + c, a + b + c + d
    pmf = {k: math.comb(r1, k) * math.comb(n - r1, c1 - k) / math.comb(n, c1)
           for k in range(max(0, c1 - (n - r1)), min(r1, c1) + 1)}
    two = sum(p for p in pmf.values() if p <= pmf[a] * (1 + 1e-7))
    return two, sum(p for k, p in pmf.items() if k >= a)


def test_fisher_lady_tasting_tea():
    assert fisher_exact(3, 1, 1, 3) == pytest.approx(17 / 35)  # Fisher (1935): 1 + 16 + 16 + 1 of 70, two-sided
    assert fisher_exact(3, 1, 1, 3, alternative="greater") == pytest.approx(17 / 70)
    assert fisher_exact(4, 0, 0, 4, alternative="greater") == pytest.approx(1 / 70)


def test_fisher_against_enumeration():
    rng = np.random.default_rng(5)
    for _ in range(200):
        a, b, c, d = (int(v) for v in rng.integers(0, 60, 4))
        two, greater = _brute_fisher(a, b, c, d)
        assert fisher_exact(a, b, c, d) == pytest.approx(min(1.0, two), rel=1e-9, abs=1e-300)
        assert fisher_exact(a, b, c, d, alternative="greater") == pytest.approx(min(1.0, greater), rel=1e-9)
    assert fisher_exact(40, 360, 150, 4450) == pytest.approx(_brute_fisher(40, 360, 150, 4450)[0], rel=1e-6)
    with pytest.raises(ValueError, match="counts >= 0"):
        fisher_exact(-1, 2, 3, 4)


def test_chi_square_known_values():
    assert chi2_sf(3.841458820694124, 1) == pytest.approx(0.05, rel=1e-9)  # the 95th percentiles of χ² tables
    assert chi2_sf(18.307038053275146, 10) == pytest.approx(0.05, rel=1e-9)
    assert chi2_sf(124.34211340400407, 100) == pytest.approx(0.05, rel=1e-8)
    assert chi2_sf(5.0, 2) == pytest.approx(math.exp(-2.5))  # df = 2 is the exponential
    stat, p = chi2_independence([10, 20], [30, 40])  # expected 12, 18, 28, 42
    assert stat == pytest.approx(4 / 12 + 4 / 18 + 4 / 28 + 4 / 42)
    assert p == pytest.approx(math.erfc(math.sqrt(stat / 2)))  # df = 1: P(|Z| ≥ √χ²)
    assert chi2_independence([5, 0, 5], [10, 0, 10]) == (0.0, 1.0)  # the empty column is dropped


def test_holm_textbook():
    # Sorted 0.005, 0.01, 0.03, 0.04 → ×4, ×3, ×2, ×1 = 0.02, 0.03, 0.06, 0.04 → monotone: 0.02, 0.03, 0.06, 0.06.
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == [1.0, 1.0] and holm([]) == []


def _u_by_loop(cx: dict, cy: dict) -> tuple[float, int]:
    """U and the tie sum as the per-value loop computed them before the C-level passes."""
    keys = sorted(cy)
    below = list(itertools.accumulate((cy[k] for k in keys), initial=0))
    u = 0.0
    for v, c in cx.items():
        u += c * (below[bisect.bisect_left(keys, v)] + 0.5 * cy.get(v, 0))
    ties = sum(t * t * t - t for t in (c + cy.get(v, 0) for v, c in cx.items()) if t > 1)
    ties += sum(c * c * c - c for v, c in cy.items() if c > 1 and v not in cx)
    return u, ties


def test_u_on_counts_equals_the_per_value_loop_exactly():
    rng = np.random.default_rng(11)
    for nx, ny, levels in [(8, 9, 3), (1000, 5000, 40), (5000, 4750, 3000), (300, 200, 1_000_000)]:
        cx = Counter(rng.integers(0, levels, nx).tolist())
        cy = Counter((rng.integers(0, levels, ny) // 2).tolist())
        u, ties = _u_by_loop(cx, cy)
        n = nx + ny
        var = nx * ny / 12.0 * ((n + 1) - ties / (n * (n - 1)))
        z = max(abs(u - nx * ny / 2) - 0.5, 0.0) / math.sqrt(var)
        res = mann_whitney_counts(cx, cy)
        assert (res.u, abs(res.z), res.p) == (u, z, min(1.0, 2.0 * normal_sf(z)))  # bit for bit
