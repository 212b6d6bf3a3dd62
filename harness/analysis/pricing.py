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
``cost_line`` says it in one line. docs/cost.md explains each figure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from harness.spec.cost import HOURS_PER_MONTH, CostSpec

__all__ = ["Floor", "RunCost", "StepCost", "Tokens", "cost_line", "floor_of", "metered_cost", "render_cost_line",
           "run_cost", "step_cost"]

FLOOR_METRIC = "tokens_per_s_per_user"


@dataclass(frozen=True, kw_only=True)
class Tokens:
    """Tokens a step consumed, from the server's usage: failed requests without usage are not in them."""

    input: int = 0
    """Prompt tokens not served from the prefix cache."""
    cached_input: int = 0
    """Prompt tokens the usage reported as cached (``prompt_tokens_details.cached_tokens`` and the like)."""
    output: int = 0

    def __add__(self, other: Tokens) -> Tokens:
        return Tokens(input=self.input + other.input, cached_input=self.cached_input + other.cached_input,
                      output=self.output + other.output)


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


@dataclass(frozen=True, kw_only=True)
class StepCost:
    """One step's figures (module docstring); None where a part is missing, with the reason in ``notes``."""

    index: int
    level: float
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
    notes: list[str] = field(default_factory=list)

    def to_json(self, *, step: bool = False) -> dict[str, Any]:
        """The summary's fields; ``step`` adds ``index`` and ``level`` (the per-step copy sits in its step)."""
        out = asdict(self)
        if not step:
            del out["index"], out["level"]
        return out


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


BASES = {"max_load_within_slo": "largest load within SLO", "knee": "the knee",
         "largest_load": "largest judged load: no knee found, no SLO given"}


@dataclass(frozen=True, kw_only=True)
class RunCost:
    """The run's cost view: the prices, what the whole test consumed and cost, the figures at reference steps."""

    spec: CostSpec
    tokens: Tokens
    test_cost: float | None
    at: dict[str, StepCost]
    """Basis (a ``BASES`` key) -> that step's figures; the first one is the verdict's."""
    note: str = ""
    unit: str = "users"
    """The load level's unit, for ``cost_line``."""

    def to_json(self) -> dict[str, Any]:
        return {"currency": self.spec.currency, "hours_per_month": HOURS_PER_MONTH, "prices": self.spec.prices(),
                "tokens": asdict(self.tokens), "test_cost": self.test_cost,
                "at": {basis: c.to_json(step=True) for basis, c in self.at.items()},
                "reference": next(iter(self.at), None), "note": self.note, "line": cost_line(self)}


def run_cost(spec: CostSpec, steps: list[StepCost], *, judged: dict[int, bool | None], knee_index: int | None,
             max_load_within_slo: float | None, slo_given: bool, unit: str = "users") -> RunCost:
    """The run's view from each step's figures. ``judged``: each judged step's index -> whether it met the SLO
    (None without SLOs); only judged steps are references."""
    total = sum((s.tokens for s in steps), Tokens())
    tests = [s.test_cost for s in steps if s.test_cost is not None]
    at: dict[str, StepCost] = {}
    ok = [s for s in steps if s.index in judged]
    if slo_given and max_load_within_slo is not None:
        within = [s for s in ok if judged[s.index] and s.level == max_load_within_slo]
        if within:
            at["max_load_within_slo"] = within[-1]  # a re-run level: its last judged step
    if knee_index is not None:
        knee = next((s for s in ok if s.index == knee_index), None)
        if knee is not None:
            at["knee"] = knee
    if not at and not slo_given and knee_index is None and ok:
        at["largest_load"] = max(ok, key=lambda s: (s.level, s.index))
    note = "" if at else ("no load met the SLO" if slo_given else "no judged step")
    return RunCost(spec=spec, tokens=total, test_cost=_r(sum(tests)) if tests else None, at=at, note=note,
                   unit=unit)


def _money(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 100 else f"{x:,.0f}"


def _volume(tokens: float) -> str:
    for size, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if tokens >= size:
            return f"{tokens / size:.3g} {unit}"
    return f"{tokens:.0f}"


def cost_line(cost: RunCost) -> str:
    """The verdict's one line: per 1M output tokens at the reference step, flat vs metered, and the break-even."""
    return render_cost_line(currency=cost.spec.currency, test_cost=cost.test_cost, at=cost.at, note=cost.note,
                            unit=cost.unit)


def render_cost_line(*, currency: str, test_cost: float | None, at: Mapping[str, Any], note: str, unit: str) -> str:
    """``cost_line`` from the figures alone, as summary.json's ``cost`` holds them (``at``: basis -> a step's
    figures, a ``StepCost`` or its read model ``summary_model.StepCost``; ``unit``: the load level's)."""
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
    line = f"cost at {c.level:g} {unit} ({BASES.get(basis, basis)}): {figures}"
    if c.break_even_tokens_per_month is not None:
        line += (f"; flat beats metered above {_volume(c.break_even_tokens_per_month)} output tokens/month "
                 f"(this load carries {_volume(c.capacity_tokens_per_month or 0)}; floor: {c.floor})")
    elif c.flat_per_mtok is not None and c.metered_blended_per_mtok is not None:
        line += f"; no break-even: {'; '.join(c.notes)}"
    return line + spent
