"""What capacity cost, typed (summary.json's ``steps[].cost`` and ``cost``), and its verdict line said from the figures.
``analysis/cost/pricing.py`` computes the figures; docs/cost.md explains each. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from msgspec import UNSET, UnsetType

from harness.summary.view import View, level_unit

__all__ = ["BASES", "RunCost", "StepCost", "Tokens", "render_cost_line"]

BASES = {"max_load_within_slo": "largest load within SLO", "knee": "the knee",
         "largest_load": "largest judged load: no knee found, no SLO given"}
"""The reference steps a run's cost is given at, in the verdict's order of preference."""


class Tokens(View, frozen=True, kw_only=True):
    """Tokens a step consumed, from the server's usage: failed requests without usage are not in them."""

    input: int = 0
    """Prompt tokens not served from the prefix cache."""
    cached_input: int = 0
    """Prompt tokens the usage reported as cached (``prompt_tokens_details.cached_tokens`` and the like)."""
    output: int = 0

    def __add__(self, other: Tokens) -> Tokens:
        return Tokens(input=self.input + other.input, cached_input=self.cached_input + other.cached_input,
                      output=self.output + other.output)


class StepCost(View, frozen=True, kw_only=True):
    """One step's figures (``analysis.cost.pricing``); None where a part is missing, with the reason in ``notes``. A
    step's own copy leaves out ``index`` and ``level`` (its step says them); ``RunCost.at``'s copies carry them."""

    currency: str
    tokens: Tokens
    test_cost: float | None = None
    flat_per_mtok: float | None = None
    metered_per_mtok: float | None = None
    metered_blended_per_mtok: float | None = None
    break_even_tokens_per_month: float | None = None
    capacity_tokens_per_month: float | None = None
    floor: str = "no floor given"
    floor_held: bool | None = None
    notes: list[str] = []
    index: int | UnsetType = UNSET
    level: float | UnsetType = UNSET


class RunCost(View, frozen=True, kw_only=True):
    """The run's cost view: the prices, what the whole test consumed and cost, the figures at reference steps."""

    currency: str
    hours_per_month: float
    prices: dict[str, Any]
    tokens: Tokens
    test_cost: float | None
    at: dict[str, StepCost]
    """Basis (a ``BASES`` key) -> that step's figures, the verdict's reference first."""
    reference: str | None
    note: str
    line: str
    """The verdict's line as the run said it; kept for older readers, ``render`` says it again from the fields."""

    def render(self, mode: str) -> str:
        """The verdict's cost line from the figures; ``mode``: the summary's."""
        return render_cost_line(currency=self.currency, test_cost=self.test_cost, at=self.at, note=self.note,
                                unit=level_unit(mode))


def _money(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 100 else f"{x:,.0f}"


def _volume(tokens: float) -> str:
    for size, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if tokens >= size:
            return f"{tokens / size:.3g} {unit}"
    return f"{tokens:.0f}"


def render_cost_line(*, currency: str, test_cost: float | None, at: Mapping[str, StepCost], note: str,
                     unit: str) -> str:
    """The verdict's one line: per 1M output tokens at the reference step (``at``'s first), flat vs metered, and the
    break-even; ``unit``: the load level's."""
    cur = currency
    spent = f"; the test cost {_money(test_cost)} {cur} metered" if test_cost is not None else ""
    if not at:
        return f"cost: {note}: no reference load{spent}"
    basis, c = next(iter(at.items()))
    parts = []
    if c.flat_per_mtok is not None:
        parts.append(f"flat {_money(c.flat_per_mtok)} {cur}")
    if c.metered_blended_per_mtok is not None:
        parts.append(f"metered {_money(c.metered_blended_per_mtok)} {cur} (output {_money(c.metered_per_mtok or 0)}"
                     " + its input)")
    figures = " vs ".join(parts) + " per 1M output tokens" if parts else "; ".join(c.notes)
    level = c.level if isinstance(c.level, (int, float)) else float("nan")
    line = f"cost at {level:g} {unit} ({BASES.get(basis, basis)}): {figures}"
    if c.break_even_tokens_per_month is not None:
        line += (f"; flat beats metered above {_volume(c.break_even_tokens_per_month)} output tokens/month "
                 f"(this load carries {_volume(c.capacity_tokens_per_month or 0)}; floor: {c.floor})")
    elif c.flat_per_mtok is not None and c.metered_blended_per_mtok is not None:
        line += f"; no break-even: {'; '.join(c.notes)}"
    return line + spent
