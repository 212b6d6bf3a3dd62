"""Cost arithmetic on plain data: flat, metered, both, break-even, the speed floor, currency, missing parts."""

from __future__ import annotations

import json

import msgspec
import pytest

from harness.analysis.cost.pricing import Floor, floor_of, run_cost, step_cost
from harness.checker import Checker
from harness.spec.cost import HOURS_PER_MONTH, CostSpec, cost_from_spec
from harness.summary import SloCheck, StepCost, Tokens

NO_FLOOR = Floor(held=None, text="no floor given")
HELD = Floor(held=True, text="held (tokens_per_s_per_user: p(5)>20, observed 31.0)")
# 3M uncached input, 1M cached input, 2M output tokens; 1000 output tokens/s sustained
MIX = Tokens(input=3_000_000, cached_input=1_000_000, output=2_000_000)


def cost(spec: CostSpec, tokens: Tokens = MIX, tps: float = 1000.0, floor: Floor = NO_FLOOR, **kw) -> StepCost:
    return step_cost(spec, index=kw.get("index", 0), level=kw.get("level", 8), tokens=tokens, output_tokens_per_s=tps,
                     floor=floor)


def test_flat_per_hour_is_divided_by_the_sustained_output_throughput():
    c = cost(CostSpec(per_hour=3.6))
    # 1000 tokens/s = 3.6M tokens an hour: 3.6 per hour buys 1M output tokens for exactly 1
    assert c.flat_per_mtok == pytest.approx(1.0)
    assert c.capacity_tokens_per_month == 1000 * 3600 * 730
    assert c.test_cost is None and c.metered_per_mtok is None and c.break_even_tokens_per_month is None
    assert c.notes == ["no metered price given (input_per_mtok, output_per_mtok)"]


def test_per_month_is_730_hours():
    spec = CostSpec(per_month=730 * 3.6)
    assert HOURS_PER_MONTH == 730 and spec.flat_per_hour == pytest.approx(3.6)
    assert cost(spec).flat_per_mtok == pytest.approx(1.0)
    assert CostSpec(per_hour=2.0).flat_per_month == 1460.0


def test_metered_test_cost_and_the_blended_price():
    c = cost(CostSpec(input_per_mtok=0.5, output_per_mtok=1.5, cached_input_per_mtok=0.05))
    # 3M x 0.5 + 1M x 0.05 + 2M x 1.5 = 1.5 + 0.05 + 3.0
    assert c.test_cost == pytest.approx(4.55)
    assert c.metered_per_mtok == 1.5
    # per 1M output tokens: 1.5 + the 1.5M uncached (x 0.5) and 0.5M cached (x 0.05) input tokens that come with them
    assert c.metered_blended_per_mtok == pytest.approx(1.5 + 0.75 + 0.025)
    assert c.flat_per_mtok is None and c.notes == ["no flat price given (per_hour or per_month)"]


def test_cached_input_costs_the_input_price_when_no_cache_price_is_given():
    c = cost(CostSpec(input_per_mtok=0.5, output_per_mtok=1.5))
    assert c.test_cost == pytest.approx(4 * 0.5 + 2 * 1.5)
    assert c.metered_blended_per_mtok == pytest.approx(1.5 + 2 * 0.5)


def test_both_give_a_break_even_volume_where_flat_and_metered_cost_the_same():
    spec = CostSpec(per_month=4999, input_per_mtok=0.5, output_per_mtok=1.5, cached_input_per_mtok=0.05)
    c = cost(spec, floor=HELD)
    blended = 1.5 + 0.75 + 0.025
    assert c.break_even_tokens_per_month == round(4999 / blended * 1e6)
    # at that volume a month the metered bill equals the flat one
    assert c.break_even_tokens_per_month / 1e6 * blended == pytest.approx(4999, rel=1e-6)
    assert c.break_even_tokens_per_month < c.capacity_tokens_per_month and c.flat_per_mtok < blended
    assert c.floor_held is True and c.floor.startswith("held") and c.notes == []


def test_a_break_even_beyond_the_capacity_at_this_load_says_metered_is_cheaper_here():
    c = cost(CostSpec(per_hour=100.0, input_per_mtok=0.5, output_per_mtok=1.5), tps=10.0)
    assert c.flat_per_mtok > c.metered_blended_per_mtok
    assert c.break_even_tokens_per_month > c.capacity_tokens_per_month
    assert any("metered is cheaper here" in n for n in c.notes), c.notes


def test_no_break_even_where_the_speed_floor_does_not_hold():
    spec = CostSpec(per_hour=4.2, input_per_mtok=0.5, output_per_mtok=1.5)
    c = cost(spec, floor=Floor(held=False, text="not held (tokens_per_s_per_user: p(5)>20, observed 12.0)"))
    assert c.break_even_tokens_per_month is None and c.flat_per_mtok is not None and c.floor_held is False
    assert "speed floor not held at this load: no break-even" in c.notes
    unjudged = cost(spec, floor=Floor(held=None, text="tokens_per_s_per_user: p(5)>20 not judged at this step"))
    assert unjudged.break_even_tokens_per_month is None and "speed floor not judged" in unjudged.notes[0]
    assert cost(spec).break_even_tokens_per_month is not None and cost(spec).floor == "no floor given"


