"""A run's results as the master holds them while it runs: each step's figures and the run's, turned into
summary.json (schema ``kneecap.summary/3``, docs/results.md) only at the edge (``to_json``; ``sinks/files.py``
writes it). Their blocks are the summary model's own types (``harness.summary``), encoded as they are; the blocks
still built as dicts are the analyses' (server, cache, tail, ...), decoded into those types by every reader. Pure.

Load levels are users (closed loop) or requests/s (open loop); ``level_key`` names the JSON key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from msgspec import UNSET, structs, to_builtins

from harness.analysis.counted import not_counted
from harness.analysis.knee import KneeFinding
from harness.summary import (
    SCHEMA,
    Answers,
    CancelSlots,
    Delivery,
    FleetEvent,
    Generator,
    PrefixCache,
    RunCost,
    Server,
    Sessions,
    SloCheck,
    StepCost,
    Stream,
    Throughput,
    Timeline,
    level_key,
)

__all__ = ["RunSummary", "SloVerdict", "StepResult"]


@dataclass(kw_only=True)
class StepResult:
    index: int
    mode: str
    level: float
    duration_s: float
    """The measured part (after warm-up), on the master's clock."""
    warmup_s: float
    requests: int
    ok: int
    failures: dict[str, int]
    failure_samples: dict[str, str] = field(default_factory=dict)
    """One detail per failure class, e.g. {"connect_error": "cannot connect to 127.0.0.1:9: ..."}."""
    warmup_requests: int
    warmup_shapes: int = 0
    """Of the warm-up's requests, the shape warm-up's (``load.warmup_shapes``: the run's first step only)."""
    arrivals_per_s: float | None = None
    """Open loop only, like ``dropped_arrivals``."""
    dropped_arrivals: int | None = None
    throughput: Throughput
    latency_ms: dict[str, dict]
    """Per metric: count, mean, p50…p999, max, p50_ci/p95_ci/p99_ci over successful requests; SLO metrics add
    p99_slo."""
    tokens_per_s_per_user: dict
    output_tokens_counted: int
    prompt_length_error: float | None
    generator: Generator
    fleet_changed: bool = False
    """A worker was lost or joined during the step: not judged (see ``analysis/ledger.py``)."""
    workers_lost: list[str] = field(default_factory=list)
    workers_joined: list[str] = field(default_factory=list)
    complete: bool = False
    stationary: bool | None = None
    slo_passed: bool | None = None
    slo: list[SloCheck] = field(default_factory=list)
    server: Server | None = None
    prefix_cache: PrefixCache | None = None
    """Client- and server-side prefix-cache hit shares with their sources (``analysis.sessions.cache_view``)."""
    sessions: Sessions | None = None
    """Sessions workloads: ended sessions, their figures, TTFT by turn, agent stall (``analysis.sessions``)."""
    stream: Stream | None = None
    """When it applies: requests with exact per-chunk token counts and their tokens-per-chunk distribution,
    requests whose per-token ITL is unknown (several tokens per chunk, not counted), reasoning tokens counted
    from chunks, embeddings inputs/s (``analysis.steps``)."""
    answers: Answers | None = None
    """Whether answers were as long as asked (``analysis.steps.answer_lengths``); None when none asked for an
    exact length."""
    verify: dict | None = None
    """``verify:``: answers compared with their references, how many changed (``analysis.answers``); None when none
    was compared."""
    delivery: Delivery | None = None
    """How the chunks came: one a receive, several a write (the server's), or held on the path
    (``analysis.delivery``); None without streams."""
    ttft_split: dict | None = None
    """Where TTFT goes: client parts (headers, headers → first token, connect) and the server's queue and prefill
    where it says, each with its source (``analysis.why.decompose``); judged steps only."""
    timeline: Timeline | None = None
    """Its requests over time, sampled (``analysis.timeline``); judged steps with request rows only."""
    tail: dict | None = None
    """Why the tail is slow: per latency metric and p99/p95, the request feature that separates the tail from the
    rest, in words (``analysis.why.attribute``); judged steps with request rows only."""
    adapters: dict[str, int] = field(default_factory=dict)
    """``endpoint.adapters``: measured requests per LoRA adapter (the ones that got any); empty without adapters."""
    probes: dict | None = None
    """``load.probes``: the probe requests apart (``analysis.mix.classes.probe_step``: requests, failures, latencies);
    judged steps only."""
    classes: list[dict] | None = None
    """``workload.mix``: each class's share, latencies, failures and SLO (``analysis.mix.classes``); judged steps with
    request rows only."""
    new_connections: int = 0
    """Measured requests that opened a connection (TCP, and TLS for https) inside their own time."""
    new_connection_share: float | None = None
    """``new_connections`` / ``requests``; None without requests. Near 1 past the first requests: the server
    closes the connection after each response, and every request's TTFT includes a connect."""
    cancelled: int = 0
    """Measured requests the user hung up on (``workload.cancel``, ``workload.patience``): outside ``requests``."""
    cancelled_by: dict[str, int] = field(default_factory=dict)
    """``cancelled`` by reason: "cancel", "patience"."""
    cancelled_output_tokens: int = 0
    """Output tokens the cancelled requests received before the hang-up."""
    cancelled_slots: CancelSlots | None = None
    """With hang-ups and the server's running gauge: did the server free their slots (``analysis.cancel_slots``)."""
    cost: StepCost | None = None
    """With the scenario's ``cost:``: tokens, test cost, per 1M output tokens, break-even
    (``analysis.cost.pricing``)."""
    started_at: float | None = None
    """Wall clock (epoch s, the master's) when the step began; its measured part starts ``warmup_s`` later."""
    ended: str | None = None
    """Why the step ended (``StepInfo.ended_why``): "min", "precision", "max_duration", "stopped", ...; None while
    it runs."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"index": self.index, level_key(self.mode): self.level, "duration_s": self.duration_s,
                               "warmup_s": self.warmup_s, "requests": self.requests, "ok": self.ok,
                               "failures": dict(self.failures), "failure_samples": dict(self.failure_samples),
                               "warmup_requests": self.warmup_requests}
        if self.warmup_shapes:
            out["warmup_shapes"] = self.warmup_shapes
        if self.mode == "open":
            out.update(arrivals_per_s=self.arrivals_per_s, dropped_arrivals=self.dropped_arrivals)
        out.update(throughput=to_builtins(self.throughput), latency_ms=self.latency_ms,
                   tokens_per_s_per_user=self.tokens_per_s_per_user, output_tokens_counted=self.output_tokens_counted,
                   prompt_length_error=self.prompt_length_error, generator=to_builtins(self.generator),
                   fleet_changed=self.fleet_changed, workers_lost=list(self.workers_lost),
                   workers_joined=list(self.workers_joined), complete=self.complete)
        why = not_counted(self)
        out.update(counted=why is None, why=why, stationary=self.stationary, slo_passed=self.slo_passed,
                   slo=to_builtins(self.slo), new_connections=self.new_connections,
                   new_connection_share=self.new_connection_share)
        if self.cancelled:
            out.update(cancelled=self.cancelled, cancelled_share=round(self.cancelled / (self.requests +
                       self.cancelled), 4), cancelled_by=dict(self.cancelled_by),
                       cancelled_output_tokens=self.cancelled_output_tokens)
            if self.cancelled_slots is not None:
                out["cancelled_slots"] = to_builtins(self.cancelled_slots)
        if self.server is not None:
            out["server"] = to_builtins(self.server)
        if self.prefix_cache is not None:
            out["prefix_cache"] = to_builtins(self.prefix_cache)
        if self.sessions is not None:
            out["sessions"] = to_builtins(self.sessions)
        if self.stream is not None:
            out["stream"] = to_builtins(self.stream)
        if self.answers is not None:
            out["answers"] = to_builtins(self.answers)
        if self.delivery is not None:
            out["delivery"] = to_builtins(self.delivery)
        if self.verify is not None:
            out["verify"] = self.verify
        if self.ttft_split is not None:
            out["ttft_split"] = self.ttft_split
        if self.tail is not None:
            out["tail"] = self.tail
        if self.timeline is not None:
            out["timeline"] = to_builtins(self.timeline)
        if self.classes is not None:
            out["classes"] = self.classes
        if self.probes is not None:
            out["probes"] = self.probes
        if self.adapters:
            out["adapters"] = dict(self.adapters)
        if self.cost is not None:
            out["cost"] = to_builtins(structs.replace(self.cost, index=UNSET, level=UNSET))
        if self.started_at is not None:
            out["started_at"] = self.started_at
        if self.ended is not None:
            out["ended"] = self.ended
        return out


@dataclass(frozen=True, kw_only=True)
class SloVerdict:
    thresholds: list[str]
    passed: bool | None
    max_load_within_slo: float | None


@dataclass(kw_only=True)
class RunSummary:
    run_id: str
    scenario: str
    host: str
    model: str
    started_at: float
    ended_at: float
    mode: str
    stop_reason: str | None
    workers: int
    steps: list[StepResult]
    knee: KneeFinding
    knee_metric: str
    knee_reason: str
    """The knee finder's reason, plus the server's side when its /metrics were scraped."""
    knee_why: str = ""
    """That side alone: the server's queue, the prefix cache, the tail past the knee (``summarize.knee_why``)."""
    slo: SloVerdict
    exit_code: int
    fleet_events: list[FleetEvent] = field(default_factory=list)
    influx: dict | None = None
    merge_errors: int = 0
    clocks: dict[str, dict] = field(default_factory=dict)
    """Per worker: its wall clock's offset to the master's (``metrics.clock.ClockOffset.to_json``)."""
    clock_warnings: list[str] = field(default_factory=list)
    """Workers whose clock is off by more than ``metrics.clock.WARN_OFFSET_S``, far away, or not measured."""
    cost: RunCost | None = None
    """With the scenario's ``cost:``: the prices, the test's tokens and cost, figures at the reference loads."""
    search: dict | None = None
    """A search's grid, state and path (``analysis/search.search_summary``); None for a staircase or constant run."""
    invalid: str | None = None
    """Why the figures are not the workload's (``analysis.verdict.invalid``: context overflows), or None."""

    @property
    def degraded(self) -> bool:
        """A worker was lost: the load of some steps was not what they say (they are not judged)."""
        return any(e.kind == "lost" for e in self.fleet_events)

    def to_json(self) -> dict[str, Any]:
        knee = dict(vars(self.knee))
        knee[level_key(self.mode)] = knee.pop("load")
        knee.update(reason=self.knee_reason, metric=self.knee_metric, tail="p99_slo", why=self.knee_why)
        out = {"schema": SCHEMA, "run_id": self.run_id, "scenario": self.scenario, "host": self.host,
               "model": self.model, "started_at": self.started_at, "ended_at": self.ended_at, "mode": self.mode,
               "stop_reason": self.stop_reason, "workers": self.workers, "steps": [s.to_json() for s in self.steps],
               "knee": knee, "slo": vars(self.slo).copy(), "exit_code": self.exit_code, "degraded": self.degraded,
               "fleet_events": to_builtins(self.fleet_events)}
        if self.influx is not None:
            out["influx"] = self.influx
        if self.merge_errors:
            out["merge_errors"] = self.merge_errors
        if self.clocks or self.clock_warnings:  # fleets only: local runs keep their bytes
            out.update(clocks=self.clocks, clock_warnings=self.clock_warnings)
        if self.cost is not None:
            out["cost"] = to_builtins(self.cost)
        if self.search is not None:
            out["search"] = self.search
        if self.invalid:
            out["invalid"] = self.invalid
        return out
