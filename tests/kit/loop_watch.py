"""How long a gevent loop waits while some work runs: a greenlet beside it ticks every ms (a test and
``benchmarks/fleet_merge.py``'s ``judge_loop_ms_max``)."""

from __future__ import annotations

import time
from collections.abc import Callable

import gevent


def longest_loop_wait(work: Callable[[], object]) -> tuple[float, float]:
    """Run ``work`` with a ticking greenlet beside it: (seconds ``work`` took, the longest the loop waited between
    two ticks, seconds)."""
    gaps, done = [0.0], []

    def ticker() -> None:
        last = time.perf_counter()
        while not done:
            gevent.sleep(0.001)
            gaps.append(time.perf_counter() - last)
            last = time.perf_counter()

    g = gevent.spawn(ticker)
    gevent.sleep(0.01)  # the ticker is under way
    t0 = time.perf_counter()
    try:
        work()
    finally:
        took = time.perf_counter() - t0
        done.append(True)
        g.join()
    return took, max(gaps)
