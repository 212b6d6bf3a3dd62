"""The simulator's server: routes, the real-time engine loop, token delivery, faults and the trace file. How the
chunks are written (several a write, held through a stall) is the front end's (``front.py``).

One asyncio loop runs everything. The engine loop plans each iteration on a schedule that does not
drift (the next iteration starts when the previous one was *planned* to end) and records how late
each delivery was, which ``GET /sim/stats`` reports next to the CPU cost per token.

With the prefix cache on, each request's KV block keys are computed when it arrives (``prefix.py``)
and ``usage`` carries ``prompt_tokens_details.cached_tokens``; with it off that field is left out.

Each finished generation request's engine stage times go to ``/metrics`` (``metrics.py``) and, with
``--timings on``, to llama.cpp's ``timings`` on its last chat/completions chunk (``chat_stream.py``).
``--close-after-p`` and ``--accept-delay-ms`` are ``http.ServerConnection``'s; the close draws have their own
seeded stream, so turning them on leaves every other draw (lengths, faults) as it was.

The server knows no framing: each request gets a *writer* (``chat_stream.ChatWriter`` and its peers)
that turns emissions into bytes — ``opening()`` when the stream starts, ``head(cached)`` before the
first emission's tokens, ``emit(index, count, finished, cached)`` per emission, ``body(created, cached)``
for a non-streaming answer, and ``malformed()``, ``long_line(size)``, ``failure(message)`` for faults.
The trace's phase times (``first_reasoning``, ``first_content``, ``first_tool_call``) come from the
request's plan (``plan.py``), whatever the framing; ``trace.py`` writes the line.

Each served model (``models.py``: ``--serve-model``, ``--lora``) has its own engine and its own engine loop, so
models do not share slots, KV cache or iterations; a request runs on the engine its ``model`` routes to, with its
adapter when it names one (whose prefix-cache keys are its own, as vLLM keys blocks by LoRA too).
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from harness.sim.anthropic import AnthropicError, parse_messages
from harness.sim.chat_stream import llama_timings
from harness.sim.embeddings import parse_embeddings
from harness.sim.engine import Engine, EngineConfig, Iteration, Sequence
from harness.sim.faults import HTTP_FAULTS, FaultConfig
from harness.sim.front import FrontEnd
from harness.sim.http import Request, ServerConnection
from harness.sim.job import Job as _Job
from harness.sim.loop_stats import LoopStats
from harness.sim.metrics import SimMetrics
from harness.sim.models import Adapter, ServedModel, deployments, model_cards, routes
from harness.sim.openai import ApiError, GenRequest, OutputPolicy, parse_request
from harness.sim.plan import Behavior
from harness.sim.responses import parse_responses
from harness.sim.trace import trace_line

__all__ = ["BODY_BYTES_PER_TOKEN", "SimConfig", "SimServer", "body_limit"]

_RESYNC_S = 0.05
"""A loop this far behind its schedule gives up catching up (the server is overloaded, not jittery)."""
CHANGED_FROM = 4
"""A changed answer (``Behavior.changed_answers_share``) differs from its 5th token (index 4) on."""


@dataclass
class SimConfig:
    """The whole simulator. ``max_waiting``, ``max_body_bytes`` (as ``--max-body-mb``), ``trace_file``, ``seed``,
    ``close_after_p`` and ``accept_delay_ms`` are ``kneecap sim`` flags, documented in their ``help`` metadata;
    ``behavior`` holds the served model's reasoning, tool-call, stream-option, embedding, timings and image flags
    (``plan.Behavior``); ``served`` and ``loras`` are ``--serve-model`` and ``--lora`` (``models.py``)."""

    engine: EngineConfig = field(default_factory=EngineConfig)
    model: str = "sim-small"
    served: tuple[ServedModel, ...] = ()
    """Base models, each on an engine of its own; empty: ``model`` alone, on ``engine``."""
    loras: tuple[Adapter, ...] = ()
    """LoRA adapters served on top of the base models."""
    policy: OutputPolicy = field(default_factory=OutputPolicy)
    faults: FaultConfig = field(default_factory=FaultConfig)
    behavior: Behavior = field(default_factory=Behavior)
    max_waiting: int | None = field(default=None, metadata={
        "help": "Answer 429 when this many requests wait [unlimited]."})
    """Beyond this many queued requests answer 429 with Retry-After (a throttled shared endpoint)."""
    max_body_bytes: int = field(default=8 << 20, metadata={
        "help": "Largest accepted request body (at least 16 bytes per token of the context window)."})
    trace_file: str | None = field(default=None, metadata={
        "help": "Write one JSON line per request with server-side times (ground truth)."})
    seed: int = field(default=0, metadata={"help": "Seed of output lengths and faults."})
    close_after_p: float = field(default=0.0, metadata={
        "help": "Close the connection after a generation response with this probability (Connection: close)."})
    accept_delay_ms: float = field(default=0.0, metadata={
        "help": "Leave a new connection's first request unread this long (a slow TLS/connection set-up)."})


BODY_BYTES_PER_TOKEN = 16
"""A prompt of the whole context window must fit: ~6.5 bytes per word-token of JSON, with room for templates."""


def body_limit(config: SimConfig) -> int:
    """The largest request body accepted: ``max_body_bytes``, or a full context window's worth when that is more
    (16 MB for the long preset's 1M tokens)."""
    return max(config.max_body_bytes, config.engine.max_model_len * BODY_BYTES_PER_TOKEN)


_KINDS = {"/v1/chat/completions": "chat", "/v1/completions": "completions", "/v1/responses": "responses",
          "/v1/messages": "messages", "/v1/embeddings": "embeddings"}
"""The generation routes and the kind of request each serves."""
_PARSERS: dict[str, Callable[..., GenRequest]] = {
    "chat": partial(parse_request, "chat"), "completions": partial(parse_request, "completions"),
    "responses": parse_responses, "messages": parse_messages, "embeddings": parse_embeddings}
_ERRORS: dict[str, type[ApiError]] = {"messages": AnthropicError}
"""The error class (so the error shape) of each kind's own refusals: faults, throttling."""


class SimServer:
    """Usage: ``await SimServer(config).serve("127.0.0.1", 0)`` returns the bound port."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        epoch = time.monotonic()
        self.engines = {name: Engine(cfg, epoch=epoch)
                        for name, cfg in deployments(config.model, config.engine, config.served).items()}
        """Each base model's engine, in flag order."""
        self.routes = routes(list(self.engines), config.loras)
        self.metrics = SimMetrics(self.engines)
        self.loop_stats = LoopStats()
        self._rng = random.Random(config.seed)
        self._asked = 0  # chat/completions requests parsed: ``--early-eos-share`` ends every 1/share-th early
        self._greedy_above = 0  # greedy ones above --changed-answers-above: every 1/share-th changes
        self._json_answers = 0  # JSON answers: every 1/share-th of them is cut (--malformed-json-share)
        self._close_rng = random.Random(f"{config.seed}/close-after")
        self._jobs: dict[int, _Job] = {}
        self._next_id = 0
        self._wakes = {name: asyncio.Event() for name in self.engines}
        self._trace = open(config.trace_file, "w", buffering=1 << 16) if config.trace_file else None  # noqa: SIM115
        self._wall_offset = time.time() - time.monotonic()
        self._server: asyncio.base_events.Server | None = None
        self._loop_tasks: list[asyncio.Task] = []
        self.front = FrontEnd(config.behavior, self._finish)

    async def serve(self, host: str, port: int) -> int:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: ServerConnection(self.handle, max_body_bytes=body_limit(self.config),
                               accept_delay_s=self.config.accept_delay_ms / 1000), host, port, backlog=2048)
        self._loop_tasks = [loop.create_task(self._engine_loop(name)) for name in self.engines]
        if self.config.behavior.front_stall_every_s:
            self._loop_tasks.append(loop.create_task(self.front.stalls()))
        return self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        for task in self._loop_tasks:
            task.cancel()
        if self._server is not None:
            self._server.close()
        if self._trace is not None:
            self._trace.close()
            self._trace = None

    # -- routing ----------------------------------------------------------------------------
    def handle(self, req: Request, conn: ServerConnection) -> None:
        routes = {"/health": ("GET", self._health), "/v1/models": ("GET", self._models),
                  "/metrics": ("GET", self._metrics), "/sim/stats": ("GET", self._stats),
                  **{path: ("POST", self._generate) for path in _KINDS}}
        route = routes.get(req.path.rstrip("/") or "/")
        try:
            if route is None:
                raise ApiError(404, f"no route {req.method} {req.path}; this server serves {', '.join(routes)}")
            if req.method != route[0]:
                raise ApiError(405, f"{req.path} takes {route[0]}, not {req.method}")
            route[1](req, conn)
        except ApiError as err:
            conn.respond(err.status, err.render(), headers=err.headers)

    def _health(self, req: Request, conn: ServerConnection) -> None:
        conn.respond(200, b"", "text/plain")

    def _models(self, req: Request, conn: ServerConnection) -> None:
        created = int(self.loop_stats.started + self._wall_offset)
        cards = model_cards({name: e.config for name, e in self.engines.items()}, self.config.loras, created)
        conn.respond(200, json.dumps({"object": "list", "data": cards}).encode())

    def _metrics(self, req: Request, conn: ServerConnection) -> None:
        conn.respond(200, self.metrics.render(), "text/plain; version=0.0.4; charset=utf-8")

    def _stats(self, req: Request, conn: ServerConnection) -> None:
        conn.respond(200, json.dumps(self.loop_stats.snapshot(self.engines)).encode())
        if "reset=1" in req.query.split("&"):
            self.loop_stats.reset()

    # -- generation -------------------------------------------------------------------------
    def _generate(self, req: Request, conn: ServerConnection) -> None:
        kind = _KINDS[req.path.rstrip("/")]
        cfg = self.config
        if cfg.close_after_p and self._close_rng.random() < cfg.close_after_p:
            conn.close_after = True  # drawn first, so a refused request's answer closes too
        error = _ERRORS.get(kind, ApiError)
        extra: dict = {"headers": req.headers} if kind == "messages" else {}
        if kind in ("chat", "completions") and cfg.policy.early_eos_share:
            n, share = self._asked, cfg.policy.early_eos_share
            self._asked += 1
            extra["early"] = math.floor((n + 1) * share) > math.floor(n * share)
        gen = _PARSERS[kind](req.body, models=list(self.routes), max_model_len=cfg.engine.max_model_len,
                             policy=cfg.policy, rng=self._rng,
                             block_size=cfg.engine.block_size if self._caching else None,
                             behavior=cfg.behavior, **extra)
        route = self.routes[gen.model]
        engine = self.engines[route.base]
        try:
            fault = cfg.faults.pick(self._rng, req.headers.get("x-kneecap-fault"))
        except ValueError as exc:
            raise error(400, str(exc)) from None
        if fault in HTTP_FAULTS:
            status = HTTP_FAULTS[fault]
            raise error(status, f"injected fault {fault}", headers={"retry-after": str(cfg.faults.retry_after_s)}
                        if status == 429 else None)
        if cfg.max_waiting is not None and len(engine.waiting) >= cfg.max_waiting:
            raise error(429, f"server busy: {len(engine.waiting)} requests waiting (limit {cfg.max_waiting})",
                        headers={"retry-after": str(cfg.faults.retry_after_s)})
        now = req.received_at or time.monotonic()  # arrival = first bytes, not when we got to parse them
        keys = gen.block_keys if route.adapter is None else [hash((route.adapter, k)) for k in gen.block_keys]
        seqs = []
        for tokens in gen.options["inputs"] if kind == "embeddings" else [gen.prompt_tokens]:
            self._next_id += 1
            seqs.append(Sequence(self._next_id, tokens, gen.output_tokens, now, block_hashes=keys,
                                 adapter=route.adapter))
        job = _Job(gen, conn, seqs[0], now, fault, engine=engine, metrics=self.metrics.model(route.base))
        job.seqs, job.pending = seqs, len(seqs)
        for seq in seqs:
            self._jobs[seq.id] = job
        # a server that does not notice a hang-up generates on for no one; the trace still says the client left
        conn.on_lost = (lambda: self._abort(job, "client_gone")) if cfg.behavior.on_hang_up == "free" else \
            (lambda: setattr(job, "gone", True))
        if gen.stream:
            conn.start_stream()
            for chunk in job.writer.opening():
                conn.send_chunk(chunk)
        for seq in seqs:
            engine.add(seq)
        self._wakes[route.base].set()

    @property
    def _caching(self) -> bool:
        """The prefix cache is on (every engine shares the flag)."""
        return next(iter(self.engines.values())).prefix_caching

    def _abort(self, job: _Job, status: str) -> None:
        for seq in job.seqs:
            job.engine.abort(seq)
        self._finish(job, status)

    def _cached_tokens(self, job: _Job) -> int | None:
        """What ``usage.prompt_tokens_details.cached_tokens`` says; None (left out) with the prefix cache off."""
        return job.seq.cached_tokens if job.engine.prefix_caching else None

    def _finish(self, job: _Job, status: str) -> None:
        if self._jobs.pop(job.seq.id, None) is None:
            return
        for seq in job.seqs[1:]:
            self._jobs.pop(seq.id, None)
        job.status = status
        now = time.monotonic()
        if status == "ok":
            job.metrics.e2e.observe(now - job.arrival)
            if job.gen.kind != "embeddings":
                job.metrics.finished(job.seq)
        if job.gone:  # generated to the end for a client that had left: the trace says it left
            job.status = "client_gone"
        if self._trace is not None:
            self._trace.write(trace_line(job, now, self._wall_offset, self._cached_tokens(job)))

    def _changes(self, gen: GenRequest, batch: int) -> bool:
        """Whether this greedy answer changes (``Behavior.changed_answers_share``): every 1/share-th greedy chat or
        completions request whose first token was made in a batch of more than ``changed_answers_above``."""
        b = self.config.behavior
        if not (b.changed_answers_share and gen.greedy and gen.kind in ("chat", "completions")
                and batch > b.changed_answers_above):
            return False
        n, self._greedy_above = self._greedy_above, self._greedy_above + 1
        return math.floor((n + 1) * b.changed_answers_share) > math.floor(n * b.changed_answers_share)

    def _cuts_json(self, gen: GenRequest) -> bool:
        """Whether this JSON answer never closes (``Behavior.malformed_json_share``): every 1/share-th chat or
        completions request that asked ``response_format`` JSON."""
        share = self.config.behavior.malformed_json_share
        if not (share and gen.json_answer and gen.kind in ("chat", "completions")):
            return False
        n, self._json_answers = self._json_answers, self._json_answers + 1
        return math.floor((n + 1) * share) > math.floor(n * share)

    async def _engine_loop(self, model: str) -> None:
        engine, wake, stats = self.engines[model], self._wakes[model], self.loop_stats
        planned = time.monotonic()
        while True:
            if engine.idle:
                wake.clear()
                await wake.wait()
                planned = time.monotonic()
            elif time.monotonic() - planned > _RESYNC_S:
                planned = time.monotonic()
            it = engine.step(planned)
            planned += it.duration_s
            delay = planned - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                await asyncio.sleep(0)  # let connections in even when behind
            stats.iteration(time.monotonic() - planned, it.duration_s)
            self._deliver(it)

    def _deliver(self, it: Iteration) -> None:
        jobs, stats = self._jobs, self.loop_stats
        for e in it.emissions:
            job = jobs.get(e.seq.id)
            if job is None:
                continue
            if job.gen.kind == "embeddings":  # prefill-only inputs: answer when the last is done
                job.pending -= 1
                if job.pending == 0:
                    job.conn.respond(200, job.writer.body(0, None))
                    self._finish(job, "ok")
                continue
            index = job.emitted
            writer = job.writer
            if index == 0 and self._changes(job.gen, len(job.engine.running)):  # the batch that made its first token
                writer.changed_from = CHANGED_FROM
            if index == 0 and self._cuts_json(job.gen):
                writer.json_cut = True
            stream = job.gen.stream
            out = []
            if stream:
                if index == 0:
                    out += writer.head(self._cached_tokens(job))
                if job.fault is not None and index <= job.fault_at < index + e.tokens and self._inject(job, out):
                    continue
            t = time.monotonic()
            if job.first is None:
                job.first = t
                job.metrics.ttft.observe(t - job.arrival)
            else:
                job.metrics.itl.observe(t - job.last)
            job.last = t
            if not job.plain:
                job.phases(index, e.tokens, t)
            elif job.first_content is None:
                job.first_content = t
            if self._trace is not None:
                job.times.append(t)
            job.emitted += e.tokens
            stats.tokens_sent += e.tokens
            if e.finished and self.config.behavior.timings == "on" and job.gen.kind in ("chat", "completions"):
                self._set_timings(job)
            if not stream:
                if e.finished:
                    job.conn.respond(200, writer.body(int(t + self._wall_offset), self._cached_tokens(job)))
                    self._finish(job, "ok")
                continue
            out += writer.emit(index, e.tokens, e.finished, self._cached_tokens(job) if e.finished else None)
            self.front.send(job, out, e.finished)

    def _set_timings(self, job: _Job) -> None:
        """llama.cpp's timings from the engine's times: prompt = prefill, predicted = first to last token."""
        seq, stages = job.seq, job.seq.stages()
        if stages is not None:
            job.writer.timings = llama_timings(  # chat/completions: a ChatWriter
                cache_n=seq.cached_tokens, prompt_n=seq.prompt_tokens - seq.cached_tokens,
                prompt_ms=stages.prefill_s * 1000, predicted_n=job.emitted, predicted_ms=stages.decode_s * 1000)

    def _inject(self, job: _Job, out: list[bytes]) -> bool:
        """Apply a mid-stream fault; True when the request ends here."""
        conn, faults = job.conn, self.config.faults
        if job.fault == "reset":
            self.front.send(job, out, False)
            conn.reset()
            self._abort(job, "reset")
            return True
        if job.fault == "no_done":
            self.front.send(job, out, False)
            conn.end_stream()
            conn.close()
            self._abort(job, "no_done")
            return True
        if job.fault == "stream_error":
            out += job.writer.failure("injected fault stream_error")
            self.front.send(job, out, False)
            conn.end_stream()
            self._abort(job, "stream_error")
            return True
        if job.fault == "malformed":
            out.append(job.writer.malformed())
        elif job.fault == "long_line":
            out.append(job.writer.long_line(faults.long_line_bytes))
        elif job.fault == "stall":
            self.front.send(job, out, False)
            out.clear()
            self.front.hold(job, faults.stall_s)
        return False
