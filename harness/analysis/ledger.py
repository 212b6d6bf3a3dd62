"""The master's record of a run: its steps, the fleet's merged data, the judging and the results. Pure.

Time is passed in (the master's ``perf_counter`` and wall clock): the tests drive a ``Ledger`` on plain
data, with decoded worker reports, and no Locust. The Locust side (``load/master.py``) only feeds it
reports and asks it what to do.

Judging: a step is judged once its data is complete — every worker has reported from a later step
(``Fleet.step_complete``), or the run ended and the last flushes arrived. A complete step's data can no
longer change, so its judgement (knee point, SLO checks, stationarity) is computed once and kept; only the
knee is re-found over the kept points at each ``judge``.

Fleet changes: a step during which a worker was lost or joined did not run at the load it names, so it is
not judged; the master re-runs its level (``load/master.py``), which gives it a fresh warm-up.

Which p99: the knee and the SLOs rank failed requests as misses (``analysis/judge.py``); the summary calls
that figure ``p99_slo`` next to ``p99``, the successes' p99 (the two agree when nothing failed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from harness.analysis.decompose import ttft_split
from harness.analysis.failures import hint, top_failures
from harness.analysis.judge import evaluate_slo, is_stationary, step_point
from harness.analysis.knee import Knee, KneeParams, StepPoint, find_knee
from harness.analysis.plan import StepPlan, stop_reason
from harness.analysis.pricing import StepCost, Tokens, floor_of, step_cost
from harness.analysis.results import FleetEvent, SloCheck, StepResult
from harness.analysis.sessions import cache_view, session_view
from harness.analysis.steps import Generator, StepInfo, step_result
from harness.analysis.tail import StepTails
from harness.analysis.tail_rows import columns, explain_rows, gc_paused
from harness.metrics.aggregate import Bucket, Fleet
from harness.metrics.protocol import Report
from harness.metrics.sketch import Sketch

if TYPE_CHECKING:
    from harness.scenario import Scenario

__all__ = ["Judgement", "Ledger"]


@dataclass(frozen=True)
class Judgement:
    """A complete step, judged."""

    point: StepPoint
    slo: list[SloCheck]
    stationary: bool | None
    error_rate: float

    @property
    def slo_passed(self) -> bool | None:
        return all(c.passed for c in self.slo) if self.slo else None


@dataclass
class Ledger:
    """Steps on the master's clock and the fleet's data per step; see the module docstring."""

    scenario: Scenario
    steps: list[StepInfo] = field(default_factory=list)
    fleet: Fleet = field(default_factory=Fleet)
    generators: dict[int, Generator] = field(default_factory=dict)
    judged: dict[int, Judgement] = field(default_factory=dict)
    tails: dict[int, StepTails] = field(default_factory=dict)
    """Tail attribution of each judged step with request rows, worked out once when it is judged."""
    _columns: dict[int, dict[str, list]] = field(default_factory=dict)
    """A judged step's rows by column, until its TTFT split has used them too."""
    splits: dict[int, dict | None] = field(default_factory=dict)
    """Each judged step's TTFT split, worked out once (its rows and server summary are final by then)."""
    waiting: dict[int, list[tuple[float, float]]] = field(default_factory=dict)
    """Per step, the server's waiting queue as scraped: (time on the step clock, requests waiting)."""
    knee: Knee = field(default_factory=lambda: Knee(False, reason="not judged yet"))
    fleet_events: list[FleetEvent] = field(default_factory=list)
    _halves: dict[int, list[tuple[float, Sketch]]] = field(default_factory=dict)
    reporters: set[str] = field(default_factory=set)
    """Every worker that ever reported."""
    _last_report: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.plan = StepPlan.for_load(self.scenario.load)
        self.mode = "open" if self.scenario.load.mode == "open_staircase" else "closed"

    @property
    def current(self) -> StepInfo | None:
        return self.steps[-1] if self.steps else None

    def begin_step(self, level: float, now: float, wall: float, level_index: int = -1) -> StepInfo:
        """Close the running step (if any) and start the next one at ``level`` (the plan's ``level_index``-th)."""
        self.end_step(now)
        info = StepInfo(len(self.steps), level, now, self.scenario.load.step.warmup_s, started_wall=wall,
                        level_index=level_index)
        self.steps.append(info)
        return info

    def fleet_change(self, kind: str, worker: str, now: float, wall: float, *, noticed_after_s: float) -> FleetEvent:
        """A worker ``lost`` or ``joined``, noticed at ``now``. A lost worker was last alive at its last report
        (or, if it never reported, up to ``noticed_after_s`` ago): every step running since then is marked and
        loses its judgement, and no longer waits for that worker's reports (what it had not delivered is gone)."""
        since = now
        if kind == "lost":
            self.fleet.forget(worker)
            since = self._last_report.pop(worker, now - noticed_after_s)
        hit = [s for s in self.steps if s.started <= now and (s.ended is None or s.ended >= since)]
        for s in hit:
            (s.workers_lost if kind == "lost" else s.workers_joined).append(worker)
            self.judged.pop(s.index, None)
        event = FleetEvent(kind=kind, worker=worker, at=wall, steps=[s.index for s in hit])
        self.fleet_events.append(event)
        return event

    def end_step(self, now: float) -> bool:
        """Close the running step; False when there is none."""
        if not self.steps or self.steps[-1].ended is not None:
            return False
        self.steps[-1].ended = now
        return True

    def merge(self, worker: str, report: Report, now: float) -> None:
        """Add one worker's report (already decoded, see ``metrics/protocol.py``)."""
        self.fleet.merge(worker, report.step, report.buckets)
        self._last_report[worker] = now
        self.reporters.add(worker)
        metric = self.scenario.load.knee_metric
        for index, phase, delta in report.buckets:
            if phase == "measure" and metric in delta.sketches:  # for the step's stationarity check
                self._halves.setdefault(index, []).append((now, delta.sketches[metric]))
        gen = report.gen
        if gen is not None:
            self.generators.setdefault(report.step, Generator()).merge(gen.lag, gen.cpu,
                                                                       gen.gc[0] if gen.gc else None)
            for index, seconds in gen.cpu_s.items():  # CPU is charged to the step it was spent in
                self.generators.setdefault(index, Generator()).add_cpu(seconds)

    def measured(self, index: int) -> Bucket:
        return self.fleet.bucket(index, "measure")

    def judge(self, workers: int, *, final: bool = False) -> Knee:
        """Judge the steps whose data became complete (all ended steps when ``final``); re-find the knee."""
        for info in self.steps:
            if info.index in self.judged:
                continue
            if info.ended is None or not (final or self.fleet.step_complete(info.index, workers)):
                break
            bucket = self.measured(info.index)
            if bucket.requests and not info.fleet_changed:
                self.judged[info.index] = self._judge(info, bucket)
                if bucket.rows:
                    with gc_paused():
                        cols = columns(bucket.rows)  # once for both: ~50 ms at 100k requests
                        self.tails[info.index] = explain_rows(cols, waiting=self.waiting.get(info.index, ()),
                                                              started=info.started)
                    self._columns[info.index] = cols
        self.knee = find_knee([j.point for _, j in sorted(self.judged.items())],
                              KneeParams(confirm_steps=self.scenario.load.confirm_steps),
                              label=f"{self.scenario.load.knee_metric} p99_slo")
        return self.knee

    def _judge(self, info: StepInfo, bucket: Bucket) -> Judgement:
        metric = self.scenario.load.knee_metric
        duration = info.measured_s(info.ended)  # type: ignore[arg-type]
        reliable = (self.generators.get(info.index) or Generator()).health().reliable
        mid = info.started + info.warmup_s + duration / 2
        first, second = Sketch(), Sketch()
        for t, sk in self._halves.pop(info.index, ()):
            (first if t < mid else second).merge(sk)
        return Judgement(step_point(info.index, info.level, bucket, metric, reliable, duration),
                         evaluate_slo(self.scenario.slo, bucket), is_stationary(first, second),
                         sum(bucket.failures.values()) / bucket.requests)

    def _cost(self, r: StepResult, bucket: Bucket, warmup: Bucket | None) -> StepCost:
        """The step's cost figures: its tokens warm-up included (all were billed), its measured throughput."""
        tokens = Tokens()
        for b in (bucket, warmup or Bucket()):
            tokens += Tokens(input=max(b.input_tokens - b.cache[2], 0), cached_input=b.cache[2], output=b.output_tokens)
        return step_cost(self.scenario.cost, index=r.index, level=r.level, tokens=tokens,  # type: ignore[arg-type]
                         output_tokens_per_s=r.throughput.output_tokens_per_s,
                         floor=floor_of([t.text for t in self.scenario.slo], r.slo))

    def stop_reason(self) -> str | None:
        """Why the plan should stop now (knee confirmed, error storm, abort_on_fail), from the judged steps."""
        judged = sorted(self.judged.items())
        reason = stop_reason(self.knee, [j.error_rate for _, j in judged],
                             [c.threshold for _, j in judged for c in j.slo if c.abort_on_fail and not c.passed])
        if reason is not None and reason.startswith("error storm"):  # say which failures, and the likely fix
            bucket = self.measured(judged[-1][0])
            top = max(bucket.failures, key=bucket.failures.__getitem__)
            fix = hint(top, bucket.failure_samples.get(top, ""))
            reason += f" ({top_failures(bucket, 1)})" + (f"; {fix}" if fix else "")
        return reason

    def results(self, now: float, server: dict[int, dict] | None = None) -> list[StepResult]:
        """Every step's numbers as they stand (the running step so far), with its judgement when it has one."""
        out = []
        first = next((i for i in self.steps if not i.fleet_changed and self.measured(i.index).requests), None)
        baseline = self.measured(first.index) if first is not None else None  # agent stall is against it
        for info in self.steps:
            bucket = self.measured(info.index)
            r = step_result(info, bucket, self.generators.get(info.index), now=now, mode=self.mode,
                            warmup=self.fleet.steps.get((info.index, "warmup")))
            r.complete = info.index < len(self.steps) - 1 or self.plan.step_done(info.elapsed_s(now), bucket.requests)
            j = self.judged.get(info.index)
            if j is not None:
                r.stationary, r.slo_passed, r.slo = j.stationary, j.slo_passed, j.slo
            r.server = (server or {}).get(info.index)
            if self.scenario.cost is not None:
                r.cost = self._cost(r, bucket, self.fleet.steps.get((info.index, "warmup")))
            r.prefix_cache = cache_view(bucket, r.server, self.scenario.endpoint.api)
            r.sessions = session_view(bucket, baseline)
            tails = self.tails.get(info.index)
            r.tail = tails.to_dict() if tails is not None else None
            if info.index in self.judged and (bucket.rows or info.index in self.splits):
                if info.index not in self.splits:
                    cols = self._columns.pop(info.index, None)
                    with gc_paused():
                        self.splits[info.index] = ttft_split(cols if cols is not None else bucket.rows, r.server)
                    bucket.rows = []  # both answers are kept: ~30 MB a 100k-request step is free again
                r.ttft_split = self.splits[info.index]
            out.append(r)
        return out
