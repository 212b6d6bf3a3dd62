"""What capacity costs: a dedicated deployment's flat price against metered per-token prices, per step. Pure.

The scenario's ``cost:`` block (``spec/cost.py``) gives a flat price
(``per_hour`` or ``per_month``), metered prices per million tokens (``input_per_mtok``, ``output_per_mtok``,
``cached_input_per_mtok``), or both, in one ``currency`` (a label, never converted; default ``USD``). Per step
(``step_cost``), with T the step's sustained output tokens/s and I, C, O its uncached input, cached input and
output tokens::

    flat_per_mtok            = flat per hour / (T × 3600) × 1e6           the deployment fully used at this load
    metered_per_mtok         = output_per_mtok                            the price list, as is
    metered_blended_per_mtok = output_per_mtok + (I/O)·input_per_mtok + (C/O)·cached_input_per_mtok
                               metered cost of 1M output tokens with the input that comes with them at this
                               step's mix: what ``flat_per_mtok`` compares with (the flat price pays for both)
    break_even_tokens_per_month = flat per month / metered_blended_per_mtok × 1e6   (output tokens)
    capacity_tokens_per_month   = T × 3600 × HOURS_PER_MONTH                     (output tokens)
    test_cost                = (I·input + C·cached + O·output) / 1e6     what the step's tokens cost metered

Above the break-even volume a month, flat beats metered; it is reachable at this load only when it is within the
capacity (equivalently ``flat_per_mtok <= metered_blended_per_mtok``). The break-even counts only where the
speed floor holds (the scenario's ``tokens_per_s_per_user`` SLO, judged like the SLO); without one it says
"no floor given". A missing part (no flat price, no metered price, no output) gives None and a note saying why,
never a division error. ``run_cost`` picks the reference steps (the largest load within SLO, the knee) and
``summary.cost.render_cost_line`` says it in one line. docs/cost.md explains each figure; the figures' types are
the summary's (``harness.summary.cost``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.spec.cost import HOURS_PER_MONTH, CostSpec
from harness.summary.cost import RunCost, StepCost, Tokens, render_cost_line

__all__ = ["Floor", "floor_of", "metered_cost", "run_cost", "step_cost"]

FLOOR_METRIC = "tokens_per_s_per_user"


def metered_cost(spec: CostSpec, tokens: Tokens) -> float | None:
    """What ``tokens`` cost at the metered prices (``test_cost`` in the module docstring); None without them."""
    p_in, p_cached, p_out = spec.input_per_mtok, spec.cached_price, spec.output_per_mtok
    if p_in is None or p_cached is None or p_out is None:
        return None
    return (tokens.input * p_in + tokens.cached_input * p_cached + tokens.output * p_out) / 1e6


@dataclass(frozen=True, kw_only=True)
class Floor:
    """The speed floor at one step: ``held`` None when there is none or the step was not judged."""

    held: bool | None
    text: str


def floor_of(thresholds: list[str], checks: list[Any]) -> Floor:
    """The floor from the scenario's SLO ``thresholds`` (their texts) and the step's ``SloCheck`` list."""
    floors = [t for t in thresholds if t.startswith(FLOOR_METRIC + ":")]
    if not floors:
        return Floor(held=None, text="no floor given")
    mine = [c for c in checks if c.threshold in floors]
    if not mine:
        return Floor(held=None, text=f"{'; '.join(floors)} not judged at this step")
    held = all(c.passed for c in mine)
    seen = "; ".join(f"{c.threshold}, observed {c.observed}" for c in mine)
    return Floor(held=held, text=f"{'held' if held else 'not held'} ({seen})")


def _r(x: float | None, digits: int = 6) -> float | None:
    return None if x is None else round(x, digits)


def step_cost(spec: CostSpec, *, index: int, level: float, tokens: Tokens, output_tokens_per_s: float,
              floor: Floor) -> StepCost:
    """One step's cost figures; ``tokens``: what the step consumed (the mix), ``output_tokens_per_s``: its
    sustained output throughput (measured part)."""
    notes: list[str] = []
    blended = flat = capacity = even = None
    p_in, p_cached, p_out = spec.input_per_mtok, spec.cached_price, spec.output_per_mtok
    test = metered_cost(spec, tokens)
    if test is not None and p_in is not None and p_cached is not None and p_out is not None:
        if tokens.output:
            blended = p_out + (tokens.input * p_in + tokens.cached_input * p_cached) / tokens.output
        else:
            notes.append("no output tokens: no metered price per 1M output tokens")
    else:
        notes.append("no metered price given (input_per_mtok, output_per_mtok)")
    flat_hour, flat_month = spec.flat_per_hour, spec.flat_per_month
    if flat_hour is None or flat_month is None:
        notes.append("no flat price given (per_hour or per_month)")
    elif output_tokens_per_s > 0:
        flat = flat_hour / (output_tokens_per_s * 3600) * 1e6
        capacity = output_tokens_per_s * 3600 * HOURS_PER_MONTH
    else:
        notes.append("no output throughput at this step: no flat price per 1M output tokens")
    if flat_month is not None and blended is not None:
        if floor.held is False:
            notes.append("speed floor not held at this load: no break-even")
        elif floor.held is None and floor.text != "no floor given":
            notes.append("speed floor not judged at this step: no break-even")
        elif blended == 0:
            notes.append("metered tokens cost nothing: flat never beats metered")
        else:
            even = flat_month / blended * 1e6
            if capacity is not None and even > capacity:
                notes.append("break-even above what the deployment carries at this load: metered is cheaper here")
    return StepCost(index=index, level=level, currency=spec.currency, tokens=tokens, test_cost=_r(test),
                    flat_per_mtok=_r(flat), metered_per_mtok=p_out if spec.metered else None,
                    metered_blended_per_mtok=_r(blended), break_even_tokens_per_month=_r(even, 0),
                    capacity_tokens_per_month=_r(capacity, 0), floor=floor.text, floor_held=floor.held, notes=notes)


def run_cost(spec: CostSpec, steps: list[StepCost], *, judged: dict[int, bool | None], knee_index: int | None,
             max_load_within_slo: float | None, slo_given: bool, unit: str = "users") -> RunCost:
    """The run's view from each step's figures. ``judged``: each judged step's index -> whether it met the SLO
    (None without SLOs); only judged steps are references."""
    total = sum((s.tokens for s in steps), Tokens())
    tests = [s.test_cost for s in steps if s.test_cost is not None]
    at: dict[str, StepCost] = {}
    ok = [(s.index, s) for s in steps if isinstance(s.index, int) and s.index in judged]  # step_cost sets them
    if slo_given and max_load_within_slo is not None:
        within = [s for i, s in ok if judged[i] and s.level == max_load_within_slo]
        if within:
            at["max_load_within_slo"] = within[-1]  # a re-run level: its last judged step
    if knee_index is not None:
        knee = next((s for i, s in ok if i == knee_index), None)
        if knee is not None:
            at["knee"] = knee
    if not at and not slo_given and knee_index is None and ok:
        at["largest_load"] = max(ok, key=lambda p: (p[1].level, p[0]))[1]
    note = "" if at else ("no load met the SLO" if slo_given else "no judged step")
    test = _r(sum(tests)) if tests else None
    return RunCost(currency=spec.currency, hours_per_month=HOURS_PER_MONTH, prices=spec.prices(), tokens=total,
                   test_cost=test, at=at, reference=next(iter(at), None), note=note,
                   line=render_cost_line(currency=spec.currency, test_cost=test, at=at, note=note, unit=unit))
