"""The scenario's ``cost:`` block as typed values: a flat price, metered prices per million tokens, a currency. Pure.

``analysis/cost/pricing.py`` turns it into what a token costs at each load (docs/cost.md).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from harness.checker import Checker

__all__ = ["DEFAULT_CURRENCY", "HOURS_PER_MONTH", "CostSpec", "cost_from_spec"]

HOURS_PER_MONTH = 730.0
"""365 × 24 / 12: the month cloud price lists use to turn hourly prices into monthly ones."""
DEFAULT_CURRENCY = "USD"
_KEYS = ("per_hour", "per_month", "currency", "input_per_mtok", "output_per_mtok", "cached_input_per_mtok")


@dataclass(frozen=True, kw_only=True)
class CostSpec:
    """The scenario's ``cost:`` block; every price in ``currency`` (a label: nothing is converted)."""

    per_hour: float | None = None
    """Flat: the dedicated deployment's price per hour (exclusive with ``per_month``)."""
    per_month: float | None = None
    """Flat: its price per month (``HOURS_PER_MONTH`` hours)."""
    input_per_mtok: float | None = None
    """Metered: per million uncached input (prompt) tokens; given together with ``output_per_mtok``."""
    output_per_mtok: float | None = None
    cached_input_per_mtok: float | None = None
    """Metered: per million prompt tokens served from the prefix cache; absent: ``input_per_mtok`` (no discount)."""
    currency: str = DEFAULT_CURRENCY

    @property
    def flat_per_hour(self) -> float | None:
        return self.per_hour if self.per_hour is not None else \
            None if self.per_month is None else self.per_month / HOURS_PER_MONTH

    @property
    def flat_per_month(self) -> float | None:
        return self.per_month if self.per_month is not None else \
            None if self.per_hour is None else self.per_hour * HOURS_PER_MONTH

    @property
    def metered(self) -> bool:
        return self.input_per_mtok is not None and self.output_per_mtok is not None

    @property
    def cached_price(self) -> float | None:
        return self.cached_input_per_mtok if self.cached_input_per_mtok is not None else self.input_per_mtok

    def prices(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


def cost_from_spec(node: Any, path: str, check: Checker) -> CostSpec | None:
    """The ``cost:`` mapping as a ``CostSpec``; problems go to ``check`` with their key path (None then)."""
    before = len(check.problems)
    if check.mapping(node, path, _KEYS) is None:
        return None
    flat = {k: check.number(node, k, path, None, above=0) for k in ("per_hour", "per_month")}
    metered = {k: check.number(node, k, path, None, minimum=0)
               for k in ("input_per_mtok", "output_per_mtok", "cached_input_per_mtok")}
    currency = check.string(node, "currency", path, DEFAULT_CURRENCY)
    if "per_hour" in node and "per_month" in node:
        check.fail(path, f"give per_hour or per_month, not both (a month is {HOURS_PER_MONTH:g} hours)")
    given = [k for k in ("input_per_mtok", "output_per_mtok") if k in node]
    if len(given) == 1 or ("cached_input_per_mtok" in node and not given):
        missing = [k for k in ("input_per_mtok", "output_per_mtok") if k not in node]
        check.fail(path, f"metered prices need both input_per_mtok and output_per_mtok: add {', '.join(missing)}")
    if not set(node) & set(_KEYS) - {"currency"} and set(node) <= set(_KEYS):  # an unknown key says enough
        check.fail(path, "give a flat price (per_hour or per_month), metered prices (input_per_mtok and "
                         "output_per_mtok), or both")
    if len(check.problems) > before:
        return None
    return CostSpec(**flat, **metered, currency=currency)
