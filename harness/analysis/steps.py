"""A step's boundaries and numbers: throughput, latency percentiles with CIs, failures, generator health. Pure."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from msgspec import UNSET, convert

from harness.analysis.answers import answers, failure_samples
from harness.analysis.delivery import delivery
from harness.analysis.judge import miss_quantile
from harness.analysis.results import StepResult
from harness.metrics.aggregate import ADAPTER_KEY, LATENCIES, SHAPE_KEY, SHORT_KEY, Bucket, summarize_sketch
from harness.metrics.sketch import Sketch
from harness.spec.slo import LATENCY_METRICS
from harness.summary import SHARED_STAMP_LIMIT, Answers, Generator, Percentiles, Stream, Throughput

__all__ = ["CONNECT_SHARE_WARN", "LAG_LIMIT_MS", "GeneratorTally", "StepInfo", "connection_warning",
           "step_health", "step_result"]

LAG_LIMIT_MS = 10.0
"""A step whose generator loop lag p99 exceeds this is marked unreliable: the load generator, not the
server, was adding latency (see benchmarks/client_accuracy.py for where timing noise starts to grow)."""
CONNECT_SHARE_WARN = 0.5
"""Past this share of measured requests paying a new connection, the server is not keeping connections alive
(a kept-alive fleet pays one connect per user, in the first step's warm-up): the run says so once."""


@dataclass
class StepInfo:
    """A step's boundaries on the master's clock (the authoritative one, see ``metrics/protocol.py``)."""

    index: int
    level: float
    """Users (closed loop) or requests/s (open loop)."""
    started: float
    """Master clock (s) when the step began; its warm-up ends ``warmup_s`` later."""
    warmup_s: float = 0.0
    ended: float | None = None
    started_wall: float = 0.0
    level_index: int = -1
    """Position of ``level`` in the plan's levels (a step re-run after a fleet change repeats it); -1: none."""
    why: str = ""
    """Why this level was chosen (a search's chooser, a re-run); "" for the staircase's next level."""
    warmup_why: str = ""
    """Why the warm-up is longer than the plan's (a drain after a heavier step); "" when it is the plan's."""
    ended_why: str | None = None
    """Why the step ended: "min", "precision", "max_duration" (``StepPlan.step_end``), "stopped", "fleet change"."""
    workers_lost: list[str] = field(default_factory=list)
    """Workers that went missing or quit while this step ran: its load was not what it says."""
    workers_joined: list[str] = field(default_factory=list)

    @property
    def fleet_changed(self) -> bool:
        """The fleet changed during the step: it is not judged (the master re-runs its level)."""
        return bool(self.workers_lost or self.workers_joined)

    def elapsed_s(self, now: float) -> float:
        """Time since the step began, up to its end once it ended."""
        return (self.ended if self.ended is not None else now) - self.started

    def measured_s(self, now: float) -> float:
        """The measured part (after warm-up): the one duration every rate of the step divides by."""
        return max(self.elapsed_s(now) - self.warmup_s, 1e-9)


@dataclass
class GeneratorTally:
    """Load-generator health merged over workers for one step."""

    lag: Sketch = field(default_factory=Sketch)
    cpu_max_pct: float = 0.0
    cpu_s: float | None = None
    """CPU seconds of all workers spent in the step (warm-up included); None when no worker measured it."""
    wait_s: float | None = None
    """Seconds the workers' loops were runnable but not running in the same period; None when not measured."""
    gc_max_s: float | None = None
    """The longest garbage-collector pause of any worker in the step's reports; None when not measured."""
    lag_limit_ms: float = LAG_LIMIT_MS
    """The scenario's ``load.step.max_lag_ms``: past it the step is not reliable."""
    kernel_stamps: bool = True
    """Every worker's receives were dated by the kernel."""

    def merge(self, lag: Sketch, cpu: float, gc_max_s: float | None = None, kernel_stamps: bool = True) -> None:
        self.lag.merge(lag)
        self.kernel_stamps = self.kernel_stamps and kernel_stamps
        self.cpu_max_pct = max(self.cpu_max_pct, cpu)
        if gc_max_s is not None:
            self.gc_max_s = max(self.gc_max_s or 0.0, gc_max_s)

    def add_cpu(self, seconds: float, wait_s: float | None = None) -> None:
        self.cpu_s = (self.cpu_s or 0.0) + seconds
        if wait_s is not None:
            self.wait_s = (self.wait_s or 0.0) + wait_s

    def health(self, output_tokens: int = 0, shared_stamps: int = 0, ok: int = 0,
               send_lag_p99_s: float | None = None) -> Generator:
        """``output_tokens``: streamed in the step, warm-up included (the CPU's period), for CPU per token;
        ``shared_stamps`` of ``ok`` measured successes had chunk times that may be late; ``send_lag_p99_s``: open
        loop, how late the step's requests went out (``step_health``), judged by the same limit."""
        send = None if send_lag_p99_s is None else round(send_lag_p99_s * 1000, 3)
        sent_on_time = send is None or send <= self.lag_limit_ms
        cpu = round(self.cpu_max_pct, 1)
        share = shared_stamps / ok if ok else 0.0
        cost: dict[str, Any] = dict(
            cpu_s=None if self.cpu_s is None else round(self.cpu_s, 3), output_tokens=output_tokens,
            cpu_us_per_token=round(self.cpu_s * 1e6 / output_tokens, 2)
            if self.cpu_s is not None and output_tokens else None,
            gc_pause_max_ms=None if self.gc_max_s is None else round(self.gc_max_s * 1000, 3),
            runqueue_wait_s=None if self.wait_s is None else round(self.wait_s, 3),
            shared_stamps=shared_stamps, shared_stamp_share=round(share, 4),
            stamps_flagged=share > SHARED_STAMP_LIMIT, kernel_stamps=self.kernel_stamps, send_lag_p99_ms=send)
        if self.lag.count == 0:
            return Generator(lag_p99_ms=None, lag_max_ms=None, cpu_max_pct=cpu, reliable=sent_on_time,
                                   lag_limit_ms=self.lag_limit_ms, **cost)
        p99 = self.lag.quantile(0.99) * 1000
        return Generator(lag_p99_ms=round(p99, 3), lag_max_ms=round(self.lag.max * 1000, 3), cpu_max_pct=cpu,
                               reliable=p99 <= self.lag_limit_ms and sent_on_time, lag_limit_ms=self.lag_limit_ms,
                               **cost)


def step_health(generator: GeneratorTally, bucket: Bucket, output_tokens: int = 0) -> Generator:
    """The generator's health in the step whose measured data is ``bucket``: with its shared stamps (whether the loop
    lag may have reached the p99s) and, open loop, the p99 of how late its requests went out (``send_lag``)."""
    s = bucket.sketches.get("send_lag")
    send = s.quantile(0.99) if s is not None and s.count else None
    return generator.health(output_tokens, bucket.extra.get("shared_stamps", 0), bucket.ok, send)


def _latency(bucket: Bucket) -> dict[str, dict]:
    """Successes' percentiles per metric; SLO metrics add ``p99_slo``, the p99 with failures as misses."""
    fails = sum(bucket.failures.values())
    out = {}
    for m in LATENCIES:
        s = bucket.sketches.get(m)
        if s is None:
            continue
        out[m] = stats = summarize_sketch(s)
        if m in LATENCY_METRICS and stats["count"]:
            v = miss_quantile(s, 0.99, fails)
            stats["p99_slo"] = "inf" if math.isinf(v) else round(v * 1000, 3)
    return out


def step_result(info: StepInfo, bucket: Bucket, generator: GeneratorTally | None, *, now: float, mode: str = "closed",
                warmup: Bucket | None = None) -> StepResult:
    """One step's numbers; rates are over the measured part (after warm-up)."""
    duration = info.measured_s(now)
    speed = bucket.sketches.get("tokens_per_s")
    return StepResult(
        index=info.index, mode=mode, level=info.level, duration_s=round(duration, 3), warmup_s=info.warmup_s,
        requests=bucket.requests, ok=bucket.ok, failures=dict(sorted(bucket.failures.items())),
        failure_samples=failure_samples(bucket), verify=answers(bucket),
        warmup_requests=warmup.requests if warmup else 0,
        warmup_shapes=warmup.extra.get(SHAPE_KEY, 0) if warmup else 0,
        arrivals_per_s=round(bucket.arrivals / duration, 3) if mode == "open" else None,
        dropped_arrivals=bucket.dropped if mode == "open" else None,
        throughput=Throughput(requests_per_s=round(bucket.requests / duration, 3),
                              output_tokens_per_s=round(bucket.output_tokens / duration, 1),
                              input_tokens_per_s=round(bucket.input_tokens / duration, 1),
                              goodput_per_s=round(bucket.good / duration, 3)),
        latency_ms=_latency(bucket),
        tokens_per_s_per_user=summarize_sketch(speed, scale=1.0) if speed else {"count": 0},
        output_tokens_counted=bucket.counted_outputs,
        prompt_length_error=round(bucket.prompt_error_sum / bucket.prompt_error_n, 4)
        if bucket.prompt_error_n else None,
        generator=step_health(generator or GeneratorTally(), bucket,
                              bucket.output_tokens + (warmup.output_tokens if warmup else 0)),
        fleet_changed=info.fleet_changed,
        workers_lost=list(info.workers_lost), workers_joined=list(info.workers_joined),
        stream=_stream(bucket, duration), answers=answer_lengths(bucket), delivery=delivery(bucket.extra),
        new_connections=bucket.new_connections,
        new_connection_share=round(bucket.new_connections / bucket.requests, 4) if bucket.requests else None,
        cancelled=sum(bucket.cancelled.values()), cancelled_by=dict(sorted(bucket.cancelled.items())),
        cancelled_output_tokens=bucket.cancelled_tokens,
        adapters={k[len(ADAPTER_KEY):]: v for k, v in sorted(bucket.extra.items()) if k.startswith(ADAPTER_KEY)},
        ended=info.ended_why, started_at=round(info.started_wall, 3) if info.started_wall else None)


def connection_warning(steps: list[StepResult]) -> str | None:
    """One sentence when more than ``CONNECT_SHARE_WARN`` of the measured requests paid a new connection, else
    None: that is the server's choice (it closes after each response), and part of what its users pay. Each hang-up
    (``cancelled``) closed a connection itself: the request after it opens one, not counted against the server."""
    requests = sum(s.requests for s in steps)
    new = sum(s.new_connections - s.cancelled for s in steps)
    if not requests or new / requests <= CONNECT_SHARE_WARN:
        return None
    return (f"{new / requests:.0%} of requests paid a new connection (TCP connect, and TLS for https, inside their "
            "TTFT): the server closes the connection after each response (llama.cpp's server does); nothing to fix "
            "on the client: this is what users of that server pay")


def answer_lengths(bucket: Bucket) -> Answers | None:
    """Whether the answers were as long as asked: of the successful answers that asked for an exact length
    (``ignore_eos``/``min_tokens``), how many ended short, why (``finish_reason``), and the output tokens got over
    asked; None when none asked (natural lengths, an API without the ask, embeddings)."""
    x = bucket.extra
    asked = x.get("length_asked", 0)
    if not asked:
        return None
    short = x.get("short_answers", 0)
    why = {k[len(SHORT_KEY):]: v for k, v in sorted(x.items()) if k.startswith(SHORT_KEY)}
    return Answers(length_asked=asked, short=short, short_share=round(short / asked, 4), short_by_finish_reason=why,
                   tokens_got_over_asked=round(x.get("tokens_got", 0) / x["tokens_asked"], 4)
                   if x.get("tokens_asked") else None)


def _stream(bucket: Bucket, duration: float) -> Stream | None:
    """What the streams said about themselves, when it applies: exact tokens per chunk, what was inferred."""
    x = bucket.extra
    tpc = bucket.sketches.get("tokens_per_chunk")
    if not x and tpc is None:
        return None
    return Stream(exact_chunk_counts=x.get("exact_chunks", 0), itl_token_unknown=x.get("itl_token_unknown", 0),
                  reasoning_tokens_counted=x.get("reasoning_counted", 0),
                  continuous_usage_refused=x.get("continuous_usage_refused") or UNSET,
                  usage_below_chunks=x.get("usage_below_chunks") or UNSET,
                  tokens_per_chunk=UNSET if tpc is None else convert(summarize_sketch(tpc, scale=1.0), Percentiles),
                  inputs_per_s=round(x["inputs"] / duration, 3) if x.get("inputs") else UNSET)
