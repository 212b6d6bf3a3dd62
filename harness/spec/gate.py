"""The regression gate's thresholds: how much worse a metric may get before ``kneecap compare --gate`` calls it a
regression (the scenario's ``gate:`` block, or the defaults). Pure.

Grammar (one string per gated metric and statistic; ``off`` or ``false`` leaves it out)::

    threshold := [SIGN] NUMBER "%"                  a relative change: "+10%" (latency), "-10%" (throughput)
               | [SIGN] NUMBER "pp"                 error_rate only: percentage points ("+0.5%" means the same)
               | [SIGN] NUMBER ("step" | "steps")   knee only: steps of the load grid ("-1 step")
    SIGN      := "+" | "-"                          must point the bad way; without it, the bad way is meant

The block (every key optional; a latency metric takes one string for all three percentiles or a mapping)::

    gate:
      ttft: {p99: "+10%"}         # ttft, tpot, e2e (and itl, off by default): p50, p95, p99
      tpot: "+10%"
      throughput: "-10%"          # successful requests/s at each load level
      goodput: "-10%"             # requests/s that met every SLO
      error_rate: "+0.5%"         # failed / all requests, in percentage points
      knee: "-1 step"             # the knee's load: grid steps (the staircase's step, a search's resolution) or "%"

``DEFAULTS`` (docs/gate.md says why): latency percentiles +10%, throughput and goodput -10%, error rate +0.5
percentage points, knee -1 step. A key the block names replaces its default; the rest keep theirs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from harness.checker import Checker
from harness.metrics.vocabulary import CI_PERCENTILES, GATE_DEFAULT, GATE_LATENCIES

__all__ = ["DEFAULTS", "LATENCY", "STATS", "GateSpec", "GateThreshold", "gate_from_spec", "parse_threshold"]

LATENCY = GATE_LATENCIES
"""The latency metrics a gate may judge (``latency_ms`` in summary.json): the registry's ``gate`` ones."""
STATS = CI_PERCENTILES
"""The percentiles a gate judges: those summary.json gives an interval for (``p50_ci``, ``p95_ci``, ``p99_ci``)."""
_WORSE = {**dict.fromkeys(LATENCY, 1), "error_rate": 1, "throughput": -1, "goodput": -1, "knee": -1}
"""Which way is bad: +1, an increase (latency, errors); -1, a decrease (throughput, goodput, the knee's load)."""
_UNITS: dict[str, tuple[str, ...]] = {**dict.fromkeys(LATENCY, ("relative",)), "throughput": ("relative",),
                                      "goodput": ("relative",), "error_rate": ("points",),
                                      "knee": ("steps", "relative")}
_PATTERN = re.compile(r"^\s*([+-]?)\s*(\d+(?:\.\d+)?)\s*(%|pp|steps?)\s*$")
Unit = Literal["relative", "points", "steps"]


@dataclass(frozen=True, kw_only=True)
class GateThreshold:
    """How much worse one statistic of one metric may get: ``GateThreshold(metric="ttft", stat="p99", limit=0.1,
    unit="relative", text="+10%")`` is "TTFT p99 regressed when it rose 10% or more"."""

    metric: str
    """``ttft``, ``tpot``, ``itl``, ``e2e``, ``throughput``, ``goodput``, ``error_rate`` or ``knee``."""
    stat: str | None = None
    """``p50``, ``p95`` or ``p99`` for a latency metric; None otherwise."""
    limit: float
    """The size of the change, >= 0, in ``unit``: 0.1 (10%), 0.005 (0.5 percentage points), 1.0 (one step)."""
    unit: Unit
    """``relative`` (a share of the base value), ``points`` (an absolute change of a rate), ``steps`` (grid steps)."""
    text: str
    """As written in the block, or the default's text."""

    @property
    def worse(self) -> int:
        """+1 when an increase is bad (latency, errors), -1 when a decrease is (throughput, goodput, knee)."""
        return _WORSE[self.metric]

    def say(self, change: float) -> str:
        """A change in this threshold's unit, signed: ``+12.0%``, ``+0.40 pp``, ``-1 step``."""
        if self.unit == "points":
            return f"{change * 100:+.2f} pp"
        if self.unit == "steps":
            return f"{change:+.3g} step" + ("" if abs(change) == 1 else "s")
        return f"{change * 100:+.1f}%"

    @property
    def name(self) -> str:
        """``ttft p99``, ``throughput``."""
        return f"{self.metric} {self.stat}" if self.stat else self.metric


