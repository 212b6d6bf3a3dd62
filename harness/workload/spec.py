"""Length distributions from their YAML spec (see ``scenarios/README.md`` for the grammar)."""

from __future__ import annotations

import itertools
from typing import Any

from harness.checker import Checker
from harness.workload.lengths import (
    Duration,
    Empirical,
    Fixed,
    Gamma,
    JointEmpirical,
    Length,
    LogNormal,
    Mixture,
    Normal,
    QuantileCurve,
    Uniform,
)
from harness.workload.traces import TraceError, read_columns

__all__ = ["DISTS", "DURATION_DISTS", "duration_from_spec", "joint_from_spec", "length_from_spec"]

DISTS = ("fixed", "uniform", "normal", "lognormal", "gamma", "mixture", "empirical")
_BOUNDS = ("min", "max")
_KEYS = {
    "fixed": ("value",), "uniform": (), "normal": ("mean", "std"), "lognormal": ("median", "sigma", "mean", "std"),
    "gamma": ("mean", "std", "shape", "scale"), "mixture": ("components",),
    "empirical": ("values", "quantiles", "file", "column"),
}


def length_from_spec(node: Any, path: str, check: Checker) -> Length | None:
    """A ``Length`` from its spec; problems go to ``check`` and the result is None."""
    if isinstance(node, int) and not isinstance(node, bool):
        node = {"dist": "fixed", "value": node}
    if not isinstance(node, dict):
        check.fail(path, f"expected a distribution such as {{dist: lognormal, median: 900, sigma: 0.8}} or an "
                         f"integer, got {node!r}")
        return None
    dist = check.string(node, "dist", path, choices=DISTS)
    if dist is None:
        return None
    if check.mapping(node, path, ("dist", *_KEYS[dist], *_BOUNDS)) is None:
        return None
    before = len(check.problems)
    lo = check.number(node, "min", path, 1, integer=True, minimum=0)
    hi = check.number(node, "max", path, 10**9, integer=True, minimum=0)
    if lo is not None and hi is not None and lo > hi:
        check.fail(path, f"min ({lo}) must be <= max ({hi})")
    out = _build(dist, node, path, check, lo, hi)
    if out is None or len(check.problems) > before:
        return None
    return out.bounded(lo, hi)


def _build(dist: str, node: dict, path: str, check: Checker, lo: int | None, hi: int | None) -> Length | None:
    num = check.number
    if dist == "fixed":
        return Fixed(num(node, "value", path, integer=True, minimum=0) or 0)
    if dist == "uniform":
        if "min" not in node or "max" not in node:
            check.fail(path, "uniform needs both min and max")
        return Uniform(lo or 0, hi or 0)
    if dist == "normal":
        return Normal(num(node, "mean", path) or 0.0, num(node, "std", path, minimum=0) or 0.0)
    if dist in ("lognormal", "gamma"):
        return _by_moments(dist, node, path, check)
    if dist == "mixture":
        return _mixture(node, path, check)
    return _empirical(node, path, check)


def _by_moments(dist: str, node: dict, path: str, check: Checker) -> Length | None:
    num = check.number
    native = ("median", "sigma") if dist == "lognormal" else ("shape", "scale")
    if "mean" in node or "std" in node:
        if any(k in node for k in native):
            check.fail(path, f"give either mean/std or {'/'.join(native)}, not both")
            return None
        mean, std = num(node, "mean", path, above=0), num(node, "std", path, above=0)
        if mean is None or std is None:
            return None
        return LogNormal.from_mean_std(mean, std) if dist == "lognormal" else Gamma.from_mean_std(mean, std)
    a, b = num(node, native[0], path, above=0), num(node, native[1], path, minimum=0 if dist == "lognormal" else None,
                                                  above=None if dist == "lognormal" else 0)
    if a is None or b is None:
        return None
    return LogNormal(a, b) if dist == "lognormal" else Gamma(a, b)


def _mixture(node: dict, path: str, check: Checker) -> Length | None:
    comps = node.get("components")
    if not isinstance(comps, list) or not comps:
        check.fail(f"{path}.components", "expected a non-empty list of {weight, dist, ...} items")
        return None
    parts = []
    for i, comp in enumerate(comps):
        where = f"{path}.components[{i}]"
        if not isinstance(comp, dict):
            check.fail(where, f"expected a mapping with weight and dist, got {comp!r}")
            continue
        comp = dict(comp)
        weight = check.number(comp, "weight", where, above=0, maximum=1e9,
                              limit="weights are relative, as 3 and 1; a 400-digit one overflowed their sum")
        comp.pop("weight", None)
        part = length_from_spec(comp, where, check)
        if weight is not None and part is not None:
            parts.append((weight, part))
    return Mixture(parts) if len(parts) == len(comps) else None


def _empirical(node: dict, path: str, check: Checker) -> Length | None:
    given = [k for k in ("values", "quantiles", "file") if k in node]
    if len(given) != 1:
        check.fail(path, "empirical takes exactly one of values, quantiles, or file + column")
        return None
    if given[0] == "values":
        values = node["values"]
        if not isinstance(values, list) or not values or not all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
            check.fail(f"{path}.values", "expected a non-empty list of integers >= 0")
            return None
        return Empirical(values)
    if given[0] == "quantiles":
        return _quantiles(node["quantiles"], f"{path}.quantiles", check)
    file = check.file(node, "file", path)
    column = check.string(node, "column", path)
    if file is None or column is None:
        return None
    try:
        return Empirical(read_columns(file, [column])[column])
    except TraceError as exc:
        check.fail(f"{path}.file", str(exc))
        return None


