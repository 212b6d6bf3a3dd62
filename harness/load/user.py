"""``LLMUser``: a closed-loop Locust user that streams OpenAI requests and times every chunk.

With ``workload.sessions`` each task is one whole session (``harness.workload.sessions``): turn by turn, the
think time slept between turns, parallel sub-calls on spare connections; the calls keep their streamed text
(``keep_text``) so the next turn resends it; the ended session goes to the recorder. Open loop: each arrival
starts a session (``max_in_flight`` caps live sessions).

The HTTP request shows once in Locust's stats with response_time = E2E (so request counts and RPS are
real); TTFT/TPOT/ITL appear as ``LLM`` entries logged straight into their stats entries, which
does not touch the Aggregated row. They are a convenience view (Locust keeps ~2 significant
digits); the sketches behind ``summary.json`` are the truth.

Faults: an exception in the request path (sampling, building the request, the transport, calibrating the
prompts) is a failed request of class ``client_error`` with the exception's type and message, recorded
like any other; its traceback is logged once per type and worker process, and the user goes on. In
closed loop each user then waits as ``harness.client.backoff`` says (a 429's Retry-After, exponential
backoff after connection failures) in Locust's ``wait_time``, which a stopping user leaves at once.
Open-loop arrivals are never delayed.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from typing import Any

import gevent
from gevent.pool import Group
from locust import FastHttpUser, task

from harness.client.apis import exchange
from harness.client.backoff import Backoff
from harness.client.openai import request_head
from harness.client.transport import Connection, stream_request
from harness.endpoint import header_values
from harness.load.session_turns import SessionTask, SessionTurns
from harness.load.user_report import RequestReports
from harness.metrics.record import RequestRecord
from harness.scenario import Endpoint
from harness.spec.timeouts import SCALED, Timeouts
from harness.workload.arrivals import arrival_times
from harness.workload.prompts import Prompt
from harness.workload.sampler import MixSampler, PlannedRequest, worker_rng
from harness.workload.sessions import Call, SessionSampler

__all__ = ["LLMUser"]

log = logging.getLogger("kneecap")


def _prompt_tokens(prompts: list[Prompt]) -> int:
    """About how long the prompts are, for the timeouts: the target (or words); a session's later turn, which has
    neither, by its characters (~6 per word-token of the corpus)."""
    n = sum(max(p.words, p.target_tokens) for p in prompts)
    if n == 0:
        p = prompts[0]
        n = (len(p.text) if p.text is not None else sum(len(m.get("content") or "") for m in p.messages or ())) // 6
    return n


class LLMUser(SessionTurns, RequestReports, FastHttpUser):
    """Runs the scenario's workload: closed loop (one request at a time), or in open loop one arrival driver
    per worker. The scenario comes from ``--scenario`` (see harness.load.context)."""

    abstract = False
    host = None  # --host, else the scenario's endpoint.host, else the simulator's default address
    _wait_s = 0.0

    def on_start(self) -> None:
        self.kneecap = self.environment.kneecap.worker  # set up by harness.load.wiring at init
        self.kneecap.wait_for_step()
        scenario = self.kneecap.scenario
        ep = scenario.endpoint
        self.target = target = self.kneecap.target  # --host or endpoint.host, TLS, key, headers: the worker's
        self.conn = target.connection()
        self.path = f"{self.conn.base_path}{ep.path}"
        self.api_key, self.headers = target.api_key, target.headers
        classes = [scenario.class_endpoint(c) for c in scenario.workload.mix]
        self.classes = [(e, header_values(e.headers, os.environ)) for e in classes]
        """``workload.mix``: each class's endpoint and headers, by class index."""
        t = ep.timeouts
        # A non-streaming answer sends nothing until it is whole: only the connect and total deadlines apply.
        self.timeouts = t if ep.stream and ep.api != "embeddings" else \
            Timeouts(connect_s=t.connect_s, ttft_s=t.total_s, idle_s=t.total_s, total_s=t.total_s,
                     scale_with_prompt=SCALED if "total_s" in t.scale_with_prompt else frozenset())
        """The endpoint's limits; each request's are ``for_prompt`` of them (longer for long prompts)."""
        self.sessions = self.kneecap.samplers.session_sampler()
        self.sampler = None if self.sessions else self.kneecap.samplers.sampler()
        self.spare: list[Connection] = []
        """Connections for a session turn's parallel sub-calls (and open-loop sessions), kept for reuse."""
        self.backoff = Backoff(honor_retry_after=ep.retry_after == "honor")
        self.in_flight = Group()

    def on_stop(self) -> None:
        self.kneecap.samplers.release(getattr(self, "sampler", None))
        self.in_flight.kill(block=False)
        for conn in (self.conn, *self.spare):
            conn.close()

    def wait_time(self) -> float:
        """Locust's pause after each task: the backoff the last closed-loop request asked for, else none. Locust
        kills a user stopped while it waits, so a long Retry-After never holds up the end of a step or run."""
        wait, self._wait_s = self._wait_s, 0.0
        return wait

    @task
    def generate(self) -> None:
        if self.kneecap.open_loop:
            self._drive()
        else:
            self._wait_s = self.backoff.after(self._task(self.conn))

    def _task(self, conn: Connection, due: float | None = None) -> RequestRecord:
        """One task: a whole session (``workload.sessions``, or a class of sessions the mix deals), else a request;
        ``due``: its intended start (open loop)."""
        if self.sessions is not None:
            return self._session(conn, due, self._session_task(None, self.sessions))
        mix = self.sampler
        if not (isinstance(mix, MixSampler) and mix.has_sessions):
            return self._request(conn, due)
        cls = mix.pick()
        if mix.sessions[cls] is None:
            return self._request(conn, due, cls=cls)
        return self._session(conn, due, self._session_task(cls, mix.sessions[cls]))

    def _session_task(self, cls: int | None, sessions: SessionSampler) -> SessionTask:
        """A new session's sampler, class and (``endpoint.adapters``) its one LoRA adapter."""
        ep = self.kneecap.scenario.endpoint if cls is None else self.classes[cls][0]
        return SessionTask(sessions, cls, None if ep.adapters is None else self.kneecap.samplers.adapter(cls))

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
                due = step.t0 + t  # t0: this worker's own clock when the step message came; no other host's clock
                while (wait := due - time.perf_counter()) > 0 and k.open_step is step:
                    gevent.sleep(min(wait, 0.05))  # wake up to notice a step change
                if k.open_step is not step:
                    break
                full = len(self.in_flight) >= load.max_in_flight
                k.arrival(dropped=full)
                if not full:
                    self.in_flight.spawn(self._pooled, idle, due)

    def _pooled(self, idle: list[Connection], due: float) -> None:
        conn = idle.pop() if idle else self.target.connection()
        try:
            self._task(conn, due)  # open loop: an arrival is a request, or a new session
        finally:
            idle.append(conn)

    def _request(self, conn: Connection, intended_start: float | None = None, call: Call | None = None,
                 session: int | None = None, task: SessionTask | None = None, cls: int | None = None) -> RequestRecord:
        """One request (a session's ``call`` of ``task``, else the next of the sampler, of class ``cls`` when the mix
        dealt it), recorded whatever happens in it."""
        k = self.kneecap
        ep = k.scenario.endpoint
        shape = k.next_shape() if call is None else None  # load.warmup_shapes: the run's first requests
        start = time.perf_counter()
        k.in_flight += 1
        in_flight = k.in_flight
        try:
            rec = self._exchange(ep, conn, intended_start, call, task, cls, shape)
        except Exception as exc:  # a bug here must cost one failed request, not the user
            rec = self._client_error(exc, conn, start, intended_start)
        finally:
            k.in_flight -= 1
        rec.in_flight, rec.warmup_shape = in_flight, shape is not None
        if call is not None:
            rec.session, rec.turn, rec.call = session, call.turn, call.call
            # a session's call comes with its task
            rec.turn_bucket = task.sessions.bucket(call.turn)  # type: ignore[union-attr]
        self._report(ep.api, rec)
        k.record(rec, time.perf_counter())
        return rec

    def _exchange(self, ep: Endpoint, conn: Connection, intended_start: float | None, call: Call | None,
                  task: SessionTask | None, cls: int | None, shape: PlannedRequest | None) -> RequestRecord:
        hangups: dict[str, Any] = {}
        headers, images, sampler, ask, ideal = self.headers, None, self.sampler, None, None
        if call is None:
            assert sampler is not None  # no call: a user with a sampler (not sessions)
            ask = None if shape or not self.kneecap.verify else self.kneecap.verify.pick(sampler.next)
            if ask is not None:  # verify: a reference prompt, asked greedily (below), compared once answered
                prompts, max_tokens, cls = [ask.prompt], ask.max_tokens, ask.cls
            else:
                plan = shape or (sampler.next() if cls is None else sampler.next_of(cls))
                prompts, max_tokens, cls, images = [plan.prompt], plan.max_tokens, plan.class_index, plan.images
                ideal = plan.ideal_cached
                hangups = {"cancel_after_s": plan.cancel_after_s, "patience_s": plan.patience_s}
            batch = self.kneecap.scenario.workload.batch
            if batch is not None:  # embeddings: a batch of inputs, each of the workload's input length
                extra = sampler.batch(batch) - 1
                prompts += [sampler.next().prompt for _ in range(extra)]
        else:
            prompts, max_tokens, ideal = [Prompt(call.messages, call.text, 0, call.target_tokens)], call.max_tokens, \
                call.ideal_cached
            cls = task.cls if task is not None else None
        if cls is not None:
            ep, headers = self.classes[cls]
        if ask is not None:
            ep = ask.endpoint(ep)
        # a LoRA adapter of the model: the worker's picker says which (a session keeps the one it drew)
        adapter = task.adapter if task is not None else None if ep.adapters is None else \
            self.kneecap.samplers.adapter(cls)
        if adapter is not None:
            ep = dataclasses.replace(ep, model=adapter)
        k = self.kneecap
        while True:
            asked = k.continuous_usage
            ex = exchange(ep, prompts, max_tokens, continuous_usage=asked, keep_text=bool(call or ask),
                          api_key=self.api_key)
            head = request_head("POST", self.path, conn.host_header, len(ex.body), self.api_key,
                                {**ex.headers, **headers}, bearer=ex.bearer)
            limits = self.timeouts.for_prompt(_prompt_tokens(prompts))
            lag = k.generator.last_lag_s
            rec = stream_request(conn, self.path, head, ex.body, limits, intended_start=intended_start,
                                 tracker=ex.tracker, body_parser=ex.parser, **hangups)
            rec.loop_lag_s = lag
            rec.class_index, rec.model = cls, adapter
            rec.images, rec.image_pixels = images or (None, None)
            rec.ideal_cached_tokens = ideal
            if not (asked and k.refused_continuous_usage(rec)):
                break  # else once more without it: the refusal was our question, not the endpoint's failure
        rec.prompt_tokens_target = prompts[0].target_tokens or None
        rec.max_tokens = max_tokens
        rec.exact_length = ex.exact_length
        if len(prompts) > 1 or ep.api == "embeddings":
            rec.inputs = len(prompts)
        if ask is not None:
            k.verify.judge(ask, rec)
        elif rec.prompt_tokens and sampler is not None and call is None and not rec.images:  # images skew the fit
            words = sum(p.words for p in prompts)
            sampler.builder(cls).observe(Prompt(None, None, words, 0), rec.prompt_tokens)
        return rec
