"""The worker's GC pause hook (load/generator.py GcPauses): longest, total and count per report period."""

from __future__ import annotations

import gc

from harness.load.generator import GcPauses


def test_pauses_are_measured_and_taken_per_period():
    pauses = GcPauses()
    gc.callbacks.append(pauses)
    try:
        for _ in range(3):
            gc.collect()
    finally:
        gc.callbacks.remove(pauses)
    longest, total, n = pauses.take()
    assert n == 3 and 0 < longest <= total
    assert pauses.take() == (0.0, 0.0, 0)