def _quantiles(points: Any, path: str, check: Checker) -> Length | None:
    ok = isinstance(points, list) and len(points) >= 2 and all(
        isinstance(p, list) and len(p) == 2 and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in p)
        for p in points)
    if not ok:
        check.fail(path, "expected a list of [q, value] pairs, e.g. [[0, 10], [0.5, 300], [1, 4000]]")
        return None
    qs, vs = [p[0] for p in points], [p[1] for p in points]
    if qs[0] != 0 or qs[-1] != 1 or any(b <= a for a, b in itertools.pairwise(qs)):
        check.fail(path, f"q must increase strictly from 0 to 1, got {qs}")
        return None
    if any(b < a for a, b in itertools.pairwise(vs)) or vs[0] < 0:
        check.fail(path, f"values must be >= 0 and non-decreasing, got {vs}")
        return None
    return QuantileCurve([(float(q), float(v)) for q, v in points])


DURATION_DISTS = ("fixed", "uniform", "normal", "lognormal", "gamma", "empirical")


def duration_from_spec(node: Any, path: str, check: Checker) -> Duration | None:
    """A ``Duration`` in seconds: a number, or ``{dist, ...}`` as for lengths but in seconds (fractions
    allowed; ``min`` defaults to 0, ``max`` to none; ``empirical`` takes ``values`` only)."""
    if isinstance(node, (int, float)) and not isinstance(node, bool):
        node = {"dist": "fixed", "value": node}
    if not isinstance(node, dict):
        check.fail(path, f"expected seconds (a number) or a distribution such as {{dist: lognormal, median: 1.5, "
                         f"sigma: 1.0, max: 60}}, got {node!r}")
        return None
    dist = check.string(node, "dist", path, choices=DURATION_DISTS)
    if dist is None:
        return None
    keys = {"fixed": ("value",), "uniform": (), "normal": ("mean", "std"), "lognormal": ("median", "sigma"),
            "gamma": ("shape", "scale"), "empirical": ("values",)}[dist]
    if check.mapping(node, path, ("dist", *keys, *_BOUNDS)) is None:
        return None
    before = len(check.problems)
    num = check.number
    lo, hi = num(node, "min", path, 0.0, minimum=0), num(node, "max", path, float("inf"), minimum=0)
    if lo is not None and hi is not None and lo > hi:
        check.fail(path, f"min ({lo}) must be <= max ({hi})")
    if dist == "fixed":
        d: Length = Fixed(num(node, "value", path, minimum=0) or 0)
    elif dist == "uniform":
        if "min" not in node or "max" not in node:
            check.fail(path, "uniform needs both min and max")
        d = _UniformSeconds(lo or 0.0, hi if hi not in (None, float("inf")) else 0.0)
    elif dist == "normal":
        d = Normal(num(node, "mean", path) or 0.0, num(node, "std", path, minimum=0) or 0.0)
    elif dist == "lognormal":
        d = LogNormal(num(node, "median", path, above=0) or 1.0, num(node, "sigma", path, minimum=0) or 0.0)
    elif dist == "gamma":
        d = Gamma(num(node, "shape", path, above=0) or 1.0, num(node, "scale", path, above=0) or 1.0)
    else:
        values = node.get("values")
        if not isinstance(values, list) or not values or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for v in values):
            check.fail(f"{path}.values", "expected a non-empty list of seconds >= 0")
            return None
        d = Empirical(values)
    if len(check.problems) > before:
        return None
    return Duration(d, lo, hi)


class _UniformSeconds(Length):
    def __init__(self, low: float, high: float) -> None:
        self.low, self.high = low, high

    def raw(self, rng: Any) -> float:
        return rng.uniform(self.low, self.high)


def joint_from_spec(node: Any, path: str, check: Checker) -> JointEmpirical | None:
    """``{file, input, output, jitter?, min_input?, max_input?, min_output?, max_output?}``."""
    keys = ("file", "input", "output", "jitter", "min_input", "max_input", "min_output", "max_output")
    if check.mapping(node, path, keys, required=("file", "input", "output")) is None:
        return None
    file = check.file(node, "file", path)
    cin, cout = check.string(node, "input", path), check.string(node, "output", path)
    jitter = check.number(node, "jitter", path, 0.0, minimum=0, maximum=0.5)
    bounds = [check.number(node, k, path, d, integer=True, minimum=0)
              for k, d in (("min_input", 1), ("max_input", 10**9), ("min_output", 1), ("max_output", 10**9))]
    if file is None or cin is None or cout is None or jitter is None or None in bounds:
        return None
    try:
        cols = read_columns(file, [cin, cout])
    except TraceError as exc:
        check.fail(f"{path}.file", str(exc))
        return None
    return JointEmpirical(list(zip(cols[cin], cols[cout], strict=True)), jitter, tuple(bounds))
