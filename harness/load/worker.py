"""The worker side: what ``LLMUser`` records into, and what the worker reports to the master.

Each finished request goes into the ``Recorder`` bucket of the current step and phase; every report
(``report_to_master``, 3 s) and the final flush carry the deltas since the last one as a
``metrics.protocol.Report``, with the generator's own health (``load/generator.py``: loop lag, GC pauses,
CPU by step).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from gevent.event import Event

from harness.analysis.plan import StepPlan
from harness.client.target import Target
from harness.load.clock import worker_clock
from harness.load.context import ScenarioSource
from harness.load.generator import LAG_PERIOD_S, GcPauses, GeneratorMonitor
from harness.load.probes import ProbeDriver, start_probes
from harness.load.samplers import Samplers
from harness.load.verify import Verifier
from harness.load.warm_shapes import ShapeWarmup
from harness.metrics.aggregate import ADAPTER_KEY, BUSY_KEY, CLASS_CANCEL_KEY, SHAPE_KEY
from harness.metrics.by_step import Recorder
from harness.metrics.protocol import Report, StepMessage
from harness.metrics.record import RequestRecord
from harness.metrics.sessions import SessionRecord
from harness.scenario import Scenario
from harness.spec.slo import request_meets
from harness.workload.sampler import PlannedRequest

log = logging.getLogger("kneecap")

__all__ = ["LAG_PERIOD_S", "GcPauses", "OpenStep", "WorkerSide"]

TOLD_TIMEOUT_S = 10.0
"""How long a user waits for the master to say which step is under way (it answers in ~1 ms)."""


@dataclass(frozen=True)
class OpenStep:
    """Open loop: the step a worker's arrival driver follows (rate of the whole fleet, this worker's share)."""

    index: int
    rate: float
    t0: float
    stride: int


class WorkerSide:
    """Reached from users as ``environment.kneecap.worker``."""

    def __init__(self, environment: Any, source: ScenarioSource) -> None:
        self.env = environment
        self.source = source
        self.recorder = Recorder()
        self.generator = GeneratorMonitor()
        self.records: list[dict] = []
        self.open_step: OpenStep | None = None
        self.told = Event()
        """Set once the master said which step is under way: users wait for it (``wait_for_step``)."""
        self.in_flight = 0
        """Requests in flight on this worker now (each record keeps the count at its send)."""
        self.logged_errors: set[type] = set()
        """Exception types already logged as client_error in this process (each once, not per request)."""
        self.samplers = Samplers(self)
        """What each user draws its requests from (``load/samplers.py``), remade at test start."""
        self._probes: ProbeDriver | None = None
        self.fleet_size = 1
        """Workers in the fleet, as the last step message said (probes share their rate out by it)."""
        self._usage_refused = False
        self._usage_ok = False  # a request asking for per-chunk usage succeeded: the endpoint takes the option
        self._told_warned = False
        self.shapes = ShapeWarmup([])
        self.verify: Verifier | None = None
        """``verify:``: this worker's reference answers and re-asks (``load/verify.py``)."""
        self._hangups = False
        """The workload has users who hang up (cancel, patience): requests' durations are summed (``BUSY_KEY``)."""
        self._target: Target | None = None
        self.wall = worker_clock()
        self.clock_offset: float | None = None
        """Its wall clock minus the master's, as the master measured it (``load/clock.py``); None until then."""

    @property
    def target(self) -> Target:
        """Where this worker's requests go (``client/target.py``): resolved at test start (the web UI's host may change
        between tests), or at first use by a worker that joins a running test (its users start before that)."""
        if self._target is None:
            self._target = Target.of(self.scenario.endpoint, self.env.host,
                                     insecure=bool(self.source.option("insecure")))
        return self._target

    @property
    def scenario(self) -> Scenario:
        return self.source.scenario

    @property
    def open_loop(self) -> bool:
        return self.source.open_loop

    @property
    def worker_index(self) -> int:
        return getattr(self.env.runner, "worker_index", 0) or 0

    def on_test_start(self) -> None:
        """The scenario is known now (workers: the master's options came with the spawn message)."""
        self._target = None
        if self.target.https:  # load the CAs now, not in a step's time
            self.target.tls()
        self.samplers = Samplers(self)
        self.samplers.warm()  # the prompt corpus (~50 ms) now, not in a step's time
        self.shapes = ShapeWarmup(self.samplers.shapes())
        sc = self.scenario
        self.verify = None if sc.verify is None else \
            Verifier(sc.verify, sc.workload.seed, self.worker_index, sc.endpoint.api)
        self.recorder.warmup_s = self.scenario.load.step.warmup_s  # keep the step the master already announced
        self.recorder.good = request_meets(self.scenario.slo)
        self.recorder.worker = self.worker_index
        w = self.scenario.workload
        self._hangups = any(x.cancel or x.patience for x in (w, *(c.workload for c in w.mix)))
        self.stop_probes()
        self._probes = start_probes(self)  # load.probes: this worker's share, from the first step on
        self.generator.start()

    def stop(self) -> None:
        self.generator.stop()
        self.stop_probes()

    def stop_probes(self) -> None:
        if self._probes is not None:
            self._probes.stop()
            self._probes = None

    def record_probe(self, rec: RequestRecord, now: float) -> None:
        """A probe's record: a row of its own class (measured part of a step only), never the step's metrics."""
        step, phase = self.recorder.add_row(rec, now)
        if self.source.option("save_requests"):
            self._save(rec, step, phase, "probe")

    @property
    def continuous_usage(self) -> bool:
        """Ask chat/completions streams for usage on every chunk (exact tokens per chunk) — until refused."""
        ep = self.scenario.endpoint
        return ep.continuous_usage != "off" and ep.stream and ep.api in ("chat", "completions") \
            and not self._usage_refused

    def refused_continuous_usage(self, rec: RequestRecord) -> bool:
        """``rec`` answered a request that asked for per-chunk usage (continuous usage "auto"). A 400 before any such
        request succeeded is taken as the endpoint refusing the option (strict servers name the field, others just
        say "bad request"): stop asking, say so once and in the results; True means "send this request again
        without it". Once one succeeded, the option is accepted and a 400 is the endpoint's own answer."""
        if rec.ok:
            self._usage_ok = True
        if self.scenario.endpoint.continuous_usage != "auto" or self._usage_ok or rec.error != "http_4xx" \
                or rec.status != 400:
            return False
        if not self._usage_refused:
            self._usage_refused = True
            log.warning("kneecap: the endpoint answered HTTP 400 to stream_options.continuous_usage_stats (%s); asking "
                        "without it from now on: tokens per chunk are inferred, not exact (endpoint.continuous_usage: "
                        "off skips the question)", rec.error_detail[:200])
        self.recorder.note("continuous_usage_refused", time.perf_counter())
        return True

    def next_shape(self) -> PlannedRequest | None:
        """``load.warmup_shapes``: this worker's next shape warm-up request, while the run's first step lasts."""
        return self.shapes.next(self.recorder.step == 0, self.worker_index, self.fleet_size)

    def record(self, rec: RequestRecord, now: float) -> None:
        step, phase = self.recorder.add(rec, now)
        if rec.warmup_shape:
            self.recorder.note(SHAPE_KEY, now, phase="warmup")
            self.shapes.ended(now, self.recorder)
        if rec.model is not None:  # a LoRA adapter: counted per step (steps[].adapters)
            self.recorder.note(f"{ADAPTER_KEY}{rec.model}", now)
        if rec.cancelled is not None and rec.class_index is not None:  # hang-ups are not rows: counted per class
            self.recorder.note(f"{CLASS_CANCEL_KEY}{rec.class_index}", now)
        if self._hangups and rec.e2e_s is not None:  # did the server free their slots: the client's concurrency
            self.recorder.note(BUSY_KEY, now, round(rec.e2e_s * 1000))
        if self.source.option("save_requests"):
            self._save(rec, step, phase, None if rec.class_index is None else
                       self.scenario.workload.mix[rec.class_index].name)

    def _save(self, rec: RequestRecord, step: int, phase: str, cls: str | None) -> None:
        d = rec.to_dict()
        d.pop("chunk_times")
        d.pop("chunk_tokens")
        d.update(step=step, phase=phase, worker=self.worker_index, clock_offset_s=self.clock_offset,
                 wall_start=self.wall() - (time.perf_counter() - rec.start) - (self.clock_offset or 0.0))
        if cls is not None:
            d["class"] = cls
        self.records.append(d)

    def record_session(self, rec: SessionRecord, now: float) -> None:
        self.recorder.add_session(rec, now)

    def arrival(self, dropped: bool) -> None:
        self.recorder.arrival(time.perf_counter(), dropped)

    def on_step(self, msg: StepMessage, now: float) -> None:
        """The master began a step (or ended the plan): tag records (and CPU) with it from ``now`` on."""
        self.generator.charge(self.recorder.step)
        self.recorder.set_step(msg.index, now)
        self.fleet_size = msg.stride
        default = self.scenario.load.step.warmup_s
        self.recorder.warmup_s = default if msg.warmup_s is None else msg.warmup_s
        self.told.set()
        if msg.end or msg.rate == 0:  # 0: a search pausing arrivals while the server drains its queue
            self.open_step = None
        elif msg.rate:
            self.open_step = OpenStep(msg.index, msg.rate, now, msg.stride)

    def step_marks(self, msg: StepMessage) -> list[float]:
        """Seconds from the step's start to its time marks (``StepPlan.time_marks_s``, with the step's warm-up): a
        report then lets the master end the step on time, not at Locust's next report (every 3 s). Empty after the
        plan's end."""
        if msg.end:
            return []
        return StepPlan.for_load(self.scenario.load).time_marks_s(warmup_s=self.recorder.warmup_s)

    def clock_measured(self, offset: float | None) -> None:
        """The master measured this worker's clock offset (``load/clock.py``): saved requests' wall times use it from
        now on. A re-measurement that failed (None) keeps the last good one."""
        if offset is not None or self.clock_offset is None:
            self.clock_offset = offset

    def wait_for_step(self) -> None:
        """A user's first act: wait until this worker knows the step under way. A worker that joins a running test
        gets its users as it connects, its step only once its handlers are up (``protocol.HELLO_MESSAGE``): a
        record made before would land in step 0. Without an answer in ``TOLD_TIMEOUT_S`` (an older master), go on
        and say so."""
        if self._told_warned or self.told.wait(TOLD_TIMEOUT_S):  # waited once already: the others go on at once
            return
        if not self._told_warned:
            self._told_warned = True
            log.warning("kneecap: the master has not said which step is under way after %.0f s; this worker's "
                        "records count in step %d until it does (is the master an older kneecap?)", TOLD_TIMEOUT_S,
                        self.recorder.step)

    def report(self) -> Report:
        """Everything since the last report; the worker starts empty again."""
        gen = self.generator.sample(float(getattr(self.env.runner, "current_cpu_usage", 0)), self.recorder.step)
        out = Report(step=self.recorder.step, buckets=self.recorder.drain(), gen=gen, records=self.records)
        self.records = []
        return out
