"""Wiring kneecap into Locust: options, the role objects of this process, and their event listeners.

A worker process gets a ``WorkerSide``, the master a ``MasterSide``, a local run both (joined directly:
step messages become calls, reports are drained on a timer). Messages and payloads: ``metrics/protocol.py``.
"""

from __future__ import annotations

import functools
import logging
import signal
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import gevent
from locust import argument_parser as locust_argument_parser
from locust.runners import (
    STATE_INIT,
    STATE_RUNNING,
    STATE_SPAWNING,
    STATE_STOPPED,
    MasterRunner,
    WorkerRunner,
)

from harness import exitcodes
from harness.load.clock import ClockProbe, register_worker
from harness.load.context import ScenarioSource
from harness.load.locust_stats import start_trimming
from harness.load.locust_waits import end_on_sigterm, end_the_plan_first, quit_when_workers_have
from harness.load.master_watch import watch_master
from harness.load.options import add_arguments, web_bind_problem
from harness.load.soak import start_soak_sampler
from harness.load.worker import WorkerSide
from harness.metrics.protocol import FLUSH_MESSAGE, HELLO_MESSAGE, REPORT_KEY, REPORT_MESSAGE, STEP_MESSAGE, StepMessage
from harness.scenario import ScenarioError, url_problem

if TYPE_CHECKING:
    from harness.load.master import MasterSide

__all__ = ["LOCAL_FLUSH_S", "Kneecap", "setup"]

log = logging.getLogger("kneecap")
LOCAL_FLUSH_S = 1.0


@dataclass
class Kneecap:
    """``environment.kneecap``: this process's scenario and role objects. A worker process has a ``worker``
    side, a master a ``master`` side, a local (single-process) run both. Users use only the worker side; the
    shape and the web UI only the master side."""

    source: ScenarioSource
    worker: WorkerSide | None = None
    master: MasterSide | None = None


def _cache_locust_default_args() -> None:
    """Locust's worker handles each spawn message with ``k not in default_args_dict()`` inside a dict
    comprehension, building a whole argument parser per option: a 100-200 ms stall of every worker at
    every step change (seen with gevent's blocking monitor), which delays requests and trips the loop-lag
    check. The defaults never change within a process, so compute them once."""
    if not hasattr(locust_argument_parser.default_args_dict, "cache_info"):
        locust_argument_parser.default_args_dict = functools.lru_cache(maxsize=1)(
            locust_argument_parser.default_args_dict)


def setup(events: Any) -> None:
    """Register kneecap with a Locust ``events`` object (called once from the locustfile)."""
    _cache_locust_default_args()
    events.init_command_line_parser.add_listener(add_arguments)
    events.init.add_listener(_on_init)


def _on_init(environment: Any, **_: Any) -> None:
    runner = environment.runner
    source = ScenarioSource(environment)
    k = environment.kneecap = Kneecap(source)
    if isinstance(runner, WorkerRunner):  # the scenario comes with the master's options, at test start
        _worker(environment, k)
        return
    try:
        source.scenario  # noqa: B018 - validate now: a bad scenario must stop the run before any load
        if environment.host and (problem := url_problem(environment.host)):
            raise ScenarioError("--host", [problem])
        opts = environment.parsed_options
        if getattr(environment, "web_ui", None) is not None and opts is not None and (problem := web_bind_problem(
                opts.web_host, web_login=opts.web_login, web_insecure=opts.web_insecure)):
            raise ScenarioError("--web-host", [problem])
    except ScenarioError as exc:
        log.error("%s", exc)
        if runner is not None:
            runner.quit()
        raise SystemExit(exitcodes.USAGE) from None
    if isinstance(runner, MasterRunner):
        _master(environment, k)
    else:
        _local(environment, k)
    m = k.master
    assert m is not None
    if environment.shape_class is not None:
        # Locust installs its SIGTERM handler only after a headless shape run ends, so a shape run
        # would die on SIGTERM without results. Ours ends the plan; Locust then shuts down normally.
        gevent.signal_handler(signal.SIGTERM, functools.partial(end_on_sigterm, runner, m.control.interrupt))
    if getattr(environment, "web_ui", None) is not None:
        from harness.web import register as register_web  # Flask blueprint, charts: only with the web UI

        register_web(environment, m.view)
    environment.events.quitting.add_listener(m.finalize)
    if isinstance(runner, MasterRunner):
        quit_when_workers_have(runner)


def _start_run(environment: Any, m: MasterSide) -> None:
    if environment.shape_class is None:  # plain -u/-r/-t run: one step; a shape begins its own steps
        m.control.begin_plain(float(m.source.option("num_users", None) or 0))
    else:
        m.start_run()


