"""A step's timeline (``analysis.timeline``): every request when few, a stride sample when many, in flight counted
over all of them."""

from __future__ import annotations

import itertools

import pytest

from harness.analysis.timeline import BINS, timeline
from harness.metrics.rows import FLAG_FAILED


def cols(sends_ms: list[int], e2e_ms: list[float | None], ttft_ms: list[float | None] | None = None,
         klass: list[int | None] | None = None) -> dict[str, list]:
    n = len(sends_ms)
    tenths = [None if v is None else round(v * 10) for v in e2e_ms]
    return {"t_ms": sends_ms, "e2e": tenths,
            "ttft": [None if v is None else round(v * 10) for v in (ttft_ms or [1.0] * n)],
            "flags": [FLAG_FAILED if v is None else 0 for v in e2e_ms], "class": klass or [None] * n}


def test_every_request_in_send_order_with_its_first_token_and_end():
    t = timeline(cols([500, 0, 250], [100.0, 1000.0, None], [20.0, 30.5, None], [1, 0, None]))
    assert t is not None and t.requests == t.drawn == 3
    assert t.rows == [(0.0, 30.5, 1000.0, 0, 0), (0.25, None, None, None, 1), (0.5, 20.0, 100.0, 1, 0)]
    assert t.end_s == 1.0 and len(t.in_flight) == BINS


def test_in_flight_counts_every_request_even_when_few_are_drawn():
    # 1,000 requests, each 1 s long, one every 10 ms: 100 in flight once the first second has passed
    t = timeline(cols([10 * i for i in range(1000)], [1000.0] * 1000), limit=50)
    assert t is not None and t.requests == 1000 and t.drawn == 50
    sends = [r[0] for r in t.rows]
    assert sends == sorted(sends) and sends[0] == 0.0 and sends[-1] == 9.99  # the stride spans the whole step
    gaps = {round(b - a, 2) for a, b in itertools.pairwise(sends)}
    assert gaps <= {0.2, 0.21}, gaps  # evenly: a burst would stay a burst
    middle = t.in_flight[len(t.in_flight) // 2]
    assert middle == pytest.approx(100, abs=1)


def test_no_requests_no_timeline():
    assert timeline(cols([], [])) is None
