"""The master's record of a run: its steps, the fleet's merged data, the judging and the results. Pure.

Time is passed in (the master's ``perf_counter`` and wall clock): the tests drive a ``Ledger`` on plain
data, with decoded worker reports, and no Locust. The Locust side (``load/master.py``) only feeds it
reports and asks it what to do.

One ``StepState`` per step owns everything the run knows of it: its boundaries, its generator health, the
server's scrapes, the knee metric's halves, and once judged its judgement, tail attribution and TTFT split.
The fleet's merged buckets stay in ``Fleet`` (keyed by step and phase, as the wire ships them).

Judging: a step is judged once its data is complete (every worker has reported from a later step, or the run
ended and the last flushes arrived): its judgement, tail attribution and TTFT split are computed once, then its
request rows go; only the knee is re-found at each ``judge``. Only counted steps (``analysis/counted.py``) move the
knee or pass an SLO; a step the fleet changed under is not judged at all (its level is re-run). The knee and the
SLOs rank failed requests as misses (``p99_slo``, ``analysis/judge.py``). Reading (``results``) changes nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import compress
from operator import not_
from typing import TYPE_CHECKING, Literal

from harness.analysis.cancel_slots import cancel_slots
from harness.analysis.cost.pricing import floor_of, step_cost
from harness.analysis.counted import why_not
from harness.analysis.failures import hint, top_failures
from harness.analysis.halves import Halves
from harness.analysis.judge import evaluate_slo, is_stationary, step_point
from harness.analysis.knee import KneeFinding, KneeParams, StepPoint, by_load, find_knee
from harness.analysis.mix.classes import ClassStep, class_checks, class_point, class_steps, probe_step
from harness.analysis.mix.rows import add_counted, add_rows_detail
from harness.analysis.plan import PLAN_ENDS, StepPlan, stop_reason
from harness.analysis.results import StepResult
from harness.analysis.search import PREDICTED, Decision, Probe, SearchGrid, choose, search_line
from harness.analysis.server import ServerStep, TimeSeries
from harness.analysis.sessions import cache_view, session_view
from harness.analysis.step_columns import StepColumns
from harness.analysis.steps import GeneratorTally, StepInfo, step_health, step_result
from harness.analysis.timeline import timeline
from harness.analysis.why.attribute import StepTails, TailParams
from harness.analysis.why.decompose import ttft_split
from harness.analysis.why.rows import explain_rows, gc_paused
from harness.client.server_metrics import ServerSample
from harness.metrics.aggregate import BUSY_KEY, Bucket
from harness.metrics.by_step import Fleet
from harness.metrics.protocol import Report
from harness.metrics.row_sample import RowSample
from harness.metrics.rows import PROBE_CLASS, ROW_FIELDS
from harness.summary import FleetEvent, Server, SloCheck, StepCost, Timeline, Tokens, level_unit

if TYPE_CHECKING:
    from harness.scenario import Scenario

__all__ = ["Judgement", "Ledger", "StepState"]

_CLASS = ROW_FIELDS.index("class")


@dataclass(frozen=True)
class Judgement:
    """A complete step, judged."""

    point: StepPoint
    slo: list[SloCheck]
    stationary: bool | None
    error_rate: float
    why: str | None = None
    """Why the step does not count (``analysis.counted``); None when it does."""

    @property
    def slo_passed(self) -> bool | None:
        """Every SLO held; None without SLOs or when the step does not count (it can neither pass nor fail)."""
        return all(c.passed for c in self.slo) if self.slo and self.why is None else None


@dataclass
class StepState:
    """One step of the run: what was measured of it and, once its data is complete, what was concluded."""

    info: StepInfo
    generator: GeneratorTally | None = None
    """The workers' load-generator health over the step (loop lag, CPU, GC), merged."""
    server: ServerStep | None = None
    """The server's /metrics scrapes in the step's measured part (None: not scraped)."""
    waiting: TimeSeries = field(default_factory=TimeSeries)
    """The server's waiting queue at every scrape: (time on the step clock, requests waiting)."""
    halves: Halves = field(default_factory=Halves)
    """The knee metric's deltas by time (``analysis/halves.py``): the stationarity check splits them in two."""
    judgement: Judgement | None = None
    tails: StepTails | None = None
    """Tail attribution of the step's request rows, worked out once when it is judged."""
    ttft_split: dict | None = None
    """Where the step's TTFT went (``analysis/why/decompose.py``), worked out once when it is judged."""
    timeline: Timeline | None = None
    """Its requests over time (``analysis/timeline.py``), for the report."""
    classes: list[ClassStep] | None = None
    """``workload.mix``: each class's figures (``analysis/mix/classes.py``), worked out once when it is judged."""
    probes: ClassStep | None = None
    """``load.probes``: the probe requests' figures, apart from the step's (``load/probes.py``)."""

    @property
    def index(self) -> int:
        return self.info.index


