"""The clock-offset arithmetic on plain data: known offsets, symmetric and asymmetric delays, lost and slow trips."""

from __future__ import annotations

import random

import pytest

from harness.metrics.clock import (
    MIN_SAMPLES,
    WARN_DRIFT_S,
    WARN_OFFSET_S,
    WARN_RTT_S,
    ClockOffset,
    RoundTrip,
    drift,
    drift_warning,
    estimate,
    warning,
)


def trip(offset: float, out: float, back: float, *, at: float = 1000.0, hold: float = 0.0002) -> RoundTrip:
    """A round trip with a true ``offset`` (worker minus master), ``out``/``back`` one-way delays, ``hold`` on the
    worker between receiving and answering."""
    t0 = at
    t1 = t0 + out + offset
    t2 = t1 + hold
    t3 = t2 - offset + back
    return RoundTrip(t0, t1, t2, t3)


@pytest.mark.parametrize("offset", [0.0, 0.25, -3.7, 1e-4])
def test_symmetric_delays_give_the_exact_offset_and_rtt(offset):
    t = trip(offset, 0.003, 0.003)
    assert t.offset == pytest.approx(offset, abs=1e-12)
    assert t.rtt == pytest.approx(0.006, abs=1e-12)


@pytest.mark.parametrize("out, back", [(0.010, 0.001), (0.001, 0.010), (0.0, 0.020)])
def test_asymmetric_delays_err_by_half_the_difference_and_stay_within_the_bound(out, back):
    t = trip(0.5, out, back)
    assert t.offset - 0.5 == pytest.approx((out - back) / 2, abs=1e-12)
    assert abs(t.offset - 0.5) <= t.rtt / 2 + 1e-12


def test_the_median_ignores_a_few_slow_one_sided_trips():
    rng = random.Random(7)
    trips = [trip(-0.120, 0.001 + rng.random() * 1e-4, 0.001 + rng.random() * 1e-4, at=i) for i in range(8)]
    trips[2] = trip(-0.120, 0.200, 0.001)  # a ping stuck behind a busy loop on the way out
    trips[5] = trip(-0.120, 0.001, 0.090)
    c = estimate(trips)
    assert c.offset_s == pytest.approx(-0.120, abs=1e-4) and c.samples == 8
    assert c.bound_s == pytest.approx(0.001, abs=1e-4)  # half the rtt of the samples the median is made of
    assert abs(c.offset_s - -0.120) <= c.bound_s
    assert c.rtt_s == pytest.approx(0.002, abs=2e-4)


@pytest.mark.parametrize("seed", range(20))
def test_the_bound_always_holds_whatever_the_delays(seed):
    rng = random.Random(seed)
    offset = rng.uniform(-2, 2)
    delay = lambda: rng.expovariate(1 / 0.004)  # noqa: E731 - one-way delays, independent each way
    trips = [trip(offset, delay(), delay(), at=i) for i in range(rng.randint(3, 9))]
    c = estimate(trips)
    assert abs(c.offset_s - offset) <= c.bound_s + 1e-12


def test_too_few_answers_or_a_stepped_clock_leave_the_offset_unknown():
    good = [trip(0.0, 0.001, 0.001, at=i) for i in range(MIN_SAMPLES - 1)]
    stepped = RoundTrip(10.0, 10.001, 10.002, 9.0)  # the master's clock went back mid-trip: negative rtt
    c = estimate([*good, stepped])
    assert c == ClockOffset(None, None, None, MIN_SAMPLES - 1)
    assert "not measured" in warning("w1", c)
    assert estimate([*good, trip(0.0, 0.001, 0.001)]).offset_s == pytest.approx(0.0, abs=1e-12)


def test_warnings_name_the_worker_and_fire_only_past_their_bounds():
    near = estimate([trip(WARN_OFFSET_S * 0.8, 0.001, 0.001, at=i) for i in range(5)])
    assert warning("w", near) is None
    far = estimate([trip(-WARN_OFFSET_S * 1.5, 0.001, 0.001, at=i) for i in range(5)])
    note = warning("worker-b_1f", far)
    assert note is not None and "worker-b_1f" in note and "-7.5 ms" in note and "NTP" in note
    slow = estimate([trip(0.0, WARN_RTT_S, WARN_RTT_S, at=i) for i in range(5)])
    assert "round trip" in (warning("w", slow) or "")


def test_drift_is_the_move_from_the_first_offset_and_warns_only_past_both_bounds():
    first = ClockOffset(0.001, 0.0005, 0.001, 8)
    assert drift(first, ClockOffset(0.004, 0.0005, 0.001, 8)) == pytest.approx(0.003)
    unknown = ClockOffset(None, None, None, 1)
    assert drift(first, unknown) is None and drift(unknown, first) is None
    edge = WARN_DRIFT_S + 0.001  # the allowance: WARN_DRIFT_S plus the two bounds
    assert drift_warning("w", first, ClockOffset(0.001 + edge * 0.99, 0.0005, 0.001, 8)) is None
    note = drift_warning("w7", first, ClockOffset(0.001 - edge * 1.5, 0.0005, 0.001, 8))
    assert note is not None and note.startswith("worker w7: clock moved -4.5 ms") and "NTP" in note
    loose = ClockOffset(0.001 - edge * 1.5, 0.01, 0.02, 8)  # a move the measurements cannot tell from noise
    assert drift_warning("w", first, loose) is None


def test_json_is_in_milliseconds():
    c = ClockOffset(0.0012345, 0.0005, 0.001, 8)
    assert c.to_json() == {"offset_ms": 1.234, "bound_ms": 0.5, "rtt_ms": 1.0, "samples": 8}
    assert ClockOffset(None, None, None, 1).to_json()["offset_ms"] is None



def test_the_summary_schema_takes_clocks_and_refuses_broken_ones():
    from harness.report.validate import summary_problems
    from tests.kit.summaries import written

    summary = written()
    good = {"w1": estimate([trip(0.0, 0.001, 0.001, at=i) for i in range(4)]).to_json(),
            "w2": ClockOffset(None, None, None, 1).to_json()}
    summary.update(clocks=good, clock_warnings=[warning("w2", ClockOffset(None, None, None, 1))])
    assert summary_problems(summary) == []
    summary["clocks"]["w1"]["samples"] = "8"
    assert summary_problems(summary) == ["clocks.w1.samples: expected an integer, got a string '8'"]
