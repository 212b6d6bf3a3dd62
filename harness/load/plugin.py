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

import logging
import os
import time
from typing import Any

import gevent
from locust.runners import MasterRunner, WorkerRunner

from harness.analysis.slo import request_meets
from harness.analysis.steps import Generator, StepInfo, step_summary
from harness.load.options import add_arguments
from harness.metrics.aggregate import Bucket, Fleet, Recorder
from harness.metrics.record import RequestRecord
from harness.metrics.sketch import Sketch
from harness.metrics.wire import decode_sketch, encode_sketch
from harness.scenario import Scenario, ScenarioError, default_scenario, load_scenario
from harness.sinks.files import JsonLinesWriter, write_json_atomic
from harness.workload.prompts import PromptBuilder
from harness.workload.sampler import RequestSampler

__all__ = ["Kneecap", "setup"]

log = logging.getLogger("kneecap")
LAG_PERIOD_S = 0.1
LOCAL_FLUSH_S = 1.0


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

    # -- configuration ----------------------------------------------------------------------
    @property
    def options(self) -> Any:
        return self.env.parsed_options

    @property
    def scenario(self) -> Scenario:
        if self._scenario is None:
            path = getattr(self.options, "scenario", "") if self.options else ""
            self._scenario = load_scenario(path) if path else default_scenario()
        return self._scenario

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
            self._scenario, self._prompts, self.recorder = None, None, None
        if self.role != "master" and not self._greenlets:
            self._greenlets.append(gevent.spawn(self._lag_monitor))
            if self.role == "local":
                self._greenlets.append(gevent.spawn(self._local_flush_loop))
        if self.role != "worker":
            self._start_run()

    def on_worker_stop(self, **_: Any) -> None:
        self.runner.send_message("kneecap_flush", self.drain())

    def on_step_message(self, environment: Any, msg: Any, **_: Any) -> None:
        self._recorder().set_step(msg.data["index"], time.perf_counter())

    # -- master side ------------------------------------------------------------------------
    def _start_run(self) -> None:
        if self.run_id:
            return
        self.run_id = getattr(self.options, "run_id", "") or time.strftime("%Y%m%d-%H%M%S")
        self.started_wall = time.time()
        if getattr(self.options, "save_requests", ""):
            self.requests_file = JsonLinesWriter(self.options.save_requests)
        users = getattr(self.options, "num_users", None) or 0
        self.begin_step(float(users))

    def begin_step(self, level: float) -> int:
        """Start a new step at ``level`` users (or req/s); workers tag their records from now on."""
        now = time.perf_counter()
        if self.steps:
            self.steps[-1].ended = now
        index = len(self.steps)
        self.steps.append(StepInfo(index, level, now, self.scenario.load.step.warmup_s, started_wall=time.time()))
        if self.role == "master":
            self.runner.send_message("kneecap_step", {"index": index})
        else:
            self._recorder().set_step(index, now)
        return index

    def merge(self, worker: str, payload: dict) -> None:
        try:
            self.fleet.merge(worker, payload)
            gen = payload.get("gen")
            if gen:
                step = payload["step"]
                self.generators.setdefault(step, Generator()).merge(decode_sketch(gen["lag"]), gen["cpu"])
        except (ValueError, KeyError, TypeError) as exc:
            log.error("kneecap: cannot merge the report of %s: %s", worker, exc)
            self.env.process_exit_code = 1
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

    def summary(self) -> dict:
        sc = self.scenario
        steps = []
        for info in self.steps:
            if info.ended is None:
                info.ended = time.perf_counter()
            bucket = self.fleet.steps.get((info.index, "measure"), Bucket())
            steps.append(step_summary(info, bucket, self.generators.get(info.index), warmup=self.fleet.steps.get(
                (info.index, "warmup"))))
        return {"schema": "kneecap.summary/1", "run_id": self.run_id, "scenario": sc.name,
                "host": self.env.host or sc.endpoint.host, "model": sc.endpoint.model,
                "started_at": self.started_wall, "ended_at": time.time(), "mode": "closed", "steps": steps,
                "workers": len(self.fleet.worker_step)}

    def finalize(self, **_: Any) -> None:
        if self.finalized or self.role == "worker" or not self.run_id:
            return
        self.finalized = True
        for g in self._greenlets:
            g.kill(block=False)
        if self.role == "local":
            self.merge("local", self.drain())
        out_dir = getattr(self.options, "results_dir", "") or self.scenario.results_dir
        path = os.path.join(out_dir, "summary.json")
        write_json_atomic(path, self.summary())
        if self.requests_file is not None:
            self.requests_file.close()
        log.info("kneecap: summary written to %s", path)


def setup(events: Any) -> None:
    """Register kneecap with a Locust ``events`` object (called once from the locustfile)."""
    events.init_command_line_parser.add_listener(add_arguments)

    def on_init(environment: Any, **_: Any) -> None:
        k = Kneecap(environment)
        environment.kneecap = k
        try:
            if k.role != "worker":  # workers get the master's options at test start
                k.scenario  # noqa: B018 - validate now: a bad scenario must stop the run before any load
        except ScenarioError as exc:
            log.error("%s", exc)
            if environment.runner is not None:
                environment.runner.quit()
            raise SystemExit(2) from None
        ev = environment.events
        ev.test_start.add_listener(k.on_test_start)
        if k.role == "worker":
            ev.report_to_master.add_listener(lambda client_id, data, **kw: data.__setitem__("kneecap", k.drain()))
            ev.test_stop.add_listener(k.on_worker_stop)
            k.runner.register_message("kneecap_step", k.on_step_message)
        elif k.role == "master":
            ev.worker_report.add_listener(k.on_worker_report)
            k.runner.register_message("kneecap_flush", k.on_flush_message)
            ev.quitting.add_listener(k.finalize)
        else:
            ev.test_stop.add_listener(k.on_local_stop)
            ev.quitting.add_listener(k.finalize)

    events.init.add_listener(on_init)
