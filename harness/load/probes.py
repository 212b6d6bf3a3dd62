"""Probe requests (``load.probes``): tiny requests at a fixed rate beside the load, outside the users' loop.

vLLM's benchmark has ``--probe-request-rate`` for this: a one-token answer to a short prompt measures the wait a
new request meets at the load the users make (queue and prefill scheduling), apart from the users' own lengths,
so it is a clean interference signal at every step. The fleet's rate is shared out: each of N workers sends every
N-th probe (its offset its worker index), one greenlet per probe, so a slow server delays answers, never
arrivals. Probes never count in the step's metrics: their records go to the rows only, class ``PROBE_CLASS``
(``analysis.mix.classes`` reports them as ``steps[].probes``).
"""

from __future__ import annotations

import random
import time
from typing import Any, Protocol

import gevent
from gevent.event import Event
from gevent.pool import Group

from harness.client.apis import exchange
from harness.client.openai import request_head
from harness.client.target import Target
from harness.client.transport import Connection, stream_request
from harness.metrics.record import RequestRecord
from harness.metrics.rows import PROBE_CLASS
from harness.scenario import Scenario
from harness.spec.load import ProbeSpec
from harness.workload.prompts import PromptBuilder

__all__ = ["ProbeDriver", "ProbeHost", "start_probes"]


class ProbeHost(Protocol):
    """What the probes need of their worker (``load/worker.py``'s ``WorkerSide``)."""

    told: Event
    fleet_size: int
    env: Any
    source: Any

    @property
    def scenario(self) -> Scenario: ...

    @property
    def worker_index(self) -> int: ...

    @property
    def target(self) -> Target: ...

    def record_probe(self, rec: RequestRecord, now: float) -> None: ...


def start_probes(worker: ProbeHost) -> ProbeDriver | None:
    """The worker's share of ``load.probes``, started; None when the scenario has none."""
    spec = worker.scenario.load.probes
    if spec is None:
        return None
    driver = ProbeDriver(worker, spec, worker.target)
    driver.start()
    return driver


class ProbeDriver:
    """One worker's share of the probes, from the first step message to ``stop()``."""

    def __init__(self, worker: ProbeHost, spec: ProbeSpec, target: Target) -> None:
        self.worker, self.target = worker, target
        self.spec = spec
        ep = worker.scenario.endpoint
        # a builder of their own: probes never move the users' prompt calibration
        self.prompts = PromptBuilder(api=ep.api, seed=worker.scenario.workload.seed)
        self.rng = random.Random(f"kneecap/{worker.scenario.workload.seed}/{worker.worker_index}/probes")
        self.ep = ep
        self.api_key, self.headers = target.api_key, target.headers
        self.group = Group()
        self.idle: list[Connection] = []
        self._loop: gevent.Greenlet | None = None

    def start(self) -> None:
        self._loop = gevent.spawn(self._run)

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.kill(block=False)
        self.group.kill(block=False)
        for conn in self.idle:
            conn.close()

    def _run(self) -> None:
        w = self.worker
        w.told.wait()  # the first step message: the fleet's size comes with it
        k = 0
        t0 = time.perf_counter()
        while True:
            stride = max(1, w.fleet_size)
            due = t0 + (k * stride + w.worker_index % stride) / self.spec.rate
            if (wait := due - time.perf_counter()) > 0:
                gevent.sleep(wait)
            k += 1
            self.group.spawn(self._probe)

    def _probe(self) -> None:
        conn = self.idle.pop() if self.idle else self.target.connection()
        start = time.perf_counter()
        try:
            rec = self._send(conn)
        except Exception as exc:  # a bug here must cost one failed probe, not the driver
            conn.close()
            rec = RequestRecord(start=start, error="client_error", error_detail=f"{type(exc).__name__}: {exc}")
        finally:
            self.idle.append(conn)
        rec.class_index, rec.max_tokens = PROBE_CLASS, self.spec.max_tokens
        self.worker.record_probe(rec, time.perf_counter())

    def _send(self, conn: Connection) -> RequestRecord:
        spec, ep = self.spec, self.ep
        prompt = self.prompts.build(spec.input_tokens, self.rng)
        ex = exchange(ep, [prompt], spec.max_tokens, continuous_usage=False, keep_text=False,
                      api_key=self.api_key)
        path = f"{conn.base_path}{ep.path}"
        head = request_head("POST", path, conn.host_header, len(ex.body), self.api_key, {**ex.headers, **self.headers},
                            bearer=ex.bearer)
        limits = ep.timeouts.for_prompt(spec.input_tokens)
        return stream_request(conn, path, head, ex.body, limits, tracker=ex.tracker, body_parser=ex.parser)