def parse_threshold(metric: str, text: object, stat: str | None = None) -> GateThreshold:
    """One threshold string for ``metric`` (module docstring's grammar); ValueError says what it expects."""
    if metric not in _WORSE:
        raise ValueError(f"unknown gate metric {metric!r}; choose one of {', '.join(_WORSE)}")
    sign = "+" if _WORSE[metric] > 0 else "-"
    examples = {"relative": f'"{sign}10%"', "points": f'"{sign}0.5%" (percentage points)',
                "steps": f'"{sign}1 step"'}
    expect = " or ".join(examples[u] for u in _UNITS[metric])
    m = _PATTERN.match(text) if isinstance(text, str) else None
    if m is None:
        got = f"{text!r}" if isinstance(text, str) else f"{type(text).__name__} {text!r}"
        raise ValueError(f"expected a change such as {expect}, or off; got {got}")
    given, number, suffix = m.groups()
    unit: Unit = "steps" if suffix.startswith("step") else "points" if metric == "error_rate" else "relative"
    if unit not in _UNITS[metric] or (suffix == "pp" and metric != "error_rate"):
        raise ValueError(f"{metric} takes {expect}; got {text!r}")
    if given and given != sign:
        way = "an increase" if sign == "+" else "a decrease"
        raise ValueError(f"{metric} regresses by {way}: write {sign}{number}{suffix}, got {text!r} (the gate judges "
                         "both ways; the sign names the bad one)")
    limit = float(number) / (100 if unit != "steps" else 1)
    if unit == "relative" and sign == "-" and limit >= 1:
        raise ValueError(f"a decrease of {number}% or more is impossible (the value would be <= 0); got {text!r}")
    if unit == "points" and limit >= 1:
        raise ValueError(f"an error rate is at most 100%; got {text!r}")
    written = f"{sign}{number} {suffix}" if unit == "steps" else f"{sign}{number}{suffix}"
    return GateThreshold(metric=metric, stat=stat, limit=limit, unit=unit, text=written)


def _defaults() -> dict[tuple[str, str | None], GateThreshold]:
    out: dict[tuple[str, str | None], GateThreshold] = {}
    for metric in GATE_DEFAULT:  # itl is off: with one token a chunk it is TPOT again, counted twice
        for stat in STATS:
            out[metric, stat] = parse_threshold(metric, "+10%", stat)
    for metric, text in (("throughput", "-10%"), ("goodput", "-10%"), ("error_rate", "+0.5%"), ("knee", "-1 step")):
        out[metric, None] = parse_threshold(metric, text)
    return out


@dataclass(frozen=True)
class GateSpec:
    """Every threshold the gate applies, by (metric, stat); a statistic left out is not gated."""

    thresholds: Mapping[tuple[str, str | None], GateThreshold]

    def get(self, metric: str, stat: str | None = None) -> GateThreshold | None:
        return self.thresholds.get((metric, stat))

    def latency(self) -> list[GateThreshold]:
        """The latency thresholds in a stable order (metric, then p50, p95, p99)."""
        return [t for m in LATENCY for s in STATS if (t := self.get(m, s)) is not None]


DEFAULTS = GateSpec(_defaults())
"""The gate without a ``gate:`` block: latency p50/p95/p99 +10% (ttft, tpot, e2e), throughput and goodput -10%,
error rate +0.5 percentage points, knee -1 step."""


def _off(value: Any) -> bool:
    return value is False or (isinstance(value, str) and value.strip().lower() == "off")


def gate_from_spec(node: Any, path: str, check: Checker) -> GateSpec:
    """The ``gate:`` block over ``DEFAULTS``; each problem goes to ``check`` with its key path (``gate.ttft.p99``)."""
    out = dict(DEFAULTS.thresholds)
    if check.mapping(node, path, _WORSE) is None:
        return DEFAULTS
    for metric, value in node.items():
        if metric not in _WORSE:
            continue  # check.mapping named it, with "did you mean"
        items: list[tuple[str | None, Any]]  # stat None: a metric without percentiles
        if metric in LATENCY and isinstance(value, dict):
            if check.mapping(value, f"{path}.{metric}", STATS) is None:
                continue
            items = [(s, value[s]) for s in STATS if s in value]
        else:
            items = [(s, value) for s in STATS] if metric in LATENCY else [(None, value)]
        for stat, text in items:
            where = f"{path}.{metric}" + (f".{stat}" if stat and isinstance(value, dict) else "")
            if _off(text):
                out.pop((metric, stat), None)
                continue
            try:
                out[metric, stat] = parse_threshold(metric, text, stat)
            except ValueError as exc:
                check.fail(where, str(exc))
                break  # one message for a string given to all three percentiles
    return GateSpec(out)
