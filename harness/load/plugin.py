"""kneecap inside Locust: one ``Kneecap`` object per environment, wired through Locust's own events.

- Workers (and local mode) put each request in a ``Recorder`` bucket of the current step and ship
  ``drain()`` deltas in ``report_to_master`` under ``data["kneecap"]`` (every 3 s), plus a final
  flush message when they stop, so nothing is lost when the run ends.
- The master merges deltas into a ``Fleet``; it owns the steps and tells workers when one begins
  (message ``kneecap_step``). Local mode runs the same drain → merge code on a timer.
- A loop-lag monitor on every worker measures how late a 100 ms sleep wakes up: the validity signal
  for the generator (Locust's 90% CPU warning comes too late).
- At the end (``quitting``, after the last reports arrived) the master writes ``summary.json``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from dataclasses import dataclass
from typing import Any

import gevent
from locust.runners import STATE_INIT, STATE_STOPPED, MasterRunner, WorkerRunner

from harness.analysis.judge import evaluate_slo, is_stationary, step_point
from harness.analysis.knee import Knee, KneeParams, find_knee
from harness.analysis.plan import StepPlan
from harness.analysis.server import explain
from harness.analysis.slo import request_meets
from harness.analysis.steps import Generator, StepInfo, step_summary
from harness.analysis.verdict import exit_code, slo_verdict
from harness.errors import KneecapError
from harness.load.live import Live
from harness.metrics.aggregate import Bucket, Fleet, Recorder
from harness.metrics.record import RequestRecord
from harness.metrics.sketch import Sketch
from harness.metrics.wire import decode_sketch, encode_sketch
from harness.scenario import DEFAULT_HOST, Scenario, ScenarioError, default_scenario, load_scenario
from harness.sinks.files import JsonLinesWriter, write_json_atomic
from harness.workload.prompts import PromptBuilder
from harness.workload.sampler import RequestSampler

__all__ = ["Kneecap", "OpenStep"]

log = logging.getLogger("kneecap")
LAG_PERIOD_S = 0.1
LOCAL_FLUSH_S = 1.0


@dataclass(frozen=True)
class OpenStep:
    """Open loop: the step a worker's arrival driver follows (rate of the whole fleet, this worker's share)."""

    index: int
    rate: float
    t0: float
    stride: int


class Kneecap:
    """Per-environment state. Reached from users as ``environment.kneecap``."""

    def __init__(self, environment: Any) -> None:
        self.env = environment
        self.runner = environment.runner
        self.role = ("master" if isinstance(self.runner, MasterRunner)
                     else "worker" if isinstance(self.runner, WorkerRunner) else "local")
        self._scenario: Scenario | None = None
        self._prompts: PromptBuilder | None = None
        self._samplers = 0
        self.recorder: Recorder | None = None
        self.fleet = Fleet()
        self.generators: dict[int, Generator] = {}
        self.steps: list[StepInfo] = []
        self.lag = Sketch()
        self.records: list[dict] = []
        self.requests_file: JsonLinesWriter | None = None
        self.run_id = ""
        self.started_wall = 0.0
        self.finalized = False
        self._greenlets: list[gevent.Greenlet] = []
        self.halves: dict[int, list[tuple[float, Sketch]]] = {}
        self.knee = Knee(False, reason="not judged yet")
        self.verdicts: dict[int, dict] = {}
        self.stop_reason: str | None = None
        self.last_progress = 0.0
        self.open_step: OpenStep | None = None
        self.merge_errors = 0
        """Worker reports that could not be merged (e.g. another kneecap version): the run then exits 1."""
        self.live: Live | None = None
        self.worker_gen: dict[str, dict] = {}
        """Each worker's latest generator health, for the live window."""

    # -- configuration ----------------------------------------------------------------------
    @property
    def options(self) -> Any:
        return self.env.parsed_options

    @property
    def scenario(self) -> Scenario:
        if self._scenario is None:
            path = getattr(self.options, "scenario", "") if self.options else ""
            raw = getattr(self.options, "overrides", "") if self.options else ""
            try:
                overrides = json.loads(raw) if raw else {}
            except ValueError as exc:
                raise ScenarioError("--overrides", [f"not a JSON object: {exc}"]) from None
            if not isinstance(overrides, dict):
                raise ScenarioError("--overrides", ["expected a JSON object of dotted keys"])
            self._scenario = load_scenario(path, overrides) if path else default_scenario(overrides)
        return self._scenario

    @property
    def open_loop(self) -> bool:
        return self.scenario.load.mode == "open_staircase"

    @property
    def plan(self) -> StepPlan:
        load = self.scenario.load
        st = load.step
        if load.mode == "constant":
            return StepPlan.constant(load.start, load.duration_s, st.warmup_s)
        return StepPlan.staircase(load.start, load.step_by, load.max, warmup_s=st.warmup_s,
                                  min_duration_s=st.min_duration_s, min_requests=st.min_requests,
                                  max_duration_s=st.max_duration_s)

    @property
    def out_dir(self) -> str:
        return getattr(self.options, "results_dir", "") or self.scenario.results_dir

    @property
    def worker_index(self) -> int:
        return getattr(self.runner, "worker_index", 0) or 0

    def sampler(self) -> RequestSampler:
        """A request sampler for one user: its own seeded stream, the worker's shared prompt calibration."""
        w = self.scenario.workload
        api = self.scenario.endpoint.api
        if self._prompts is None:
            self._prompts = PromptBuilder(api=api, shared_prefix_tokens=w.shared_prefix_tokens,
                                          unique=w.unique_prompts, seed=w.seed)
        self._samplers += 1
        return RequestSampler(input_tokens=w.input_tokens, output_tokens=w.output_tokens, joint=w.joint, api=api,
                              seed=w.seed, worker=self.worker_index * 100_000 + self._samplers, prompts=self._prompts)

    def _recorder(self) -> Recorder:
        if self.recorder is None:
            self.recorder = Recorder(warmup_s=self.scenario.load.step.warmup_s,
                                     good=request_meets(self.scenario.slo))
        return self.recorder

    # -- worker side ------------------------------------------------------------------------
    def record(self, rec: RequestRecord, now: float) -> None:
        step, phase = self._recorder().add(rec, now)
        if self.options is not None and getattr(self.options, "save_requests", ""):
            d = rec.to_dict()
            d.pop("chunk_times")
            d.update(step=step, phase=phase, worker=self.worker_index)
            self.records.append(d)

    def drain(self) -> dict:
        payload = self._recorder().drain()
        payload["gen"] = {"lag": encode_sketch(self.lag), "cpu": float(getattr(self.runner, "current_cpu_usage", 0))}
        self.lag = Sketch()
        if self.records:
            payload["records"], self.records = self.records, []
        return payload

    def _lag_monitor(self) -> None:
        while True:
            t = time.perf_counter()
            gevent.sleep(LAG_PERIOD_S)
            self.lag.add(max(0.0, time.perf_counter() - t - LAG_PERIOD_S))

    def on_test_start(self, **_: Any) -> None:
        if self.role == "worker":  # the master's --scenario and friends arrived with the spawn message
            self._scenario, self._prompts = None, None
            if self.recorder is not None:  # keep the step the master already announced
                self.recorder.warmup_s = self.scenario.load.step.warmup_s
                self.recorder.good = request_meets(self.scenario.slo)
        if self.role != "master" and not self._greenlets:
            self._greenlets.append(gevent.spawn(self._lag_monitor))
            if self.role == "local":
                self._greenlets.append(gevent.spawn(self._local_flush_loop))
        if self.role != "worker":
            self.start_run()

    def on_worker_stop(self, **_: Any) -> None:
        self.runner.send_message("kneecap_flush", self.drain())

    def on_step_message(self, environment: Any, msg: Any, **_: Any) -> None:
        self._set_step(msg.data, time.perf_counter())

    def _set_step(self, data: dict, now: float) -> None:
        self._recorder().set_step(data["index"], now)
        if data.get("end"):
            self.open_step = None
        elif data.get("rate"):
            self.open_step = OpenStep(data["index"], data["rate"], now, data["stride"])

    def arrival(self, dropped: bool) -> None:
        self._recorder().arrival(time.perf_counter(), dropped)

    # -- master side ------------------------------------------------------------------------
    def start_run(self) -> None:
        if self.run_id:
            return
        self.run_id = getattr(self.options, "run_id", "") or time.strftime("%Y%m%d-%H%M%S")
        self.started_wall = time.time()
        if getattr(self.options, "save_requests", ""):
            self.requests_file = JsonLinesWriter(self.options.save_requests)
        self.live = Live(self, self.out_dir)
        self.live.start()
        if self.env.shape_class is None:  # plain -u/-r/-t run: one step; a shape begins its own steps
            self.begin_step(float(getattr(self.options, "num_users", None) or 0))

    def begin_step(self, level: float) -> int:
        """Start a new step at ``level`` users (or req/s); workers tag their records from now on."""
        now = time.perf_counter()
        if self.steps:
            self.steps[-1].ended = now
        index = len(self.steps)
        self.steps.append(StepInfo(index, level, now, self.scenario.load.step.warmup_s, started_wall=time.time()))
        data = {"index": index}
        if self.open_loop:
            data.update(rate=level, stride=self.workers())
        if self.live is not None:
            self.live.event("step", f"step {index}: {level:g} {'req/s' if self.open_loop else 'users'}", level)
        if self.role == "master":
            self.runner.send_message("kneecap_step", data)
        else:
            self._set_step(data, now)
        return index

    def end_plan(self) -> None:
        """Close the last step now: workers move to a step past the plan (their records from here on are
        not part of any step) and open-loop drivers stop dispatching."""
        if self.steps and self.steps[-1].ended is None:
            self.steps[-1].ended = time.perf_counter()
            data = {"index": len(self.steps), "end": True}
            if self.role == "master":
                self.runner.send_message("kneecap_step", data)
            else:
                self._set_step(data, time.perf_counter())

    def merge(self, worker: str, payload: dict) -> None:
        try:
            metric = self.scenario.load.knee_metric
            for step, phase, delta in self.fleet.merge(worker, payload):
                if phase == "measure" and metric in delta.sketches:  # for the step's stationarity check
                    self.halves.setdefault(step, []).append((time.perf_counter(), delta.sketches[metric]))
            gen = payload.get("gen")
            if gen:
                self.worker_gen[worker] = gen
                step = payload["step"]
                self.generators.setdefault(step, Generator()).merge(decode_sketch(gen["lag"]), gen["cpu"])
        except (KneecapError, ValueError, KeyError, TypeError) as exc:  # incl. SketchMismatch (a version skew)
            log.error("kneecap: cannot merge the report of %s: %s", worker, exc)
            self.merge_errors += 1
            return
        if self.requests_file is not None:
            for rec in payload.get("records", ()):
                self.requests_file.write(rec)

    def on_worker_report(self, client_id: str, data: dict, **_: Any) -> None:
        if "kneecap" in data:
            self.merge(client_id, data["kneecap"])

    def on_flush_message(self, environment: Any, msg: Any, **_: Any) -> None:
        self.merge(msg.node_id, msg.data)

    def _local_flush_loop(self) -> None:
        while True:
            gevent.sleep(LOCAL_FLUSH_S)
            self.merge("local", self.drain())

    def on_local_stop(self, **_: Any) -> None:
        self.merge("local", self.drain())

    def interrupt(self) -> None:
        log.info("kneecap: SIGTERM: ending the plan, writing partial results")
        self.stop_reason = "interrupted"
        self.end_plan()

    # -- steps, judging, the knee ---------------------------------------------------------------
    def _complete(self, info: StepInfo) -> bool:
        if info.ended is None:
            return False
        return self.role == "local" or self.finalized or self.fleet.step_complete(info.index, self.workers())

    def workers(self) -> int:
        return max(1, getattr(self.runner, "worker_count", 1) or 1)

    def judge(self) -> None:
        """(Re)judge every step whose data is complete and update the knee."""
        metric = self.scenario.load.knee_metric
        points = []
        for info in self.steps:
            if not self._complete(info):
                break
            bucket = self.fleet.steps.get((info.index, "measure"), Bucket())
            gen = (self.generators.get(info.index) or Generator()).summary()
            duration = max(info.ended - info.started - info.warmup_s, 1e-9)  # type: ignore[operator]
            if bucket.requests == 0:
                continue
            points.append(step_point(info.index, info.level, bucket, metric, gen["reliable"], duration))
            mid = info.started + info.warmup_s + duration / 2
            first, second = Sketch(), Sketch()
            for t, sk in self.halves.get(info.index, ()):
                (first if t < mid else second).merge(sk)
            slo = evaluate_slo(self.scenario.slo, bucket)
            self.verdicts[info.index] = {
                "slo": slo, "slo_passed": all(r["passed"] for r in slo) if slo else None,
                "stationary": is_stationary(first, second),
                "error_rate": sum(bucket.failures.values()) / bucket.requests}
        load = self.scenario.load
        self.knee = find_knee(points, KneeParams(confirm_steps=load.confirm_steps))

    def summary(self) -> dict:
        sc = self.scenario
        mode = "open" if self.open_loop else "closed"
        level_key = "rate_rps" if self.open_loop else "users"
        steps = []
        now = time.perf_counter()
        for info in self.steps:
            if info.ended is None:  # the running step, so far (not closed here: the run goes on)
                info = dataclasses.replace(info, ended=now)
            bucket = self.fleet.steps.get((info.index, "measure"), Bucket())
            entry = step_summary(info, bucket, self.generators.get(info.index), mode=mode,
                                 warmup=self.fleet.steps.get((info.index, "warmup")))
            v = self.verdicts.get(info.index, {})
            complete = info.index < len(self.steps) - 1 or self.plan.step_done(info.ended - info.started,
                                                                                 bucket.requests)
            entry.update(complete=complete, stationary=v.get("stationary"), slo_passed=v.get("slo_passed"),
                         slo=v.get("slo", []))
            server = self.live.server.get(info.index) if self.live else None
            if server is not None:
                entry["server"] = server.summary()
            steps.append(entry)
        knee = dict(vars(self.knee))
        knee[level_key] = knee.pop("load")
        if self.knee.found:
            by_index = {s["index"]: s for s in steps}
            after = next((s for s in steps if s["index"] > self.knee.step_index), None)
            why = explain(by_index[self.knee.step_index].get("server"), after.get("server") if after else None)
            if why:
                knee["reason"] = f"{knee['reason']}; {why}"
        knee["metric"] = sc.load.knee_metric
        slo = slo_verdict(steps, sc.slo, self.knee.step_index if self.knee.found else None, level_key)
        return {"schema": "kneecap.summary/1", "run_id": self.run_id, "scenario": sc.name,
                "host": self.env.host or sc.endpoint.host or DEFAULT_HOST, "model": sc.endpoint.model,
                "started_at": self.started_wall, "ended_at": time.time(), "mode": mode,
                "stop_reason": self.stop_reason, "workers": len(self.fleet.worker_step), "steps": steps,
                "knee": knee, "slo": slo, "exit_code": exit_code(steps, slo)}

    def summary_live(self) -> dict:
        """The summary as it stands now (web UI), judged on the data complete so far."""
        if self.steps:
            self.judge()
        return self.summary()

    def finalize(self, **_: Any) -> None:
        if self.finalized or self.role == "worker" or not self.run_id:
            return
        self.finalized = True
        for g in self._greenlets:
            g.kill(block=False)
        if self.role == "master" and self.runner.state not in (STATE_INIT, STATE_STOPPED):
            self.runner.stop()  # e.g. SIGTERM mid-run: collect the workers' final flushes before writing
        if self.role == "local":
            self.merge("local", self.drain())
        if self.steps and self.steps[-1].ended is None:
            self.steps[-1].ended = time.perf_counter()
        self.judge()  # every step is complete now: the workers' final flushes have arrived
        path = os.path.join(self.out_dir, "summary.json")
        summary = self.summary()
        if self.live is not None:
            try:
                influx = self.live.close(summary["steps"], "rate_rps" if self.open_loop else "users", summary["knee"])
            except Exception:  # the sink must never cost the results: log it, fail the run, write the summary
                log.exception("kneecap: closing the live sinks failed")
                summary["exit_code"] = 1
                influx = None
            if influx is not None:
                summary["influx"] = influx
        if self.merge_errors:
            summary["merge_errors"] = self.merge_errors
            summary["exit_code"] = 1
        write_json_atomic(path, summary)
        self.env.process_exit_code = summary["exit_code"]
        if self.requests_file is not None:
            self.requests_file.close()
        log.info("kneecap: summary written to %s", path)
