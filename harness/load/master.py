"""The master side: events in, messages out. Merges the workers' reports, keeps their clocks, writes the results.

Glue only: the run's state and decisions are the pure ``analysis.ledger.Ledger`` and ``analysis.summarize``;
the steps are ``load/control.py``'s (``self.control``, their one owner); the server's /metrics is an input
(``load/scraper.py``); the live sinks are ``load/live.py``. At the end (``quitting``, after the last reports
arrived) this writes ``summary.json``; until then, every ``CHECKPOINT_EVERY_S``, the summary as it stands goes to
``checkpoint.json``, which ``kneecap run`` turns into an incomplete summary if this process dies (``outcome.py``).
The web UI reads the run through ``load/run_view.RunView`` only.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import math
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import gevent
import gevent.lock

from harness.analysis.answers import reference_lines
from harness.analysis.ledger import Ledger
from harness.analysis.results import RunSummary
from harness.analysis.steps import connection_warning
from harness.analysis.summarize import RunFacts, summarize
from harness.load.context import ScenarioSource
from harness.load.control import StepControl
from harness.load.live import Live
from harness.load.run_view import RunView
from harness.load.scraper import Scraper
from harness.metrics.clock import ClockOffset
from harness.metrics.clocks import FleetClocks
from harness.metrics.protocol import ProtocolError, Report, StepMessage
from harness.procs import large_blocks_mapped
from harness.scenario import DEFAULT_HOST
from harness.sinks.files import ANSWERS, CHECKPOINT, JsonLinesWriter, write_json_atomic, write_text_atomic

__all__ = ["CHECKPOINT_EVERY_S", "MasterSide"]

log = logging.getLogger("kneecap")
CHECKPOINT_EVERY_S = 10.0
"""How much of a run a lost master can cost: the summary as it stands is written this often, and as each step is
judged (a few ms each)."""
SWITCH_S = 0.001
"""While a step's rows are analysed beside the loop, how long either thread holds the GIL when the other waits."""


def _off_the_loop(work: Callable[[], None]) -> None:
    """``work`` (a judged step's analysis of its rows, the checkpoint's encoding and fsync) in one of gevent's native
    threads, this greenlet waiting: the GIL comes back to the loop every ``SWITCH_S`` (``sys.setswitchinterval``, 5
    ms by default: ~10 ms a turn of the loop), so reports, heartbeats and step messages go on. Inline, a
    100k-request step's analysis held the loop ~0.4 s (``benchmarks/fleet_merge.py``, ``judge_loop_ms_max``)."""
    was = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_S)
    try:
        gevent.get_hub().threadpool.apply(work)
    finally:
        sys.setswitchinterval(was)