def _worker(environment: Any, k: Kneecap) -> None:
    w = k.worker = WorkerSide(environment, k.source)
    runner, ev = environment.runner, environment.events

    def on_test_start(**_: Any) -> None:
        k.source.reload()
        w.on_test_start()

    ev.test_start.add_listener(on_test_start)
    register_worker(runner, w.clock_measured)
    ev.report_to_master.add_listener(lambda client_id, data, **kw: data.__setitem__(REPORT_KEY,
                                                                                    w.report().to_wire()))
    def on_test_stop(**_: Any) -> None:
        w.stop_probes()  # the users are stopped: the probes go with them
        runner.send_message(FLUSH_MESSAGE, w.report().to_wire())

    ev.test_stop.add_listener(on_test_stop)
    marks: list[gevent.Greenlet] = []

    def report_in(delay_s: float) -> None:
        gevent.sleep(delay_s)
        runner.send_message(REPORT_MESSAGE, w.report().to_wire())

    def on_step(environment: Any, msg: Any, **_: Any) -> None:
        step = StepMessage.from_wire(msg.data)
        w.on_step(step, time.perf_counter())
        runner.send_message(REPORT_MESSAGE, w.report().to_wire())  # the step before is complete at the master now
        for g in marks:
            g.kill(block=False)
        marks[:] = [gevent.spawn(report_in, s) for s in w.step_marks(step)]  # its data in at its time marks

    runner.register_message(STEP_MESSAGE, on_step)
    watch_master(environment, runner)
    start_soak_sampler("worker")
    runner.send_message(HELLO_MESSAGE)  # now the answer can be heard: the step under way, if one is (protocol.py)


def _master(environment: Any, k: Kneecap) -> None:
    from harness.load.fleet import FleetWatch  # here: a worker needs neither the master's sinks nor its ledger
    from harness.load.master import MasterSide

    runner, ev = environment.runner, environment.events

    def collect_last_reports() -> None:
        if runner.state not in (STATE_INIT, STATE_STOPPED):
            runner.stop()  # e.g. SIGTERM mid-run: collect the workers' final flushes before writing

    def rebalance() -> None:
        if runner.state in (STATE_RUNNING, STATE_SPAWNING) and runner.worker_count > 0:
            runner.start(runner.target_user_count, runner.spawn_rate)

    m = k.master = MasterSide(environment, k.source, send_step=lambda msg: runner.send_message(STEP_MESSAGE,
                                                                                               msg.to_wire()),
                              workers=lambda: max(1, runner.worker_count or 1), before_summary=collect_last_reports,
                              rebalance=rebalance)

    probe = ClockProbe(runner, m.clock_measured)
    start_trimming(environment)
    start_soak_sampler("master", lambda: {"steps": len(m.ledger.states), "buckets": len(m.ledger.fleet.steps),
                                          "rows": sum(len(b.rows) for b in m.ledger.fleet.steps.values())})

    def on_test_start(**_: Any) -> None:
        _start_run(environment, m)
        FleetWatch(runner, m.control, measure=probe.measure, plain=environment.shape_class is None).start()

    def on_hello(msg: Any, **_: Any) -> None:
        # A worker's handlers are up (a message sent as it connects would be dropped): tell it the step under way.
        # Its users wait for this, so its first records are that step's; the watch marks the step the join changed.
        if m.control.step_message is not None:
            runner.send_message(STEP_MESSAGE, m.control.step_message.to_wire(), client_id=msg.node_id)

    ev.test_start.add_listener(on_test_start)
    if environment.shape_class is None:
        end_the_plan_first(environment, m)
    runner.register_message(HELLO_MESSAGE, on_hello)
    def merged(merge: Any, worker: str, payload: Any) -> None:
        merge(worker, payload)
        # Locust's client_listener takes queued messages without yielding: let the loop run after each report, so
        # the burst at a step boundary (every worker at once) holds it one report at a time (~0.3 ms at 1,000
        # workers), not the whole round (~0.3 s; benchmarks/fleet_merge.py).
        gevent.sleep(0)

    ev.worker_report.add_listener(lambda client_id, data, **kw: merged(m.merge, client_id, data[REPORT_KEY])
                                  if REPORT_KEY in data else None)
    runner.register_message(FLUSH_MESSAGE, lambda environment, msg, **kw: merged(m.flush, msg.node_id, msg.data))
    runner.register_message(REPORT_MESSAGE, lambda environment, msg, **kw: merged(m.merge, msg.node_id, msg.data))


def _local(environment: Any, k: Kneecap) -> None:
    """One process: the worker side's reports go straight to the master side, every second and at the end."""
    from harness.load.master import MasterSide

    w = k.worker = WorkerSide(environment, k.source)
    flusher: list[gevent.Greenlet] = []

    def drain() -> None:
        m.merge("local", w.report())

    def before_summary() -> None:
        for g in flusher:
            g.kill(block=False)
        w.stop()
        m.flush("local", w.report())

    def send_step(msg: StepMessage) -> None:
        w.on_step(msg, time.perf_counter())
        drain()  # as a worker's REPORT_MESSAGE: the step before is complete at once

    m = k.master = MasterSide(environment, k.source, send_step=send_step, workers=lambda: 1,
                              before_summary=before_summary)
    start_trimming(environment)

    def flush_loop() -> None:
        while True:
            gevent.sleep(LOCAL_FLUSH_S)
            drain()

    def on_test_start(**_: Any) -> None:
        w.on_test_start()
        if not flusher:
            flusher.append(gevent.spawn(flush_loop))
        _start_run(environment, m)

    environment.events.test_start.add_listener(on_test_start)
    environment.events.test_stop.add_listener(lambda **_: drain())
