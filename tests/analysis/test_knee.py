"""The knee finder on plain data: queueing-shaped curves, flat and linear curves, noise, unreliable steps."""

from __future__ import annotations

import dataclasses
import math
import random

from harness.analysis.knee import KneeParams, StepPoint, find_knee


def curve(loads, p99s, tps, spread=0.05, reliable=None):
    return [StepPoint(i, load, p, (p * (1 - spread), p * (1 + spread)), tp, True if reliable is None else reliable[i])
            for i, (load, p, tp) in enumerate(zip(loads, p99s, tps, strict=True))]


def closed_loop(slots: int, loads: list[int], service_ms: float = 1000.0, prefill_ms: float = 40.0):
    """An M/D/S-like closed loop: TTFT p99 flat until the slots fill, then a whole service time per wave."""
    p99, tp = [], []
    for n in loads:
        waves = math.ceil(n / slots) - 1
        p99.append(prefill_ms * (1 + 0.02 * min(n, slots)) + waves * service_ms)
        tp.append(min(n, slots) / service_ms * 1000 * 100)
    return p99, tp


def test_knee_at_the_slot_count():
    loads = [4, 8, 12, 16, 20, 24, 28]
    p99, tp = closed_loop(16, loads)
    knee = find_knee(curve(loads, p99, tp))
    assert knee.found and knee.confirmed and knee.load == 16 and knee.step_index == 3
    assert knee.p99_after_ms > 10 * knee.p99_before_ms and "saturated past 16" in knee.reason
    assert knee.confidence in ("medium", "high")


def test_unconfirmed_until_one_more_step():
    loads = [4, 8, 12, 16, 20]
    p99, tp = closed_loop(16, loads)
    knee = find_knee(curve(loads, p99, tp))
    assert knee.found and not knee.confirmed and knee.confidence == "low"
    assert find_knee(curve(loads, p99, tp), KneeParams(confirm_steps=0)).confirmed


def test_no_knee_when_capacity_is_out_of_range():
    loads = [4, 8, 12, 16]
    p99, tp = closed_loop(64, loads)
    knee = find_knee(curve(loads, p99, tp))
    assert not knee.found and "no break up to 16" in knee.reason


def test_latency_growing_with_load_but_throughput_too_is_no_knee():
    """A server that slows down gracefully (throughput still grows) has no knee yet."""
    loads = [4, 8, 16, 32]
    knee = find_knee(curve(loads, [50, 100, 200, 400], [100, 190, 370, 700]))
    assert not knee.found


def test_noise_makes_no_false_knee():
    rng = random.Random(7)
    loads = [4, 8, 12, 16, 20, 24, 28, 32]
    for _ in range(200):
        p99 = [100 * rng.uniform(0.8, 1.25) for _ in loads]
        tp = [n * 10 * rng.uniform(0.9, 1.1) for n in loads]
        pts = [StepPoint(i, load, p, (p * 0.85, p * 1.18), t) for i, (load, p, t) in enumerate(zip(loads, p99, tp,
                                                                                               strict=True))]
        knee = find_knee(pts)
        assert not knee.confirmed  # a break may be pending at the very last step, never confirmed
        assert not knee.found or knee.step_index == len(loads) - 2


def test_overlapping_cis_are_not_significant():
    loads = [4, 8, 12, 16, 20, 24, 28]
    p99, tp = closed_loop(16, loads)
    wide = curve(loads, p99, tp, spread=0.97)
    assert not find_knee(wide).found


def test_unreliable_steps_are_skipped():
    loads = [4, 8, 12, 16, 20, 24, 28]
    p99, tp = closed_loop(16, loads)
    knee = find_knee(curve(loads, p99, tp, reliable=[True, True, True, True, False, True, True]))
    assert knee.found and knee.load == 16 and knee.p99_after_ms == p99[5]


def test_failures_as_infinite_p99_still_make_a_knee():
    loads = [4, 8, 12, 16]
    knee = find_knee(curve(loads, [50, 52, 55, math.inf], [100, 200, 300, 310]), KneeParams(confirm_steps=0))
    assert knee.found and knee.load == 12


def test_a_rise_within_the_clients_own_lag_is_no_knee():
    """The CI run that taught it (a CPU-starved client, 32 slots, 2-8 users): TTFT p99 10 -> 14.5 ms, CIs 1.5 ms
    apart, while the client's loop lag p99 went 2 -> 4 ms: its stamps, not the server, can explain the rise."""
    def point(i, load, p99, ci, tput, lag):
        return StepPoint(i, load, p99, ci, tput, True, 200, lag)

    starved = [point(0, 2, 6.5, (6.0, 6.7), 758, 1.1), point(1, 4, 13.2, (12.2, 14.1), 1235, 3.2),
               point(2, 6, 9.9, (9.2, 10.9), 1638, 2.0), point(3, 8, 14.5, (12.4, 17.1), 1872, 4.0)]
    assert not find_knee(starved).found
    calm = [dataclasses.replace(p, lag_ms=0.1) for p in starved]
    assert find_knee(calm).found and find_knee(calm).load == 6  # the same figures on a calm client: a (low) knee
    # a true knee rises by whole service times, far past any lag still judged reliable
    loads = [4, 8, 12, 16, 20, 24]
    p99, tp = closed_loop(16, loads)
    lagging = [dataclasses.replace(p, lag_ms=1.5 * p.index) for p in curve(loads, p99, tp)]  # a lag that grows
    knee = find_knee(lagging)
    assert knee.found and knee.confirmed and knee.load == 16


