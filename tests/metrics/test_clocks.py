"""The fleet's clocks on plain data: kept, said once, a failed re-measurement keeps the last good offset."""

from __future__ import annotations

from harness.metrics.clock import ClockOffset
from harness.metrics.clocks import FleetClocks


def off(ms: float | None, samples: int = 8) -> ClockOffset:
    s = None if ms is None else ms / 1000
    return ClockOffset(s, None if s is None else 0.0001, None if s is None else 0.0002, samples)


def test_a_good_clock_says_nothing_and_lands_in_the_summary() -> None:
    c = FleetClocks()
    assert c.measured("w1", off(0.3)) == []
    assert c.warnings({"w1"}) == [] and c.to_json() == {"w1": off(0.3).to_json()}
    assert c.max_offset_ms() == (1, 0.3)


def test_an_off_clock_is_said_once_and_stays_in_the_warnings() -> None:
    c = FleetClocks()
    first = c.measured("w1", off(9.0))
    assert len(first) == 1 and "9.0 ms" in first[0]
    assert c.measured("w1", off(9.1)) == []  # still off: not said again
    assert len(c.warnings({"w1"})) == 1


def test_a_moving_clock_is_said_when_it_first_moves_with_drift_in_the_summary() -> None:
    c = FleetClocks()
    c.measured("w1", off(0.0))
    notes = c.measured("w1", off(3.0))
    assert len(notes) == 1 and "moved +3.0 ms" in notes[0]
    assert c.to_json()["w1"]["drift_ms"] == 3.0


def test_a_failed_remeasurement_keeps_the_last_good_offset() -> None:
    c = FleetClocks()
    c.measured("w1", off(0.5))
    assert c.measured("w1", off(None, samples=1)) is None
    assert c.to_json()["w1"]["offset_ms"] == 0.5


def test_a_worker_that_reported_but_was_never_measured_is_named() -> None:
    c = FleetClocks()
    assert c.warnings({"w2", "local"}) == ["worker w2: clock offset not measured (it never answered a ping)"]
    assert c.max_offset_ms() is None
