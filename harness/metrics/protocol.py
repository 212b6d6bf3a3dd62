"""The worker ↔ master protocol: kneecap's data messages through Locust, and their payloads. Pure.

Locust carries all of it (msgpack, ``strict_map_key=False``); kneecap adds no socket of its own.
Payloads are dicts of plain types; ``tests/metrics/test_protocol.py`` keeps their golden msgpack bytes.

Worker → master, every 3 s inside Locust's ``report_to_master`` data under ``REPORT_KEY``, and once
more as the ``FLUSH_MESSAGE`` when the worker stops (so the last seconds are not lost)::

    {
      "v": 2,                 int   protocol version; the master reads 1 and 2, refuses others (ProtocolError)
      "step": 3,              int   the step this worker is in now: every step before it has all its data
      "buckets": [            list  the deltas since the last report, one per (step, phase):
        [3, "measure", {...}]         [step index, "warmup" | "measure", Bucket.to_wire()]
      ],
      "gen": {"lag": b"...",  dict  generator health since the last report: loop-lag sketch (metrics/wire.py),
              "cpu": 41.5,          the worker's CPU percent (Locust's),
              "cpu_s": [[3, 1.9]],  its process CPU seconds by the step they were spent in (optional),
              "gc": [0.004, 0.011, 12],   its GC pauses: longest, total (s), collections (optional)
              "wait_s": [[3, 0.2]], its loop's run-queue wait by step (optional),
              "ks": false},         only when its receives are not the kernel's stamps
      "records": [{...}]      list  only with --save-requests: the per-request records since the last report
    }

A Bucket on the wire: "sk" (sketches by name, each ``metrics/wire.py``'s bytes), the counters of
``aggregate._WIRE_FIELDS``, and keys present only when they have data, so older payloads keep their bytes: "why"
(a failure detail per class), "cache" ([requests reporting cached tokens, their prompt tokens, their cached tokens,
those from llama.cpp timings]) and "sess" (``SessionStats.to_wire()``: turn buckets, decode sums, ended-session
counts), "x" (``Bucket.extra``: counters by name that apply to some endpoints only) and "conn" (requests that opened
a connection inside their own time),
"rc" (the request rows, ``metrics.rows``, by column, ``RowColumns.wire()``: ["i" or "q", the numeric columns'
little-endian int32 bytes (int64 under "q", when a value does not fit) one after the other, ``ROW_FIELDS`` order
without "gaps", None as the type's least value; the gaps list]; version 1 shipped them by row, "rows") and
"rows_seen" (the requests they sample, when not all).

Master → workers, the ``STEP_MESSAGE`` when a step begins (and once past the plan's last step)::

    {"index": 3}                                   closed loop: records from now on belong to step 3
    {"index": 3, "rate": 12.0, "stride": 2}        open loop: also the fleet's rate and the worker count
    {"index": 4, "end": True}                      the plan ended: no step from here on, arrivals stop
    {"index": 3, "warmup_s": 12.5}                 this step's warm-up is not the scenario's (optional key)

Worker → master, the ``REPORT_MESSAGE`` (a report, as above) at once when a ``STEP_MESSAGE`` arrives: the step
before it has all its data within a round trip, not at the next 3 s report (a search chooses its next level from
it while the load holds).

Worker → master, ``HELLO_MESSAGE`` (no data) once its handlers are registered: the master answers with the
``STEP_MESSAGE`` under way, if any. A worker joining a running test learns its step that way — a message sent
as it connects would be dropped (Locust connects a worker before the ``init`` event registers kneecap's
handlers) — and its users wait for the answer, so none of its records lands in the wrong step.

The clock ping-pong (``load/clock.py``: ping, pong, the offset found) has messages of its own, outside this
module's payloads. The master's clock is authoritative for step boundaries: a worker's step (and its warm-up)
starts when the ``STEP_MESSAGE`` arrives, the master's start plus the message's delivery time (~1 ms on one host).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.errors import KneecapError
from harness.metrics.aggregate import Bucket, Delta
from harness.metrics.sketch import Sketch
from harness.metrics.wire import decode_sketch, encode_sketch

__all__ = ["FLUSH_MESSAGE", "HELLO_MESSAGE", "PROTOCOL_VERSION", "REPORT_KEY", "REPORT_MESSAGE", "STEP_MESSAGE",
           "GeneratorSample", "ProtocolError", "Report", "StepMessage"]

PROTOCOL_VERSION = 2
"""2: sketches as packed bytes (``metrics/wire.py``) and a bucket's request rows by column ("rc"); 1 shipped
sketches as dicts and rows by row ("rows"). The master reads both."""
_READS = (1, 2)
REPORT_KEY = "kneecap"
STEP_MESSAGE = "kneecap_step"
FLUSH_MESSAGE = "kneecap_flush"
HELLO_MESSAGE = "kneecap_hello"
REPORT_MESSAGE = "kneecap_report"


class ProtocolError(KneecapError):
    """A worker's payload the master cannot read (another kneecap version, or garbage)."""