def test_a_lag_both_steps_share_does_not_hide_a_rise():
    """CI's embeddings staircase: e2e p99 26.5 -> 36.5 ms past the simulator's 4 slots, the client lagging ~4.5 ms
    in both steps: the rise is the server's (its CI 1.2 ms clear of the lighter step's)."""
    a = StepPoint(0, 4, 26.5, (25.0, 33.2), 73690, True, 461, 4.8)
    b = StepPoint(1, 5, 36.5, (34.4, 39.8), 74148, True, 464, 4.5)
    knee = find_knee([a, b])
    assert knee.found and knee.load == 4


def test_a_step_whose_tail_reaches_the_next_ones_is_skipped_not_a_wall():
    """A full-suite run of 2026-12-03 (8 slots, seed 2): the 8-user step's p99 12.6 ms had its CI up to 76.9 ms (a
    few queued requests at the slot count), the 10-user step's 66.5 ms a CI from 65.2: no step's CI cleared the one
    before it, and no knee was found. A step whose CI reaches the next one's is neither below the break nor past it:
    the break is looked for from the step before. 6 -> 10 breaks but is refuted (throughput still grew past 6: 1,575
    -> 1,850 tokens/s); 8 -> 12 breaks (12.6 -> 93.5 ms, +5%) and holds: the knee is 8 users, the slot count."""
    figures = [(2, 7.2, (6.9, 7.6), 748, 1.4), (4, 8.8, (8.3, 11.3), 1247, 1.3), (6, 17.4, (13.7, 19.1), 1575, 3.7),
               (8, 12.6, (11.9, 76.9), 1770, 3.4), (10, 66.5, (65.2, 153.8), 1806, 13.2),
               (12, 93.5, (91.6, 134.5), 1850, 5.8), (14, 95.4, (93.5, 96.8), 1849, 7.4),
               (16, 99.2, (97.3, 109.1), 1854, 5.2)]
    pts = [StepPoint(i, load, p, ci, tp, True, 500, lag) for i, (load, p, ci, tp, lag) in enumerate(figures)]
    knee = find_knee(pts)
    assert knee.found and knee.confirmed and knee.load == 8, knee
    assert "from 8 to 12 load" in knee.reason, knee.reason
    # a step whose CI stays clear of the next one's is no such step: the pair is judged as it is (no knee here)
    clear = [*pts[:3], dataclasses.replace(pts[3], ci=(11.9, 20.0), p99=14.0, throughput=1800),
             dataclasses.replace(pts[4], p99=15.0, ci=(14.0, 16.0), throughput=2200)]
    assert not find_knee(clear).found


def test_the_servers_queue_confirms_a_knee_that_a_faster_window_would_refute():
    """vLLM on two cores, a search's steps by load (lane run of 2026-12-07): 12 users was measured early, in a window
    where the engine ran 27% faster, so its throughput left the 15% plateau; its requests queued (3.7 waiting), so
    it is past capacity all the same. Without the server's word, the knee moved to 12."""
    rows = [(2, 21.7, 710, 0.0), (4, 40.4, 973, 0.0), (6, 30.5, 1542, 0.0), (8, 36.5, 1536, 0.0),
            (10, 249, 1456, 1.87), (12, 208, 1952, 3.74), (14, 491, 1379, 5.65), (18, 733, 1305, 9.8)]
    pts = [StepPoint(i, load, p, (p * 0.95, p * 1.05), tp, True, 400, 2.0, waiting)
           for i, (load, p, tp, waiting) in enumerate(rows)]
    knee = find_knee(pts)
    assert knee.found and knee.confirmed and knee.load == 8, knee
    assert find_knee([dataclasses.replace(p, waiting=None) for p in pts]).load == 12
    # a server that says nothing waited does not confirm it: the throughput rule alone decides
    assert find_knee([dataclasses.replace(p, waiting=0.0) for p in pts]).load == 12


def test_the_servers_queue_marks_the_break_where_a_slow_window_hides_the_plateau():
    """vLLM on two cores, a staircase (lane run of 2026-12-07): 8 users measured in a slow window (886 tokens/s, under
    6 users' 982), so 8 -> 10 read +19% throughput (elasticity 0.77) while p99 rose 4.3x and requests began to wait
    (0 -> 1.9): the knee is 8, not the 12 the throughput rule alone found."""
    rows = [(4, 43.7, 593, 0.0), (6, 63.9, 982, 0.0), (8, 70.6, 886, 0.0), (10, 304, 1053, 1.87),
            (12, 364, 1104, 3.87), (14, 502, 1142, 5.90), (16, 691, 1046, 7.82)]
    pts = [StepPoint(i, load, p, (p * 0.95, p * 1.05), tp, True, 300, 2.7, waiting)
           for i, (load, p, tp, waiting) in enumerate(rows)]
    knee = find_knee(pts)
    assert knee.found and knee.confirmed and knee.load == 8, knee
    assert find_knee([dataclasses.replace(p, waiting=None) for p in pts]).load == 12
    # a queue already there at 8 says nothing of where it began: the throughput rule decides
    assert find_knee([dataclasses.replace(p, waiting=1.0 if p.load == 8 else p.waiting) for p in pts]).load != 8
