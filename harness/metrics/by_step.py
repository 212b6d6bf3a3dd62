"""A run's buckets by (step, phase): a worker's ``Recorder`` (records in, deltas out) and the master's ``Fleet`` (every
worker's deltas merged, and the step each worker is in). Pure (split from ``metrics/aggregate.py``, which holds the
bucket itself).
"""

from __future__ import annotations

from collections.abc import Callable

from harness.metrics.aggregate import Bucket, Delta
from harness.metrics.record import RequestRecord
from harness.metrics.rows import encode_row
from harness.metrics.sessions import SessionRecord

__all__ = ["Fleet", "Recorder"]


class Recorder:
    """Worker side: records go to the bucket of the current step and phase; ``drain()`` ships deltas."""

    def __init__(self, *, warmup_s: float = 0.0, good: Callable[[RequestRecord], bool] | None = None) -> None:
        self.warmup_s = warmup_s
        self.good = good
        self.step = 0
        self.step_started: float | None = None
        self.worker = 0
        """This worker's index, in its request rows."""
        self._buckets: dict[tuple[int, str], Bucket] = {}

    def set_step(self, index: int, now: float) -> None:
        self.step, self.step_started = index, now

    def phase(self, now: float) -> str:
        if self.step_started is not None and now - self.step_started < self.warmup_s:
            return "warmup"
        return "measure"

    def _bucket(self, now: float, phase: str | None = None) -> tuple[tuple[int, str], Bucket]:
        key = (self.step, phase or self.phase(now))
        b = self._buckets.get(key)
        if b is None:
            b = self._buckets[key] = Bucket()
        return key, b

    def add(self, rec: RequestRecord, now: float) -> tuple[int, str]:
        key, b = self._bucket(now, "warmup" if rec.warmup_shape else None)
        b.add(rec, self.good)
        if key[1] == "measure" and rec.cancelled is None:  # tail attribution's rows: judged, not cut short
            b.add_row(encode_row(rec, rec.start - (self.step_started or rec.start), self.worker))
        return key

    def add_row(self, rec: RequestRecord, now: float) -> tuple[int, str]:
        """A row only, in the measured part of a step (a probe: reported apart, in no metric of the step)."""
        key, b = self._bucket(now)
        if key[1] == "measure":
            b.add_row(encode_row(rec, rec.start - (self.step_started or rec.start), self.worker))
        return key

    def note(self, key: str, now: float, n: int = 1, phase: str | None = None) -> None:
        """Count ``n`` events of ``key`` (``Bucket.extra``) in the current step and phase (or ``phase``)."""
        self._bucket(now, phase)[1]._count(key, n)

    def add_session(self, rec: SessionRecord, now: float) -> None:
        """An ended session goes to the bucket of the step and phase it ended in."""
        self._bucket(now)[1].add_session(rec)

    def arrival(self, now: float, dropped: bool) -> None:
        """Open loop: one scheduled arrival, sent or dropped."""
        b = self._bucket(now)[1]
        b.arrivals += 1
        b.dropped += dropped

    def drain(self) -> list[Delta]:
        """The deltas since the last drain; the recorder starts empty again."""
        out = [(s, p, b) for (s, p), b in self._buckets.items()]
        self._buckets = {}
        return out


class Fleet:
    """Master side: the merge of every worker's deltas per (step, phase), and the step each worker is in."""

    def __init__(self) -> None:
        self.steps: dict[tuple[int, str], Bucket] = {}
        self.worker_step: dict[str, int] = {}

    def merge(self, worker: str, step: int, deltas: list[Delta]) -> None:
        """Add one worker's deltas; ``step`` is the step that worker is in now."""
        for index, phase, b in deltas:
            into = self.steps.get((index, phase))
            if into is None:  # not setdefault: a Bucket is ~1 µs to make, a report at a time
                into = self.steps[index, phase] = Bucket()
            into.merge(b)
        self.worker_step[worker] = step

    def past(self, index: int) -> set[str]:
        """Workers whose last report came from step ``index`` or later (so every earlier step has their data)."""
        return {w for w, step in self.worker_step.items() if step >= index}

    def forget(self, worker: str) -> None:
        """A lost worker: the steps it was in no longer wait for its reports."""
        self.worker_step.pop(worker, None)

    def bucket(self, index: int, phase: str = "measure") -> Bucket:
        """The merged bucket of a step's phase (a new empty one when nothing arrived yet)."""
        return self.steps.get((index, phase)) or Bucket()

    def step_complete(self, index: int, workers: int) -> bool:
        """Every worker has reported from a later step, so step ``index`` has all its data."""
        return len(self.worker_step) >= workers and all(s > index for s in self.worker_step.values())