@dataclass(frozen=True)
class GeneratorSample:
    """One worker's load-generator health over one report period."""

    lag: Sketch
    cpu: float
    cpu_s: dict[int, float] = field(default_factory=dict)
    """Process CPU seconds (user + system) since the last report, by the step they were spent in (a report period
    can straddle a step change); empty from a worker that does not measure it (older kneecap)."""
    gc: tuple[float, float, int] | None = None
    """Garbage-collector pauses since the last report: the longest and the total (seconds) and how many
    collections; None when not measured."""
    kernel_stamps: bool = True
    """The worker's receives are dated by the kernel (``client.inflight.SO_TIMESTAMPNS``); on the wire only when
    not ("ks": false), so payloads keep their bytes."""
    wait_s: dict[int, float] = field(default_factory=dict)
    """Seconds the worker's loop thread was runnable but not running (the kernel's run-queue wait) since the last
    report, by step as ``cpu_s``; empty where not measured (not Linux, older kneecap)."""

    def to_wire(self) -> dict:
        out: dict = {"lag": encode_sketch(self.lag), "cpu": self.cpu}
        if not self.kernel_stamps:
            out["ks"] = False
        if self.cpu_s:  # only then: payloads of workers that do not measure it keep their bytes
            out["cpu_s"] = [[step, seconds] for step, seconds in sorted(self.cpu_s.items())]
        if self.gc is not None:
            out["gc"] = list(self.gc)
        if self.wait_s:
            out["wait_s"] = [[step, seconds] for step, seconds in sorted(self.wait_s.items())]
        return out

    @classmethod
    def from_wire(cls, g: dict) -> GeneratorSample:
        gc = g.get("gc")
        if gc is not None and len(gc) != 3:
            raise ValueError(f"gen.gc has 3 numbers (longest, total, collections), got {gc!r}")
        return cls(decode_sketch(g["lag"]), float(g["cpu"]),
                   cpu_s={int(step): float(seconds) for step, seconds in g.get("cpu_s", ())},
                   gc=None if gc is None else (float(gc[0]), float(gc[1]), int(gc[2])),
                   kernel_stamps=bool(g.get("ks", True)),
                   wait_s={int(step): float(seconds) for step, seconds in g.get("wait_s", ())})


@dataclass(kw_only=True)
class Report:
    """One worker's report: its current step, its deltas, its health, and (optionally) raw records."""

    step: int
    buckets: list[Delta] = field(default_factory=list)
    gen: GeneratorSample | None = None
    records: list[dict] = field(default_factory=list)

    def to_wire(self) -> dict:
        out: dict = {"v": PROTOCOL_VERSION, "step": self.step,
                     "buckets": [[s, p, b.to_wire()] for s, p, b in self.buckets]}
        if self.gen is not None:
            out["gen"] = self.gen.to_wire()
        if self.records:
            out["records"] = self.records
        return out

    @classmethod
    def from_wire(cls, d: object, worker: str = "?") -> Report:
        """Decode a payload; any problem (version, shape, a sketch that does not decode) is a ProtocolError."""
        if not isinstance(d, dict) or d.get("v") not in _READS:
            v = d.get("v") if isinstance(d, dict) else type(d).__name__
            raise ProtocolError(f"worker {worker} sent kneecap payload version {v}, expected {PROTOCOL_VERSION}: "
                                "run the same kneecap version on master and workers")
        try:
            buckets = [(int(s), str(p), Bucket.from_wire(b)) for s, p, b in d["buckets"]]
            g = d.get("gen")
            gen = GeneratorSample.from_wire(g) if g else None
            return cls(step=int(d["step"]), buckets=buckets, gen=gen, records=list(d.get("records", ())))
        except (KneecapError, ValueError, KeyError, TypeError) as exc:  # incl. SketchMismatch (a version skew)
            raise ProtocolError(f"worker {worker} sent a kneecap payload that cannot be read: "
                                f"{type(exc).__name__}: {exc}") from None


@dataclass(frozen=True, kw_only=True)
class StepMessage:
    """The master's step boundary, as workers receive it."""

    index: int
    rate: float | None = None
    """Open loop: the fleet's arrival rate (req/s) in this step."""
    stride: int = 1
    """How many workers share the step: in open loop each takes every stride-th arrival; probes alike."""
    end: bool = False
    """The plan ended: ``index`` is past the last step."""
    warmup_s: float | None = None
    """This step's warm-up when it is not the scenario's (a search draining a heavier step); on the wire only then."""

    def to_wire(self) -> dict:
        if self.end:
            return {"index": self.index, "end": True}
        out: dict = {"index": self.index}
        if self.rate is not None:
            out.update(rate=self.rate, stride=self.stride)
        elif self.stride != 1:  # closed loop: the fleet's size, for probes (``load/probes.py``)
            out["stride"] = self.stride
        if self.warmup_s is not None:
            out["warmup_s"] = self.warmup_s
        return out

    @classmethod
    def from_wire(cls, d: dict) -> StepMessage:
        warmup = d.get("warmup_s")
        return cls(index=int(d["index"]), rate=d.get("rate"), stride=int(d.get("stride", 1)),
                   end=bool(d.get("end", False)), warmup_s=None if warmup is None else float(warmup))
