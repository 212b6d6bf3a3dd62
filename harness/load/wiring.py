"""Wiring kneecap into Locust: options, the per-environment ``Kneecap``, and its event listeners by role."""

from __future__ import annotations

import functools
import logging
import signal
from typing import Any

import gevent
from locust import argument_parser as locust_argument_parser

from harness.load.options import add_arguments
from harness.load.plugin import Kneecap
from harness.scenario import ScenarioError
from harness.web import register as register_web

__all__ = ["setup"]

log = logging.getLogger("kneecap")


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
        if getattr(environment, "web_ui", None) is not None:
            register_web(environment, k)
        if k.role == "worker":
            ev.report_to_master.add_listener(lambda client_id, data, **kw: data.__setitem__("kneecap", k.drain()))
            ev.test_stop.add_listener(k.on_worker_stop)
            k.runner.register_message("kneecap_step", k.on_step_message)
        if k.role != "worker" and environment.shape_class is not None:
            # Locust installs its SIGTERM handler only after a headless shape run ends, so a shape run
            # would die on SIGTERM without results. Ours ends the plan; Locust then shuts down normally.
            gevent.signal_handler(signal.SIGTERM, k.interrupt)
        if k.role == "master":
            ev.worker_report.add_listener(k.on_worker_report)
            k.runner.register_message("kneecap_flush", k.on_flush_message)
            ev.quitting.add_listener(k.finalize)
        else:
            ev.test_stop.add_listener(k.on_local_stop)
            ev.quitting.add_listener(k.finalize)

    events.init.add_listener(on_init)
