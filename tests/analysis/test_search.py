"""The knee search's chooser on synthetic servers, its grid, its summary, the stopping rule and the CI it uses."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest

from harness.analysis.knee import KneeParams, StepPoint
from harness.analysis.plan import StepPlan, p99_precision
from harness.analysis.search import PREDICTED, Decision, Probe, SearchGrid, choose, search_line, search_summary
from harness.analysis.steps import StepInfo
from harness.metrics import quantiles
from harness.metrics.aggregate import ci_min_samples, ci_ranks

TOKENS_PER_USER = 50.0
"""Output tokens/s one user gets below capacity."""


def server(level: float, capacity: float, *, index: int, noise: float = 0.0, rng: random.Random | None = None,
           metrics: bool = True, drop_past: float = 0.0, open_loop: bool = False) -> Probe:
    """A queueing server's step: flat p99 below ``capacity``, growing with the queue past it (closed loop: each user
    past it waits a share of a service time); throughput grows with load up to capacity, then holds (or drops by
    ``drop_past``)."""
    def jitter() -> float:
        return 1 + (rng.uniform(-noise, noise) if rng is not None else 0.0)

    served = min(level, capacity)
    over = max(0.0, level - capacity)
    if open_loop:  # requests/s past capacity pile up: the queue grows over the whole step
        p99 = 40.0 + (20_000.0 * over / capacity if over else 0.0)
    else:
        p99 = 40.0 + (1500.0 * over / capacity + 300.0 if over else 0.0)
    p99 *= jitter()
    throughput = served * TOKENS_PER_USER * (1 - (drop_past if over else 0.0)) * jitter()
    point = StepPoint(index, level, p99, (p99 * 0.95, p99 * 1.05), throughput, True, 2000)
    return Probe(point, requests_per_s=throughput / 100.0,
                 waiting_mean=over if metrics else None, running_max=served if metrics else None)


def search(capacity: float, grid: SearchGrid, *, limit: int = 40, **kw) -> tuple[Decision, list[Probe]]:
    """Run the chooser against ``server`` until it is done."""
    probes: list[Probe] = []
    for index in range(limit):
        d = choose(probes, grid, KneeParams(), open_loop=kw.get("open_loop", False))
        if d.level is None:
            return d, probes
        assert grid.lo <= d.level <= grid.top, d
        assert d.level not in {p.level for p in probes}, f"probed {d.level} twice: {d.why}"
        probes.append(dataclasses.replace(server(d.level, capacity, index=index, **kw), predicted=PREDICTED in d.why))
    raise AssertionError(f"no answer in {limit} steps: {[p.level for p in probes]}")


GRID = SearchGrid(2, 256, 2)


@pytest.mark.parametrize("capacity", [2, 9, 24, 33, 64, 100, 170, 254])
@pytest.mark.parametrize("metrics", [True, False])
def test_the_search_finds_a_known_knee_within_one_resolution(capacity, metrics):
    d, probes = search(capacity, GRID, metrics=metrics)
    # at the top of the range nothing past it can confirm the knee: said so, not hidden
    edge = capacity > GRID.top - 2 * GRID.resolution
    assert d.state == "done" and d.knee is not None and d.knee.found and d.knee.confirmed != edge, d
    assert ("not confirmed" in d.why) == edge
    assert abs(d.knee.load - capacity) <= GRID.resolution, (d.knee.load, [p.level for p in probes])
    # 128 levels on the grid: the search visits a handful
    assert len(probes) <= 14, [p.level for p in probes]


def test_the_prediction_uses_the_servers_batch_size_else_littles_law():
    assert any("Little's law" in p for p in _whys(33, metrics=False)), _whys(33, metrics=False)
    whys = _whys(33, metrics=True)
    assert any("the server ran 33 requests while others waited" in p for p in whys), whys


def _whys(capacity: float, **kw) -> list[str]:
    probes: list[Probe] = []
    whys = []
    for index in range(40):
        d = choose(probes, GRID)
        whys.append(d.why)
        if d.level is None:
            return whys
        probes.append(server(d.level, capacity, index=index, **kw))
    return whys


def test_no_knee_up_to_max_is_said_not_guessed():
    d, probes = search(400, GRID)
    assert d.state == "no knee" and d.level is None and not d.knee.found
    assert probes[-1].level == 256 and d.why == "no knee up to max 256"
    assert search_line(d, None, "users") == "no knee up to max 256 users"


@pytest.mark.parametrize("seed", range(10))
def test_noisy_steps_still_bracket_the_knee(seed):
    d, probes = search(41, GRID, noise=0.05, rng=random.Random(seed))
    assert d.knee is not None and d.knee.found and abs(d.knee.load - 41) <= GRID.resolution, \
        (d, [(p.level, round(p.point.p99), round(p.point.throughput)) for p in probes])


def test_throughput_that_falls_past_the_knee():
    d, _ = search(48, GRID, drop_past=0.3)
    assert d.knee.found and abs(d.knee.load - 48) <= 2


def test_open_loop_rates_on_a_fractional_grid():
    grid = SearchGrid(0.5, 32.0, 0.5, integer=False)
    d, probes = search(7.3, grid, open_loop=True, metrics=False)
    assert d.knee.found and abs(d.knee.load - 7.3) <= 0.5 + 1e-9, [p.level for p in probes]
    assert all(round(p.level / 0.5, 9).is_integer() for p in probes)


def test_growth_is_geometric_and_slows_near_a_queue():
    probes = [server(2, 100, index=0), server(4, 100, index=1)]
    assert choose(probes, GRID).level == 8
    queued = [server(2, 3, index=0, metrics=True)]
    d = choose(queued, GRID)
    assert d.level == 4 and "1.5x" not in d.why  # a single light probe: nothing waited yet (2 < 3)
    queued = [server(2, 100, index=0), server(16, 12, index=1)]
    assert "waited at the server" in choose(queued[1:], GRID).why


def test_grid_snapping():
    g = SearchGrid(2, 256, 2)
    assert (g.snap_up(33), g.snap_down(33), g.snap_up(1), g.snap_up(999), g.top, g.count) == (34, 32, 2, 256, 256, 128)
    odd = SearchGrid(4, 30, 4)
    assert odd.top == 28 and odd.snap_up(29) == 28
    rates = SearchGrid(0.1, 1.0, 0.1, integer=False)
    assert rates.snap_up(0.35) == 0.4 and rates.top == 1.0


def test_summary_path_keeps_the_visiting_order_and_verdicts():
    d, probes = search(33, GRID)
    steps = [StepInfo(p.point.index, p.level, float(i), ended=float(i) + 1, why=f"why {i}") for i, p in
             enumerate(probes)]
    for s in steps:
        s.ended_why = "precision"
    out = search_summary(mode="search", grid=GRID, unit="users", steps=steps, judged={s.index for s in steps},
                         knee=d.knee, decision=d, current=steps[-1])
    assert [e["level"] for e in out["path"]] == [p.level for p in probes]
    assert {e["level"]: e["verdict"] for e in out["path"]} == {
        p.level: "good" if p.level <= d.knee.load else "past" for p in probes}
    assert out["state"] == "done" and out["next"] is None and out["bracket"] == [d.knee.load, d.bracket[1]]
    assert out["line"].startswith(f"knee at {d.knee.load:g} users")


def test_the_line_while_searching():
    probes = [server(2, 33, index=0), server(4, 33, index=1)]
    d = choose(probes, GRID)
    assert search_line(d, None, "users") == "no knee yet up to 4 users; next: 8"
    probes += [server(lv, 33, index=i) for i, lv in enumerate((8, 16, 32, 64), start=2)]
    d = choose(probes, GRID)
    assert search_line(d, None, "users") == f"knee between 32 and 64 users; next: {d.level:g}"


# the stopping rule


def test_steps_end_for_a_stated_reason():
    plan = StepPlan.staircase(2, 2, 8, warmup_s=1, min_duration_s=5, min_requests=100, max_duration_s=30)
    assert plan.step_end(3, 500) is None  # under the duration floor
    assert plan.step_end(7, 50) is None  # under the request floor
    assert plan.step_end(7, 100) == "min"
    assert plan.step_end(31, 0) == "max_duration"
    precise = StepPlan.staircase(2, 2, 8, warmup_s=1, min_duration_s=5, min_requests=100, max_duration_s=30,
                                 precision=0.1)
    assert precise.step_end(7, 100, None) is None and precise.step_end(7, 100, 0.2) is None
    assert precise.step_end(7, 100, 0.08) == "precision"
    assert precise.step_end(31, 100, None) == "max_duration"
    assert precise.step_end(7, 100, 0.08, warmup_s=10) is None  # a drain's longer warm-up counts


def test_precision_needs_a_bounded_upper_rank():
    assert ci_min_samples(0.99) == 368 and ci_min_samples(0.95) == 72  # GuideLLM's figures, from the binomial
    assert p99_precision(100.0, (95.0, 105.0), 367) is None
    assert p99_precision(100.0, (95.0, 105.0), 368) == pytest.approx(0.05)
    assert p99_precision(0.0, (0.0, 1.0), 1000) is None and p99_precision(math.inf, (1.0, math.inf), 1000) is None


def _binomial_cdf(n: int, q: float, k: int) -> float:
    if k < 0:
        return 0.0
    return min(1.0, sum(math.exp(math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1) + j * math.log(q)
                                 + (n - j) * math.log1p(-q)) for j in range(min(k, n) + 1)))


@pytest.mark.parametrize("q", [0.5, 0.9, 0.95, 0.99])
@pytest.mark.parametrize("n", [20, 72, 100, 368, 400, 1000, 3000])
def test_order_statistic_interval_covers_at_its_level(q, n):
    """[x_(l), x_(u)] holds the true quantile when l < K <= u, K ~ Binomial(n, q) samples below it: exact coverage
    F(u) - F(l) is at least 95% whenever the sample can bound it, and the ranks are the tightest that do."""
    lo, hi = ci_ranks(n, q)
    if n < ci_min_samples(q):
        assert hi == n - 1  # clamped: the max, which is no bound (p99_precision refuses it)
        return
    coverage = _binomial_cdf(n, q, hi) - _binomial_cdf(n, q, lo)
    assert coverage >= 0.95, (lo, hi, coverage)
    assert _binomial_cdf(n, q, hi - 1) < 0.975 and (lo == 0 or _binomial_cdf(n, q, lo + 1) > 0.025)


@pytest.mark.parametrize("q", [0.5, 0.9, 0.95, 0.99, 0.999])
@pytest.mark.parametrize("n", [30_000, 123_457, 10 ** 6, 36_000_001, 10 ** 8])
def test_a_large_sample_s_ranks_are_the_same_summed_as_an_array(q, n):
    """Past ``ARRAY_TERMS`` terms (a large step's ITL) ``ci_ranks`` sums the pmf in numpy: the ranks term by term."""
    tail = math.erfc(1.96 / math.sqrt(2)) / 2
    sd = math.sqrt(n * q * (1 - q))
    lo_k, hi_k = max(0, math.floor(n * q - 10 * sd - 2)), min(n, math.ceil(n * q + 10 * sd + 2))
    first = (math.lgamma(n + 1) - math.lgamma(lo_k + 1) - math.lgamma(n - lo_k + 1) + lo_k * math.log(q)
             + (n - lo_k) * math.log1p(-q))
    by_array = quantiles._ranks_by_array(n, q, tail, lo_k, hi_k, first)
    assert by_array == quantiles._ranks_by_term(n, q, tail, lo_k, hi_k, first)
    if hi_k - lo_k > quantiles.ARRAY_TERMS:
        assert ci_ranks(n, q) == by_array
    assert abs(by_array[0] - (n * q - 1.96 * sd)) < 3 and abs(by_array[1] - (n * q + 1.96 * sd)) < 3  # ~normal


def test_a_latency_break_at_the_resolution_with_throughput_growing_is_no_knee_look_higher():
    """p99 rises faster than load between two neighbouring light levels (TTFT grows with the batch) while
    throughput doubles: no knee, and no bracket either: the search grows."""
    def probe(i: int, level: float, p99: float, tput: float) -> Probe:
        return Probe(StepPoint(i, level, p99, (p99 * 0.95, p99 * 1.05), tput, True, 500), tput / 40)

    d = choose([probe(0, 2, 8, 200), probe(1, 4, 17, 380)], GRID)
    assert (d.level, d.state, d.bracket) == (8, "growing", None), d


def test_between_two_steps_the_search_is_not_stopped():
    """The live summary between two steps (the last one ended, the next not begun) keeps the search's state;
    only a run ended by something else than the search reads "stopped"."""
    probes = [server(2, 33, index=0), server(4, 33, index=1)]
    d = choose(probes, GRID)
    steps = [StepInfo(i, p.level, float(i), ended=float(i) + 1) for i, p in enumerate(probes)]
    common = dict(mode="search", grid=GRID, unit="users", steps=steps, judged={0, 1}, knee=d.knee, decision=d,
                  current=steps[-1])
    assert search_summary(**common)["state"] == "growing"
    stopped = search_summary(**common, stopped=True)
    assert stopped["state"] == "stopped" and stopped["next"] is None


def test_a_wrong_prediction_is_tried_once_then_the_bracket_is_bisected():
    """The server says it runs 100 requests while others wait, but the knee is at 130: after probing at and just
    past the guess the search bisects; it does not walk up one resolution a step."""
    probes: list[Probe] = []
    for index in range(30):
        d = choose(probes, GRID)
        if d.level is None:
            break
        p = server(d.level, 130, index=index)
        probes.append(Probe(p.point, p.requests_per_s, p.waiting_mean, 100.0 if p.waiting_mean else p.running_max,
                            PREDICTED in d.why))
    assert d.knee is not None and d.knee.found and abs(d.knee.load - 130) <= 2, [p.level for p in probes]
    assert len(probes) <= 8 + 6, [p.level for p in probes]  # growing to 256, then bisecting 128..256 to 2
    guessed = [p for p in probes if p.level in (100, 102)]
    assert len(guessed) <= 2


def test_a_noisy_p99_with_throughput_in_proportion_is_not_a_bracket():
    """An open loop's 100-request p99 can double from Poisson bursts alone: with throughput still growing in
    proportion it is no reason to look between the two levels; four times is."""
    def probe(i: int, level: float, p99: float, tput: float) -> Probe:
        return Probe(StepPoint(i, level, p99, (p99 * 0.9, p99 * 1.1), tput, True, 100), tput / 40)

    grid = SearchGrid(2, 128, 2, integer=False)
    d = choose([probe(0, 12, 40, 480), probe(1, 24, 100, 960)], grid, open_loop=True)
    assert (d.state, d.bracket) == ("growing", None), d
    d = choose([probe(0, 12, 40, 480), probe(1, 24, 170, 960)], grid, open_loop=True)
    assert d.state == "bracketing" and d.bracket == (12, 24), d


def test_littles_law_following_the_last_good_level_does_not_walk_up_the_grid():
    """Near capacity a's throughput is the best seen, so Little's law predicts a itself, each time a moves up:
    after two probes at or just past predictions the search bisects."""
    probes: list[Probe] = []
    for index in range(30):
        d = choose(probes, GRID)
        if d.level is None:
            break
        p = server(d.level, 47, index=index, metrics=False)
        probes.append(dataclasses.replace(p, predicted=PREDICTED in d.why))
    assert d.knee.found and abs(d.knee.load - 47) <= 2
    assert sum(p.predicted for p in probes) <= 2 and len(probes) <= 12, [(p.level, p.predicted) for p in probes]


def test_a_latency_break_where_the_server_says_nothing_waited_is_not_a_bracket():
    def probe(i: int, level: float, p99: float, tput: float, waiting: float | None) -> Probe:
        return Probe(StepPoint(i, level, p99, (p99 * 0.9, p99 * 1.1), tput, True, 200), tput / 40, waiting, level)

    pts = [probe(0, 64, 30, 3200, 0.0), probe(1, 96, 70, 4200, 0.0)]
    d = choose(pts, GRID)
    assert (d.state, d.bracket, d.level) == ("growing", None, 144), d
    pts[1] = probe(1, 96, 70, 4200, None)  # a server that does not say: the latency half decides
    assert choose(pts, GRID).bracket == (64, 96)


def test_a_wide_rise_within_the_clients_own_lag_is_not_bracketed():
    """Between two probes wider than the resolution, p99 2.5x (10 -> 25 ms) while throughput grew only 1.5x is
    looked into; the same rise in a step whose client loop lag p99 (14 ms) covers the gap between the CIs is not."""
    def probes(lag_ms: float) -> list[Probe]:
        a = StepPoint(0, 4, 10.0, (9.5, 10.5), 200.0, True, 2000)
        b = StepPoint(1, 8, 25.0, (24.0, 26.0), 300.0, True, 2000, lag_ms)
        return [Probe(a, requests_per_s=2.0), Probe(b, requests_per_s=3.0)]

    grid = SearchGrid(2, 64, 2)
    calm = choose(probes(0.5), grid, KneeParams())
    assert calm.why.startswith("p99 rose faster than load between 4 and 8"), calm
    starved = choose(probes(14.0), grid, KneeParams())
    assert not starved.why.startswith("p99 rose faster") and starved.level > 8 and not starved.knee.found, starved