class MasterSide:
    """Reached as ``environment.kneecap.master`` (master and local runs)."""

    def __init__(self, environment: Any, source: ScenarioSource, *, send_step: Callable[[StepMessage], None],
                 workers: Callable[[], int], before_summary: Callable[[], None] = lambda: None,
                 clock: Callable[[], float] = time.perf_counter, rebalance: Callable[[], None] = lambda: None) -> None:
        self.env = environment
        self.source = source
        self.workers = workers
        """How many workers the fleet has now (1 in local mode)."""
        self.before_summary = before_summary
        """Called once at the end, before judging: collect the last data (local: drain; master: stop workers)."""
        self.clock = clock
        """The master's step clock (tests pass a fake one)."""
        self.ledger = Ledger(source.scenario, offload=_off_the_loop)
        self._judging = gevent.lock.RLock()
        """One judging at a time: a step's analysis lets the loop run, and a second caller waits for it to end."""
        self.control = StepControl(self.ledger, open_loop=source.open_loop, send_step=send_step, workers=workers,
                                   clock=clock, start_run=self.start_run, judge=self.judge, event=self._event,
                                   rebalance=rebalance)
        self.view = RunView(self)
        self.run_id = ""
        self.started_wall = 0.0
        self.merge_errors = 0
        """Worker reports that could not be merged (e.g. another kneecap version): the run then exits 1."""
        self.requests_file: JsonLinesWriter | None = None
        self.live: Live | None = None
        self.scraper: Scraper | None = None
        self.flushed: set[str] = set()
        """Workers whose final report arrived."""
        self.clocks = FleetClocks()
        """Each worker's clock offset to this master's (``load/clock.py`` measures them)."""
        self._checkpointed = -math.inf
        self._judged = 0

    @property
    def out_dir(self) -> str:
        return self.source.option("results_dir") or self.source.scenario.results_dir

    def start_run(self) -> None:
        if self.run_id:
            return
        self.run_id = self.source.option("run_id") or time.strftime("%Y%m%d-%H%M%S")
        self.started_wall = time.time()
        if self.source.option("save_requests"):
            self.requests_file = JsonLinesWriter(self.source.option("save_requests"))
        sc = self.source.scenario
        scraper = self.scraper = Scraper(sc, self.source.options, host=self.env.host or sc.endpoint.host,
                                         ledger=self.ledger, measuring=self._measuring)
        self.live = Live(sc, self.source.options, run_id=self.run_id, out_dir=self.out_dir,
                         current=lambda: self.ledger.current, last_sample=lambda: scraper.last_sample)
        scraper.start()
        self.live.start()
        # numpy folds a large fleet's sketches (``metrics.sketch.fold_bins``) and judges the steps: loaded now (~0.1 s,
        # before the first report), not inside a report's merge with the loop held; frozen below with the rest. The
        # analysis's own modules too (numpy.ma: np.unique's first call imports it), and the native thread it runs in:
        # the first judging imported them in that thread, the loop waiting 12-22 ms (benchmarks/fleet_merge.py)
        import numpy.ma  # noqa: F401

        import harness.analysis.why.counts  # noqa: F401
        gevent.get_hub().threadpool.apply(int)
        large_blocks_mapped()  # a master's numpy temporaries: the heap grew around them (harness/procs.py)
        # What is alive now (modules, Locust, the scenario: ~60k objects) lives as long as the process: out of the
        # collector's generations, a full collection walks only what the run adds, not 35 ms of start-up objects
        # with the loop blocked (benchmarks/fleet_merge.py). Collected first: cyclic garbage frozen is never freed.
        gc.collect()
        gc.freeze()

    def _measuring(self) -> bool:
        step = self.ledger.current
        return step is not None and step.ended is None and self.clock() - step.started >= step.warmup_s

    @property
    def stop_reason(self) -> str | None:
        return self.control.stop_reason

    @property
    def finalized(self) -> bool:
        """The summary has been written (the step control's flag: fleet changes from then on are bookkeeping)."""
        return self.control.finalized

    def _event(self, kind: str, text: str, load: float | None) -> None:
        if self.live is not None:
            self.live.event(kind, text, load)

    def clock_measured(self, worker: str, offset: ClockOffset) -> None:
        """A worker's clock offset came in (at test start, when it joined, then every ``load.clock.CLOCK_EVERY_S``):
        kept for the summary, said if off or if it moved since the first."""
        notes = self.clocks.measured(worker, offset)
        if notes is None:
            log.debug("kneecap: worker %s clock not re-measured (%d round trips answered); keeping the last",
                      worker, offset.samples)
            return
        for note in notes:
            log.warning("kneecap: %s", note)
        if not notes and offset.offset_s is not None:  # one line for the fleet at the end, not one per worker here
            log.debug("kneecap: worker %s clock offset %+.3f ms (±%.3f, rtt %.3f ms)", worker, offset.offset_s * 1000,
                      offset.bound_s * 1000, offset.rtt_s * 1000)  # type: ignore[operator]  # measured together

    def flush(self, worker: str, payload: Any) -> None:
        """A worker's final report (it stopped): merged like the others; ``finalize`` checks every worker sent one."""
        self.merge(worker, payload)
        self.flushed.add(worker)

    def merge(self, worker: str, payload: Any) -> None:
        """One worker report off the wire: a payload that cannot be read is counted, logged, and fails the run."""
        try:
            report = payload if isinstance(payload, Report) else Report.from_wire(payload, worker)
        except ProtocolError as exc:
            log.error("kneecap: cannot merge the report of %s: %s", worker, exc)
            self.merge_errors += 1
            return
        self.ledger.merge(worker, report, self.clock())
        if self.live is not None:
            self.live.observe(worker, report)
        if self.requests_file is not None:
            for rec in report.records:
                self.requests_file.write(rec)

    def judge(self) -> None:
        with self._judging:
            self.ledger.judge(self.workers(), final=self.finalized)
            judged = sum(st.judgement is not None for st in self.ledger.states)
            if not self.finalized and self.run_id and (judged > self._judged or
                                                       self.clock() - self._checkpointed >= CHECKPOINT_EVERY_S):
                self._checkpointed, self._judged = self.clock(), judged
                self._checkpoint()

    def _checkpoint(self) -> None:
        """The summary as it stands, for ``kneecap run`` to keep if this process dies before writing its own."""
        try:
            doc = self.summary().to_json()  # on the loop: the ledger does not change meanwhile
            # its encoding and fsync beside the loop (~4 ms at 1,000 workers, the most of a judging the loop waited)
            _off_the_loop(lambda: write_json_atomic(os.path.join(self.out_dir, CHECKPOINT), doc))
        except (OSError, ValueError) as exc:  # the run goes on: only a lost master would miss it
            log.warning("kneecap: checkpoint not written: %s", exc)

    def summary(self, *, sink_failed: bool = False) -> RunSummary:
        """The run's results as they stand (judged on the data complete so far)."""
        sc, ledger = self.source.scenario, self.ledger
        facts = RunFacts(run_id=self.run_id, host=self.env.host or sc.endpoint.host or DEFAULT_HOST,
                         started_at=self.started_wall, ended_at=time.time(), stop_reason=self.stop_reason,
                         merge_errors=self.merge_errors, sink_failed=sink_failed, clocks=self.clocks.to_json(),
                         clock_warnings=self.clocks.warnings(ledger.reporters))
        return summarize(ledger, ledger.results(self.clock()), facts)

    def finalize(self, **_: Any) -> None:
        """At ``quitting``: collect the last data, judge every step, write summary.json, set the exit code."""
        if self.finalized or not self.run_id:
            return
        self.before_summary()
        # a worker past the plan had delivered every step's data: a late final flush adds no step's
        for worker in sorted(self.ledger.behind_the_plan() - self.flushed):  # died, or unreachable, at the end
            self.control.fleet_change("lost", worker)
        self.control.finalized = True
        self.ledger.end_step(self.clock())
        self.judge()
        summary = self.summary()
        note = connection_warning(summary.steps)
        if note:
            log.warning("kneecap: %s", note)
        measured = self.clocks.max_offset_ms()
        if measured and not summary.clock_warnings:
            log.info("kneecap: worker clocks: %d within %.2f ms of the master's", *measured)
        if summary.cost is not None:
            log.info("kneecap: %s", summary.cost.line)
        if self.scraper is not None:
            self.scraper.stop()
        if self.live is not None:
            try:
                summary.influx = self.live.close(summary.steps, summary.knee, summary.knee_reason, self.stop_reason)
            except Exception:  # the sink must never cost the results: log it, fail the run, write the summary
                log.exception("kneecap: closing the live sinks failed")
                summary = self.summary(sink_failed=True)
        path = os.path.join(self.out_dir, "summary.json")
        write_json_atomic(path, summary.to_json())
        if lines := reference_lines(self.ledger.fleet.steps.values()):  # verify: for a later run to compare with
            write_text_atomic(os.path.join(self.out_dir, ANSWERS), "".join(f"{line}\n" for line in lines))
        with contextlib.suppress(OSError):  # the summary supersedes it
            os.remove(os.path.join(self.out_dir, CHECKPOINT))
        self.env.process_exit_code = summary.exit_code
        if self.requests_file is not None:
            self.requests_file.close()
        log.info("kneecap: summary written to %s", path)
