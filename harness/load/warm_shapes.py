"""The shape warm-up (``load.warmup_shapes``): before the run's first step sends its own requests, each worker sends
its share of one request per shape the workload sends (``Samplers.shapes``: the ends of each prompt-length bucket of
each class), counted in that step's warm-up whenever they end (``RequestRecord.warmup_shape``). Engines that compile
or capture a graph per shape pay for it then, not in a measured request's TTFT. Once its share is sent, a worker's
users wait until it has ended: an engine compiling a shape holds its whole batch, and the load would pay for it.
"""

from __future__ import annotations

import logging

from gevent.event import Event

from harness.metrics.by_step import Recorder
from harness.workload.sampler import PlannedRequest

__all__ = ["SHAPES_WAIT_S", "ShapeWarmup"]

log = logging.getLogger("kneecap")

SHAPES_WAIT_S = 120.0
"""Longest a user waits for the shape warm-up's requests to end (a lost one must not hold the load forever)."""


class ShapeWarmup:
    """One worker's shape warm-up over ``shapes``, the fleet's whole list (the same on every worker)."""

    def __init__(self, shapes: list[PlannedRequest]) -> None:
        self.shapes = shapes
        self.sent = self.pending = 0
        self.all_sent = False
        self.idle = Event()
        """Set once this worker's share is sent and has ended."""

    def next(self, first_step: bool, worker: int, fleet: int) -> PlannedRequest | None:
        """The next of this worker's share (every ``fleet``-th, from its index) while ``first_step``; once they are
        sent, waits for them to end, then None."""
        if not first_step or not self.shapes:
            return None
        stride = max(1, fleet)
        i = worker % stride + self.sent * stride
        if i < len(self.shapes):
            self.sent += 1
            self.pending += 1
            self.all_sent = i + stride >= len(self.shapes)
            return self.shapes[i]
        if self.pending:
            self.idle.wait(SHAPES_WAIT_S)
        return None

    def ended(self, now: float, recorder: Recorder) -> None:
        """One of them ended (``now``); the last one says when the warm-up outlasted the step's own."""
        self.pending -= 1
        if self.pending > 0 or not self.all_sent:
            return
        self.idle.set()
        took = now - (recorder.step_started or now)
        if took > recorder.warmup_s:
            log.warning("kneecap: the shape warm-up (load.warmup_shapes: %d requests) took %.1f s, longer than the "
                        "first step's warm-up (%.1f s): its measured part began with users still starting; raise "
                        "load.step.warmup_s", self.sent, took, recorder.warmup_s)
