"""``LLMUser``: a closed-loop Locust user that streams OpenAI requests and times every chunk.

The HTTP request shows once in Locust's stats with response_time = E2E (so request counts and RPS are
real); TTFT/TPOT/ITL appear as ``LLM`` entries logged straight into their stats entries, which
does not touch the Aggregated row. They are a convenience view (Locust keeps ~2 significant
digits); the sketches behind ``summary.json`` are the truth.
"""

from __future__ import annotations

import os
import time

import gevent
from gevent.pool import Group
from locust import FastHttpUser, constant, task

from harness.client.openai import build_body, request_head
from harness.client.transport import Connection, stream_request
from harness.errors import KneecapError
from harness.metrics.record import ERROR_CLASSES, RequestRecord
from harness.scenario import DEFAULT_HOST
from harness.workload.arrivals import arrival_times
from harness.workload.sampler import worker_rng

__all__ = ["LLMUser"]


class StreamFailure(KneecapError):
    """How a failed request appears in Locust's failure table: one row per error class."""


class LLMUser(FastHttpUser):
    """Runs the scenario's workload: closed loop (one request at a time), or in open loop one arrival driver
    per worker. The scenario comes from ``--scenario`` (see harness.load.context)."""

    abstract = False
    wait_time = constant(0)
    host = None  # --host, else the scenario's endpoint.host, else the simulator's default address

    def on_start(self) -> None:
        self.kneecap = self.environment.kneecap.worker  # set up by harness.load.wiring at init
        scenario = self.kneecap.scenario
        ep = scenario.endpoint
        base = self.environment.host or ep.host or DEFAULT_HOST
        self.conn = Connection(base)
        self.path = f"{self.conn.base_path}/v1/{'chat/completions' if ep.api == 'chat' else 'completions'}"
        self.api_key = os.environ.get(ep.api_key_env) if ep.api_key_env else None
        self.timeouts = ep.timeouts
        self.sampler = self.kneecap.sampler()

        self.base = base
        self.in_flight = Group()

    def on_stop(self) -> None:
        self.in_flight.kill(block=False)
        self.conn.close()

    @task
    def generate(self) -> None:
        if self.kneecap.open_loop:
            self._drive()
        else:
            self._request(self.conn)

    def _drive(self) -> None:
        """Open loop: follow the fleet's arrival schedule (this worker's share); one greenlet per request,
        so a slow server delays responses, never arrivals. Runs until the user is stopped."""
        k, load = self.kneecap, self.kneecap.scenario.load
        idle: list[Connection] = []
        while True:
            step = k.open_step
            if step is None:
                gevent.sleep(0.02)
                continue
            rng = worker_rng(k.scenario.workload.seed, step.index, "arrivals")  # the same on every worker
            for t in arrival_times(load.arrival, step.rate, rng, cv=load.burstiness_cv, gaps=load.trace_gaps,
                                   stride=step.stride, offset=k.worker_index % step.stride):
                due = step.t0 + t
                while (wait := due - time.perf_counter()) > 0 and k.open_step is step:
                    gevent.sleep(min(wait, 0.05))  # wake up to notice a step change
                if k.open_step is not step:
                    break
                full = len(self.in_flight) >= load.max_in_flight
                k.arrival(dropped=full)
                if not full:
                    self.in_flight.spawn(self._pooled, idle, due)

    def _pooled(self, idle: list[Connection], due: float) -> None:
        conn = idle.pop() if idle else Connection(self.base)
        try:
            self._request(conn, due)
        finally:
            idle.append(conn)

    def _request(self, conn: Connection, intended_start: float | None = None) -> None:
        ep = self.kneecap.scenario.endpoint
        plan = self.sampler.next()
        body = build_body(ep.api, ep.model, plan.prompt, plan.max_tokens, ignore_eos=ep.ignore_eos,
                          extra=ep.extra_body)
        head = request_head("POST", self.path, conn.host_header, len(body), self.api_key)
        rec = stream_request(conn, self.path, head, body, self.timeouts, intended_start=intended_start)
        rec.prompt_tokens_target = plan.prompt.target_tokens
        rec.max_tokens = plan.max_tokens
        if rec.prompt_tokens:
            self.sampler.prompts.observe(plan.prompt, rec.prompt_tokens)
        self._report(ep.api, rec)
        self.kneecap.record(rec, time.perf_counter())

    def _report(self, name: str, rec: RequestRecord) -> None:
        env = self.environment
        e2e_ms = (rec.e2e_s or 0.0) * 1000
        exc = None if rec.ok else StreamFailure(f"{rec.error}: {ERROR_CLASSES.get(rec.error or '', '')}")
        env.events.request.fire(request_type="POST", name=name, response_time=e2e_ms, response_length=0,
                                exception=exc, context={})
        if rec.ok and env.stats is not None:
            if rec.ttft_s is not None:
                env.stats.get("ttft", "LLM").log(rec.ttft_s * 1000, 0)
            tpot = rec.tpot_s
            if tpot is not None:
                env.stats.get("tpot", "LLM").log(tpot * 1000, 0)
