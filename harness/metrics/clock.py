"""A worker's clock offset to the master, from ping-pong round trips (NTP's arithmetic). Pure.

One round trip: the master sends a ping at t0 (its clock), the worker receives it at t1 and answers at t2 (the
worker's clock), the master receives the answer at t3. With a symmetric path::

    offset = ((t1 - t0) + (t2 - t3)) / 2     the worker's clock minus the master's
    rtt    = (t3 - t0) - (t2 - t1)           time on the wire (and in the message loops), both ways

Whatever the asymmetry of the two directions, the true offset lies within ``offset ± rtt / 2``: that is the
error bound of one sample. ``estimate`` takes the median offset of several samples (one slow round trip,
e.g. a greenlet busy at the wrong moment, does not move it) and as its bound half the rtt of the sample the
median is (for an even count, the larger of the two it averages): the true offset lies in each sample's
interval, so in the median sample's too.

Which clock: the wall clock (``time.time()``), the one NTP disciplines and the only one two hosts can share.
Monotonic clocks (``perf_counter``) start at each host's boot, so their "offset" means nothing.

What the offset changes in kneecap's numbers (docs/fleets.md, "Clocks"): nothing in summary.json. No worker
timestamp is ever compared with the master's or another worker's: every duration is measured on one worker's
monotonic clock, and every step boundary a worker uses is the arrival of the master's step message, on the
worker's own clock. What does cross hosts is that message's one-way delay (≤ rtt), by which a worker's step
and open-loop schedule start after the master's; the step's warm-up (seconds) absorbs it. The offset is
used for the per-request wall times of ``--save-requests`` (``wall_start``, on the master's clock), which a
user lines up with server logs across hosts. The warning bound is ``WARN_OFFSET_S``.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["MIN_SAMPLES", "ROUNDS", "WARN_DRIFT_S", "WARN_OFFSET_S", "WARN_RTT_S", "ClockOffset", "RoundTrip",
           "drift", "drift_warning", "estimate", "warning"]

ROUNDS = 8
"""Round trips per worker (one after the other); a few more than needed, as some may be lost or slow."""
MIN_SAMPLES = 3
"""Fewer answered round trips than this: the offset is unknown (and the summary says so)."""
WARN_OFFSET_S = 0.005
"""|offset| above 5 ms: the worker's wall clock disagrees with the master's by more than NTP keeps hosts on one
network (~1 ms): its wall times (``wall_start``) are corrected by the measured offset, but a clock that far off is
often also stepping or drifting during the run; run NTP (chrony) on every host."""
WARN_RTT_S = 0.050
"""A median round trip above 50 ms: step messages reach that worker late enough to matter against short warm-ups
(each worker's step starts when the message arrives)."""
WARN_DRIFT_S = 0.002
"""A worker's offset moved more than this between its first and its last measurement, beyond both measurements'
bounds: its clock drifts (no NTP: tens of ppm, i.e. ms per minute) or is being stepped. Its wall times follow the
latest measurement, so those made between two measurements may be off by up to the move."""


@dataclass(frozen=True)
class RoundTrip:
    """One ping-pong: t0, t3 on the master's clock, t1, t2 on the worker's (seconds)."""

    t0: float
    t1: float
    t2: float
    t3: float

    @property
    def offset(self) -> float:
        return ((self.t1 - self.t0) + (self.t2 - self.t3)) / 2

    @property
    def rtt(self) -> float:
        return (self.t3 - self.t0) - (self.t2 - self.t1)


@dataclass(frozen=True)
class ClockOffset:
    """A worker's clock against the master's; ``offset_s`` is None when too few round trips came back."""

    offset_s: float | None
    """The worker's clock minus the master's (median over the samples)."""
    bound_s: float | None
    """The true offset is within ``offset_s ± bound_s`` (half the median sample's round trip)."""
    rtt_s: float | None
    """The median round trip."""
    samples: int
    """Round trips answered (of ``ROUNDS`` sent)."""

    def to_json(self) -> dict:
        ms = lambda s: None if s is None else round(s * 1000, 3)  # noqa: E731
        return {"offset_ms": ms(self.offset_s), "bound_ms": ms(self.bound_s), "rtt_ms": ms(self.rtt_s),
                "samples": self.samples}


def estimate(trips: Sequence[RoundTrip], *, min_samples: int = MIN_SAMPLES) -> ClockOffset:
    """The offset from ``trips``; round trips with a negative rtt (a clock stepped mid-trip) are left out."""
    good = [t for t in trips if t.rtt >= 0]
    if len(good) < min_samples:
        return ClockOffset(None, None, None, len(good))
    ranked = sorted(good, key=lambda t: t.offset)
    n = len(ranked)
    middle = ranked[(n - 1) // 2:n // 2 + 1]  # the one (odd n) or two (even n) samples the median is made of
    return ClockOffset(statistics.median(t.offset for t in good), max(t.rtt for t in middle) / 2,
                       statistics.median(t.rtt for t in good), len(good))


def warning(worker: str, c: ClockOffset) -> str | None:
    """What to tell the user about ``worker``'s clock, or None when it is fine."""
    if c.offset_s is None:
        return (f"worker {worker}: clock offset not measured ({c.samples} of the round trips answered, "
                f"{MIN_SAMPLES} needed): its wall times (wall_start) are uncorrected")
    if abs(c.offset_s) > WARN_OFFSET_S:
        assert c.bound_s is not None  # measured with the offset
        return (f"worker {worker}: clock {c.offset_s * 1000:+.1f} ms (±{c.bound_s * 1000:.1f}) off the master's, "
                f"more than {WARN_OFFSET_S * 1000:g} ms: run NTP on every host; its wall times are corrected by it")
    if c.rtt_s is not None and c.rtt_s > WARN_RTT_S:
        return (f"worker {worker}: round trip to the master {c.rtt_s * 1000:.0f} ms, more than "
                f"{WARN_RTT_S * 1000:g} ms: its steps start that much after the master's; keep warm-ups long")
    return None


def drift(first: ClockOffset, last: ClockOffset) -> float | None:
    """How far the offset moved from ``first`` to ``last`` (s); None when either was not measured."""
    if first.offset_s is None or last.offset_s is None:
        return None
    return last.offset_s - first.offset_s


def drift_warning(worker: str, first: ClockOffset, last: ClockOffset) -> str | None:
    """What to tell the user when ``worker``'s clock moved against the master's during the run, or None."""
    moved = drift(first, last)
    # moved is set: both measured, with their bounds
    if moved is None or abs(moved) <= WARN_DRIFT_S + first.bound_s + last.bound_s:  # type: ignore[operator]
        return None
    return (f"worker {worker}: clock moved {moved * 1000:+.1f} ms against the master's during the run "
            # moved is set: both offsets measured
            f"({first.offset_s * 1000:+.1f} -> {last.offset_s * 1000:+.1f} ms): it drifts or is being stepped; run "  # type: ignore[operator]
            f"NTP on every host; its wall times follow the latest measurement")
