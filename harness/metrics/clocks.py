"""The fleet's clocks as the master knows them: each worker's first and last offset, and what to say. Pure.

Offsets come in at test start, when a worker joins, then every ``load.clock.CLOCK_EVERY_S``
(``metrics/clock.py`` estimates each). A failed re-measurement keeps the last good offset; a clock
that is off, or that moved since its first measurement, is said once, as it first shows; the summary
carries the last figures (``to_json``) and a line per worker still off (``warnings``).
"""

from __future__ import annotations

from collections.abc import Iterable

from harness.metrics.clock import ClockOffset, drift, drift_warning, warning

__all__ = ["FleetClocks"]


class FleetClocks:
    """Usage: ``notes = clocks.measured(worker, offset)`` (log each); at the end ``clocks.to_json()`` and
    ``clocks.warnings(reporters)``."""

    def __init__(self) -> None:
        self.last: dict[str, ClockOffset] = {}
        """Each worker's clock offset to the master's, as last measured."""
        self.first: dict[str, ClockOffset] = {}
        """Each worker's first measured offset: against the last, how far its clock moved during the run."""

    def measured(self, worker: str, offset: ClockOffset) -> list[str] | None:
        """Take a new measurement; the warnings it raises for the first time, or None when it was not kept (no
        offset, and a good one is known)."""
        old = self.last.get(worker)
        if offset.offset_s is None and old is not None and old.offset_s is not None:
            return None
        self.last[worker] = offset
        if offset.offset_s is not None:
            self.first.setdefault(worker, offset)
        first = self.first.get(worker, offset)
        checks = (lambda c: warning(worker, c), lambda c: drift_warning(worker, first, c))
        return [n for check in checks if (n := check(offset)) and (old is None or not check(old))]

    def warnings(self, reporters: Iterable[str]) -> list[str]:
        """A line per worker whose clock is off, moved during the run, or was never measured though it reported."""
        notes = [warning(w, c) for w, c in sorted(self.last.items())]
        notes += [drift_warning(w, self.first[w], c) for w, c in sorted(self.last.items()) if w in self.first]
        notes += [f"worker {w}: clock offset not measured (it never answered a ping)"
                  for w in sorted(set(reporters) - set(self.last) - {"local"})]
        return [n for n in notes if n]

    def to_json(self) -> dict[str, dict]:
        """summary.json's ``clocks``: the last measurement of each worker, and ``drift_ms`` once measured twice."""
        out = {}
        for w, c in sorted(self.last.items()):
            d = c.to_json()
            moved = drift(self.first[w], c) if w in self.first else None
            if moved is not None and self.first[w] is not c:
                d["drift_ms"] = round(moved * 1000, 3)
            out[w] = d
        return out

    def max_offset_ms(self) -> tuple[int, float] | None:
        """(workers measured, the largest |offset| in ms), or None when none was measured."""
        measured = [abs(c.offset_s) for c in self.last.values() if c.offset_s is not None]
        return (len(measured), max(measured) * 1000) if measured else None
