"""A step's knee metric by time (``analysis/halves.py``): bounded whatever the step's length, and split at the
middle as report by report, but for the one slice that straddles it."""

from __future__ import annotations

import random

from harness.analysis.halves import MAX_SLICES, Halves
from harness.metrics.sketch import Sketch


def _report(rng: random.Random, t: float) -> Sketch:
    s = Sketch()
    for _ in range(5):
        s.add(rng.lognormvariate(-2 + t / 3600, 0.3))  # slower as the hour goes on
    return s


def test_an_hour_of_two_workers_stays_bounded_and_splits_as_report_by_report_but_near_the_middle():
    rng = random.Random(1)
    halves, reports = Halves(), []
    for k in range(2400):  # two workers, a report each every 3 s, for an hour
        t = 1.5 * k
        reports.append((t, _report(rng, t)))
        halves.add(t, reports[-1][1])
        assert len(halves.slices) <= MAX_SLICES
    middle = 1800.0
    first, second = halves.split(middle)
    exact_first, exact_second = Sketch(), Sketch()
    for t, s in reports:
        (exact_first if t < middle else exact_second).merge(s)
    assert first.count + second.count == exact_first.count + exact_second.count == 2400 * 5
    assert abs(first.count - exact_first.count) <= halves.width / 1.5 * 5  # only the straddling slice's reports
    # 40 values of 6,000 from just past the middle move a p99 by a bin or two of the sketch (1% each)
    assert abs(first.quantile(0.99) - exact_first.quantile(0.99)) <= 0.03 * exact_first.quantile(0.99)
    assert halves.width == 16.0  # 3,600 s: 225 slices of 16 s (the width doubled 4 times, each time past 256)


def test_a_short_step_splits_exactly_at_one_second_slices():
    rng = random.Random(2)
    halves, reports = Halves(), []
    for k in range(40):
        reports.append((float(k), _report(rng, k)))
        halves.add(float(k), reports[-1][1])
    first, second = halves.split(20.0)
    assert first.count == sum(s.count for t, s in reports if t < 20) and second.count == 20 * 5


def test_the_reports_own_sketches_are_not_changed():
    rng = random.Random(3)
    a, b = _report(rng, 0), _report(rng, 0)
    halves = Halves()
    halves.add(0.0, a)
    halves.add(0.5, b)  # same slice: merged into the slice's own sketch, not into a
    assert a.count == 5 and halves.slices[0][1].count == 10
