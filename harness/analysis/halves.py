"""A step's knee metric by time, kept to compare its first half with its second once the step has ended. Pure.

The stationarity check (``analysis/steps.py``) needs the step's middle, known only at its end, so the reports
are kept by time. Not each report: a long constant step on a large fleet brought thousands (an hour on two
workers: 2,400 sketches; four 3 s rounds of 1,000 workers: 4,000), each kept to the end and walked by every full
garbage collection (``benchmarks/soak.py``, ``benchmarks/fleet_merge.py``). Reports merge into time slices
instead: a report joins the last slice while that slice is younger than ``width`` (1 s to start); past
``MAX_SLICES`` slices, neighbours merge in pairs and the width doubles. Memory is at most ``MAX_SLICES`` sketches
whatever the step's length or the fleet's size, and a report can land in the wrong half only inside the one slice
that straddles the middle: within ``width`` of it (1 s up to a ~4-minute step, 1/128 of the step beyond).
"""

from __future__ import annotations

from harness.metrics.sketch import Sketch

__all__ = ["MAX_SLICES", "Halves"]

MAX_SLICES = 256


class Halves:
    """Usage: ``h.add(t, sketch)`` as reports arrive (``t`` non-decreasing); ``h.split(middle)`` at the end."""

    def __init__(self, width_s: float = 1.0) -> None:
        self.width = width_s
        self.slices: list[tuple[float, Sketch]] = []
        """(start time, the merged sketch of the reports since), oldest first."""

    def add(self, t: float, sketch: Sketch) -> None:
        if self.slices and t - self.slices[-1][0] < self.width:
            self.slices[-1][1].merge(sketch)
            return
        mine = Sketch()  # never the report's own object: it is merged elsewhere too
        mine.merge(sketch)
        self.slices.append((t, mine))
        if len(self.slices) > MAX_SLICES:
            self._coarsen()

    def _coarsen(self) -> None:
        """Merge neighbours in pairs (each pair keeps its first start) and double the width."""
        pairs = []
        for i in range(0, len(self.slices), 2):
            start, sk = self.slices[i]
            if i + 1 < len(self.slices):
                sk.merge(self.slices[i + 1][1])
            pairs.append((start, sk))
        self.slices, self.width = pairs, 2 * self.width

    def split(self, middle: float) -> tuple[Sketch, Sketch]:
        """The sketches of the slices that began before ``middle`` and of those from it on."""
        first, second = Sketch(), Sketch()
        for start, sk in self.slices:
            (first if start < middle else second).merge(sk)
        return first, second