@dataclass
class Ledger:
    """Steps on the master's clock and the fleet's data per step; see the module docstring."""

    scenario: Scenario
    states: list[StepState] = field(default_factory=list)
    fleet: Fleet = field(default_factory=Fleet)
    knee: KneeFinding = field(default_factory=lambda: KneeFinding(False, reason="not judged yet"))
    fleet_events: list[FleetEvent] = field(default_factory=list)
    reporters: set[str] = field(default_factory=set)
    """Every worker that ever reported."""
    _last_report: dict[str, float] = field(default_factory=dict)
    offload: Callable[[Callable[[], None]], None] = field(default=lambda work: work(), repr=False, compare=False)
    """Runs a judged step's analysis of its rows (their tail, TTFT split and classes: ~0.3 s at 100k requests), which
    reads only that step's data, none a report still adds to: here at once; the master, in a native thread, so that
    its event loop runs on meanwhile (``load/master.py``)."""

    def __post_init__(self) -> None:
        load = self.scenario.load
        self.plan = StepPlan.for_load(load)
        self.mode = "open" if load.open_loop else "closed"
        self.search = load.search
        self.grid = SearchGrid(load.start, load.max, load.step_by, integer=not load.open_loop)
        """A search's levels: the staircase's at its resolution."""
        self.decision: Decision | None = None
        """A search's last choice of level (``next_probe``)."""

    @property
    def steps(self) -> list[StepInfo]:
        """Every step's boundaries, in order."""
        return [s.info for s in self.states]

    @property
    def current(self) -> StepInfo | None:
        return self.states[-1].info if self.states else None

    @property
    def judged(self) -> dict[int, Judgement]:
        """The judged steps' judgements by step index."""
        return {s.index: s.judgement for s in self.states if s.judgement is not None}

    def behind_the_plan(self) -> set[str]:
        """Workers not lost whose last report came from inside the plan: a step's data may still be on its way
        (once a worker reports from past the plan's last step, every step has its data)."""
        lost = {e.worker for e in self.fleet_events if e.kind == "lost"}
        return self.reporters - lost - self.fleet.past(len(self.states))

    def state(self, index: int) -> StepState | None:
        return self.states[index] if 0 <= index < len(self.states) else None

    def begin_step(self, level: float, now: float, wall: float, level_index: int = -1, *, why: str = "",
                   warmup_s: float | None = None, warmup_why: str = "") -> StepInfo:
        """Close the running step (if any) and start the next one at ``level`` (the plan's ``level_index``-th)."""
        self.end_step(now)
        warmup = self.scenario.load.step.warmup_s if warmup_s is None else warmup_s
        info = StepInfo(len(self.states), level, now, warmup, started_wall=wall, level_index=level_index, why=why,
                        warmup_why=warmup_why)
        self.states.append(StepState(info))
        return info

    def fleet_change(self, kind: Literal["lost", "joined"], worker: str, now: float, wall: float, *,
                     noticed_after_s: float) -> FleetEvent:
        """A worker ``lost`` or ``joined``, noticed at ``now``. A lost worker was last alive at its last report
        (or, if it never reported, up to ``noticed_after_s`` ago): every step running since then is marked and
        loses its judgement, and no longer waits for that worker's reports (what it had not delivered is gone)."""
        since = now
        if kind == "lost":
            self.fleet.forget(worker)
            since = self._last_report.pop(worker, now - noticed_after_s)
        hit = [s for s in self.states if s.info.started <= now and (s.info.ended is None or s.info.ended >= since)]
        for s in hit:
            (s.info.workers_lost if kind == "lost" else s.info.workers_joined).append(worker)
            s.judgement = None
        event = FleetEvent(kind=kind, worker=worker, at=wall, steps=[s.index for s in hit])
        self.fleet_events.append(event)
        return event

    def end_step(self, now: float, why: str = "stopped") -> bool:
        """Close the running step (``why``: ``StepInfo.ended_why``); False when there is none."""
        if not self.states or self.states[-1].info.ended is not None:
            return False
        self.states[-1].info.ended = now
        self.states[-1].info.ended_why = self.states[-1].info.ended_why or why
        return True

    def merge(self, worker: str, report: Report, now: float) -> None:
        """Add one worker's report (already decoded, see ``metrics/protocol.py``). Data of a step past the plan
        (workers move there when it ends) joins the fleet's buckets but no step."""
        self.fleet.merge(worker, report.step, report.buckets)
        self._last_report[worker] = now
        self.reporters.add(worker)
        metric = self.scenario.load.knee_metric
        for index, phase, delta in report.buckets:
            if phase == "measure" and metric in delta.sketches and (st := self.state(index)) is not None:
                st.halves.add(now, delta.sketches[metric])  # for the step's stationarity check
        gen = report.gen
        if gen is not None:
            if (st := self.state(report.step)) is not None:
                st.generator = st.generator or self.generator()
                st.generator.merge(gen.lag, gen.cpu, gen.gc[0] if gen.gc else None, gen.kernel_stamps)
            for index, seconds in gen.cpu_s.items():  # CPU is charged to the step it was spent in
                if (st := self.state(index)) is not None:
                    st.generator = st.generator or self.generator()
                    st.generator.add_cpu(seconds, gen.wait_s.get(index))

    def server_sample(self, sample: ServerSample, now: float, *, measuring: bool) -> None:
        """A scrape of the server's /metrics at ``now``, into the running step: its waiting queue always (tail
        attribution joins each request to the nearest), the rest only in the measured part (``measuring``: the
        same part of the step as the client's figures)."""
        if not self.states:
            return
        st = self.states[-1]
        if sample.waiting is not None:
            st.waiting.append((now, sample.waiting))
        if measuring:
            st.server = st.server or ServerStep()
            st.server.add(sample, now)

    def next_probe(self, now: float) -> Decision:
        """A search's next level (``analysis/search.py``), from every step measured so far: judged, or (the one
        that just ended) as its data stands; steps the fleet changed during are left out, like the judging does."""
        probes = []
        for st in self.states:
            bucket = self.measured(st.index)
            if st.info.fleet_changed or not bucket.requests:
                continue
            server = st.server.summary() if st.server is not None else Server()
            probes.append(Probe(self.point(st, now), bucket.requests / st.info.measured_s(now),
                                server.waiting_mean, server.running_max, PREDICTED in st.info.why))
        self.decision = choose(probes, self.grid, self.knee_params, open_loop=self.mode == "open",
                               label=self.knee_label)
        return self.decision

    def search_line(self) -> str:
        """Where a search stands, in one line: "knee between 24 and 32 users; next: 28"."""
        return search_line(self.decision, self.current, level_unit(self.mode))

    def measured(self, index: int) -> Bucket:
        return self.fleet.bucket(index, "measure")

    def judge(self, workers: int, *, final: bool = False) -> KneeFinding:
        """Judge the steps whose data became complete (all ended steps when ``final``); re-find the knee."""
        for st in self.states:
            info = st.info
            if st.judgement is not None:
                continue
            if info.ended is None or not (final or self.fleet.step_complete(info.index, workers)):
                break
            bucket = self.measured(info.index)
            if bucket.requests and not info.fleet_changed:
                self._judge(st, bucket)
        self.knee = find_knee(by_load([s.judgement.point for s in self.states
                                       if s.judgement is not None and s.judgement.why is None]),
                              self.knee_params, label=self.knee_label)
        return self.knee

    @property
    def knee_params(self) -> KneeParams:
        return KneeParams(confirm_steps=self.scenario.load.confirm_steps)

    @property
    def knee_label(self) -> str:
        load = self.scenario.load
        return f"{load.knee_metric} p99_slo" + (f" of class {load.knee_class}" if load.knee_class else "")

    def generator(self) -> GeneratorTally:
        """A step's generator health, judged by the scenario's ``load.step.max_lag_ms``."""
        return GeneratorTally(lag_limit_ms=self.scenario.load.step.max_lag_ms)

    def point(self, st: StepState, now: float) -> StepPoint:
        """The step as the knee finder sees it: its judgement's, or (not judged yet) from its data so far."""
        if st.judgement is not None:
            return st.judgement.point
        info, bucket = st.info, self.measured(st.info.index)
        health = step_health(st.generator or self.generator(), bucket)
        return step_point(info.index, info.level, bucket, self.scenario.load.knee_metric,
                          health.reliable, info.measured_s(now), lag_ms=health.tail_lag_ms, server=st.server)

    def _judge(self, st: StepState, bucket: Bucket) -> None:
        """The step's judgement; with request rows, its tail attribution and TTFT split, then the rows go."""
        info, metric = st.info, self.scenario.load.knee_metric
        duration = info.measured_s(info.ended)  # type: ignore[arg-type]  # judge() passes ended steps only
        health = step_health(st.generator or self.generator(), bucket)
        reliable, lag_ms = health.reliable, health.tail_lag_ms
        mid = info.started + info.warmup_s + duration / 2
        first, second = st.halves.split(mid)
        st.halves = Halves()
        why = why_not(requests=bucket.requests, fleet_changed=info.fleet_changed, complete=self._complete(st, 0.0),
                      reliable=reliable)
        st.judgement = Judgement(step_point(info.index, info.level, bucket, metric, reliable, duration, lag_ms=lag_ms,
                                            server=st.server), evaluate_slo(self.scenario.slo, bucket),
                                 is_stationary(first, second), sum(bucket.failures.values()) / bucket.requests, why)
        if bucket.rows:  # the analysis's own rows: its arrays are read in place (nothing may grow them meanwhile)
            held, bucket.rows = [bucket.rows], RowSample(bucket.rows.cap)

            def analyse() -> None:  # the rows freed when it returns: in ``offload``'s thread too
                self._judge_rows(st, bucket, held.pop(), reliable, duration)

            with gc_paused():
                self.offload(analyse)

    def _judge_rows(self, st: StepState, bucket: Bucket, sample: RowSample, reliable: bool, duration: float) -> None:
        """What the step's request rows say: probes apart, each class of a mix (its SLO in the step's, the knee on
        one class), the tail's causes and where TTFT went."""
        info, sc, rows, seen = st.info, self.scenario, sample.joined(), bucket.rows_seen
        if sc.load.probes is not None:
            probe = [c == PROBE_CLASS for c in rows.cols[_CLASS]]
            probes = rows.take(list(compress(range(len(rows)), probe)))
            rows, seen = rows.take(list(compress(range(len(rows)), map(not_, probe)))), seen - len(probes)
            st.probes = probe_step(StepColumns(probes.columns())) if probes else None
        cols = StepColumns(rows.columns())  # kept by column as the reports came; arrays made once, shared
        if sc.workload.mix:  # each class apart, its SLO judged with the step's (and so in the verdict and exit code)
            st.classes = class_steps(cols, sc.workload.mix, seen)
            assert st.judgement is not None  # _judge set it before the rows were handed here
            st.judgement.slo.extend(class_checks(st.classes))
            if sc.load.knee_class is not None:  # the knee follows this class's requests alone
                st.judgement = dataclasses.replace(st.judgement, point=class_point(
                    cols, sc.workload.class_names.index(sc.load.knee_class), sc.load.knee_metric, index=info.index,
                    load=info.level, reliable=reliable, duration_s=duration, lag_ms=st.judgement.point.lag_ms))
        if not rows:
            return
        itl = bucket.sketches.get("itl")
        itl_p50 = itl.quantile(0.5) if itl is not None and itl.count else None
        server = st.server.summary() if st.server is not None else None
        params = TailParams(kernel_stamps=st.generator is not None and st.generator.kernel_stamps)
        st.tails = explain_rows(cols, params, waiting=st.waiting, started=info.started, itl_p50_s=itl_p50)
        st.ttft_split, st.timeline = ttft_split(cols, server), timeline(cols)
        if st.classes:  # each class's tail among its own requests, its split, tokens, cost and hang-ups
            add_rows_detail(st.classes, cols, cost=sc.cost, explain=lambda c: explain_rows(
                c, params, waiting=st.waiting, started=info.started, itl_p50_s=itl_p50))
            add_counted(st.classes, bucket.extra)

    def _cost(self, r: StepResult, bucket: Bucket, warmup: Bucket | None) -> StepCost:
        """The step's cost figures: its tokens warm-up included (all were billed), its measured throughput."""
        tokens = Tokens()
        for b in (bucket, warmup or Bucket()):
            cached = b.cache.cached_tokens
            tokens += Tokens(input=max(b.input_tokens - cached, 0), cached_input=cached, output=b.output_tokens)
        return step_cost(self.scenario.cost, index=r.index, level=r.level, tokens=tokens,  # type: ignore[arg-type]  # called only with a cost
                         output_tokens_per_s=r.throughput.output_tokens_per_s,
                         floor=floor_of([t.text for t in self.scenario.slo], r.slo))

    def _complete(self, st: StepState, now: float) -> bool:
        """The step ran its measured part to the plan's end (a step before the last one always did)."""
        info = st.info
        return info.index < len(self.states) - 1 or info.ended_why in PLAN_ENDS or \
            self.plan.step_done(info.elapsed_s(now), self.measured(info.index).requests, warmup_s=info.warmup_s)

    def stop_reason(self) -> str | None:
        """Why the plan should stop now (knee confirmed, error storm, abort_on_fail), from the judged steps."""
        judged = [(s.index, s.judgement) for s in self.states if s.judgement is not None]
        # a search ends when its bracket is within the resolution (``load/control.py``), not at the first knee; only
        # a counted step fails an SLO (an unreliable generator's latencies are its own)
        knee = KneeFinding(False) if self.scenario.load.search else self.knee
        reason = stop_reason(knee, [j.error_rate for _, j in judged],
                             [c.threshold for _, j in judged for c in j.slo
                              if c.abort_on_fail and not c.passed and j.why is None])
        if reason is not None and reason.startswith("error storm"):  # say which failures, and the likely fix
            bucket = self.measured(judged[-1][0])
            top = max(bucket.failures, key=bucket.failures.__getitem__)
            fix = hint(top, bucket.failure_samples.get(top, ""))
            reason += f" ({top_failures(bucket, 1)})" + (f"; {fix}" if fix else "")
        return reason

    def results(self, now: float) -> list[StepResult]:
        """Every step's numbers as they stand (the running step so far), with its judgement when it has one."""
        out = []
        first = next((s for s in self.states if not s.info.fleet_changed and self.measured(s.index).requests), None)
        baseline = self.measured(first.index) if first is not None else None  # agent stall is against it
        for st in self.states:
            info, bucket = st.info, self.measured(st.index)
            warmup = self.fleet.steps.get((info.index, "warmup"))
            r = step_result(info, bucket, st.generator or self.generator(), now=now, mode=self.mode, warmup=warmup)
            r.complete = self._complete(st, now)
            j = st.judgement
            if j is not None:
                r.stationary, r.slo_passed, r.slo = j.stationary, j.slo_passed, j.slo
            r.server = st.server.summary() if st.server is not None else None
            r.cancelled_slots = cancel_slots(bucket.extra.get(BUSY_KEY, 0), r.duration_s, r.server, r.cancelled)
            if self.scenario.cost is not None:
                r.cost = self._cost(r, bucket, warmup)
            r.prefix_cache = cache_view(bucket, r.server, self.scenario.endpoint.api)
            r.sessions = session_view(bucket, baseline)
            r.tail = st.tails.to_dict() if st.tails is not None else None
            if j is not None:
                r.ttft_split, r.timeline = st.ttft_split, st.timeline
                r.classes = [c.to_json() for c in st.classes] if st.classes is not None else None
                r.probes = st.probes.to_json() if st.probes is not None else None
            out.append(r)
        return out