def test_missing_parts_give_none_and_a_reason_never_a_division_error():
    spec = CostSpec(per_hour=4.2, input_per_mtok=0.5, output_per_mtok=1.5)
    idle = cost(spec, tokens=Tokens(), tps=0.0)
    assert idle.flat_per_mtok is idle.metered_blended_per_mtok is idle.break_even_tokens_per_month is None
    assert idle.test_cost == 0 and len(idle.notes) == 2, idle.notes
    free = cost(CostSpec(per_hour=4.2, input_per_mtok=0, output_per_mtok=0))
    assert free.metered_blended_per_mtok == 0 and free.break_even_tokens_per_month is None
    assert "metered tokens cost nothing: flat never beats metered" in free.notes


def test_currency_is_a_label_passed_through():
    spec = CostSpec(per_month=4999, currency="INR", input_per_mtok=40, output_per_mtok=120)
    c = cost(spec)
    assert c.currency == "INR" and msgspec.to_builtins(c)["currency"] == "INR"
    run = run_cost(spec, [c], judged={0: None}, knee_index=0, max_load_within_slo=None, slo_given=False)
    assert run.currency == "INR" and run.prices["currency"] == "INR"
    assert "INR" in run.line and "USD" not in run.line and run.render("closed") == run.line
    assert CostSpec(per_hour=1).currency == "USD"


def test_the_floor_comes_from_the_speed_slo_as_judged():
    floor = "tokens_per_s_per_user: p(5)>20"
    checks = [SloCheck(threshold="ttft: p(95)<500", observed=900.0, passed=False, abort_on_fail=False),
              SloCheck(threshold=floor, observed=31.0, passed=True, abort_on_fail=False)]
    assert floor_of(["ttft: p(95)<500", floor], checks) == Floor(held=True, text=f"held ({floor}, observed 31.0)")
    checks[1] = SloCheck(threshold=floor, observed=12.0, passed=False, abort_on_fail=False)
    assert floor_of(["ttft: p(95)<500", floor], checks).held is False
    assert floor_of(["ttft: p(95)<500"], checks) == NO_FLOOR
    assert floor_of([floor], []).held is None  # a step not judged (running, or the fleet changed)


def test_the_run_reports_at_the_largest_load_within_slo_and_at_the_knee():
    spec = CostSpec(per_hour=4.2, input_per_mtok=0.5, output_per_mtok=1.5)
    steps = [cost(spec, tps=t, index=i, level=lv) for i, (lv, t) in enumerate(((8, 500.0), (16, 900.0), (24, 950.0)))]
    run = run_cost(spec, steps, judged={0: True, 1: True, 2: False}, knee_index=1, max_load_within_slo=16,
                   slo_given=True, unit="users")
    assert list(run.at) == ["max_load_within_slo", "knee"] and run.at["knee"].index == 1
    assert run.tokens == Tokens(input=9_000_000, cached_input=3_000_000, output=6_000_000)
    assert run.test_cost == pytest.approx(3 * steps[0].test_cost)
    line = run.line
    assert line.startswith("cost at 16 users (largest load within SLO): flat ") and "per 1M output tokens" in line
    assert "flat beats metered above" in line and "the test cost" in line
    data = json.loads(msgspec.json.encode(run))
    assert data["reference"] == "max_load_within_slo" and data["at"]["knee"]["level"] == 16
    # nothing within SLO, no knee: no reference load, and the line says why
    none = run_cost(spec, steps, judged={0: False, 1: False, 2: False}, knee_index=None, max_load_within_slo=None,
                    slo_given=True)
    assert none.at == {} and none.line.startswith("cost: no load met the SLO: no reference load")
    # neither an SLO nor a knee: the largest judged load, said so
    top = run_cost(spec, steps, judged={0: None, 1: None}, knee_index=None, max_load_within_slo=None, slo_given=False)
    assert list(top.at) == ["largest_load"] and top.at["largest_load"].index == 1


def parse(node: object) -> tuple[CostSpec | None, list[str]]:
    check = Checker()
    return cost_from_spec(node, "cost", check), check.problems


@pytest.mark.parametrize("node,problem", [
    ({"per_hour": 4.2, "per_month": 4999}, "cost: give per_hour or per_month, not both"),
    ({"per_hour": -1}, "cost.per_hour: must be > 0, got -1"),
    ({"input_per_mtok": -0.5, "output_per_mtok": 1}, "cost.input_per_mtok: must be >= 0, got -0.5"),
    ({"per_hour": "4.2"}, "cost.per_hour: expected a number, got the string '4.2'"),
    ({"per_hour": True}, "cost.per_hour: expected a number, got a boolean True"),
    ({"per_hours": 4.2}, "cost: unknown key 'per_hours'; did you mean 'per_hour'?"),
    ({"input_per_mtok": 0.5}, "cost: metered prices need both input_per_mtok and output_per_mtok: add output_per_mtok"),
    ({"per_hour": 1, "cached_input_per_mtok": 0.1}, "metered prices need both input_per_mtok and output_per_mtok"),
    ({"currency": "EUR"}, "cost: give a flat price (per_hour or per_month), metered prices"),
    ({"per_hour": 1, "currency": 978}, "cost.currency: expected a non-empty string, got an integer 978"),
    ([4.2], "cost: expected a mapping, got a list"),
])
def test_malformed_cost_blocks_name_the_key(node, problem):
    spec, problems = parse(node)
    assert spec is None and len(problems) == 1 and problem in problems[0], problems


def test_a_good_cost_block_parses():
    spec, problems = parse({"per_month": 4999, "currency": "INR", "input_per_mtok": 0.5, "output_per_mtok": 1.5})
    assert problems == [] and spec == CostSpec(per_month=4999, currency="INR", input_per_mtok=0.5, output_per_mtok=1.5)
    assert spec.metered and spec.cached_price == 0.5
