"""The step's scrape series as float arrays (``analysis/server.py``): the same reads as the lists they replace."""

from __future__ import annotations

from harness.analysis.server import ServerStep, TimeSeries
from harness.analysis.why.rows import _nearest


def test_a_time_series_reads_as_its_pairs():
    series = TimeSeries()
    points = [(0.5 * i, float(i % 3)) for i in range(7)]
    for p in points:
        series.append(p)
    assert len(series) == 7 and list(series) == points and series[3] == points[3] and series[-1] == points[-1]
    assert series[1:3] == points[1:3]
    times = [t for t, _ in series]
    assert _nearest(times, series, 1.1) == round(points[2][1])  # the tail's read: the nearest scrape
    assert not TimeSeries() and list(TimeSeries()) == []


def test_a_server_step_sums_up_as_with_lists():
    step = ServerStep()
    for waiting, running in ((0.0, 4.0), (3.0, 8.0), (1.0, 8.0)):
        step.waiting.append(waiting)
        step.running.append(running)
    out = step.summary()
    assert out.samples == 3 and out.waiting_max == 3.0 and out.waiting_mean == round(4 / 3, 3)
    assert out.running_max == 8.0 and out.running_mean == round(20 / 3, 3) and out.preemptions is None
