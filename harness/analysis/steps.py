"""A step's numbers for summary.json: throughput, latency percentiles with CIs, failures, generator health. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.metrics.aggregate import LATENCIES, Bucket, summarize_sketch
from harness.metrics.sketch import Sketch

__all__ = ["LAG_LIMIT_MS", "Generator", "StepInfo", "step_summary"]

LAG_LIMIT_MS = 10.0
"""A step whose generator loop lag p99 exceeds this is marked unreliable: the load generator, not the
server, was adding latency (see benchmarks/client_accuracy.py for where timing noise starts to grow)."""


@dataclass
class StepInfo:
    index: int
    level: float
    """Users (closed loop) or requests/s (open loop)."""
    started: float
    """Master clock (s) when the step began; its warm-up ends ``warmup_s`` later."""
    warmup_s: float = 0.0
    ended: float | None = None
    started_wall: float = 0.0


@dataclass
class Generator:
    """Load-generator health merged over workers for one step."""

    lag: Sketch = field(default_factory=Sketch)
    cpu_max_pct: float = 0.0

    def merge(self, lag: Sketch, cpu: float) -> None:
        self.lag.merge(lag)
        self.cpu_max_pct = max(self.cpu_max_pct, cpu)

    def summary(self) -> dict:
        if self.lag.count == 0:
            return {"lag_p99_ms": None, "lag_max_ms": None, "cpu_max_pct": round(self.cpu_max_pct, 1),
                    "reliable": True}
        p99 = self.lag.quantile(0.99) * 1000
        return {"lag_p99_ms": round(p99, 3), "lag_max_ms": round(self.lag.max * 1000, 3),
                "cpu_max_pct": round(self.cpu_max_pct, 1), "reliable": p99 <= LAG_LIMIT_MS}


def step_summary(info: StepInfo, bucket: Bucket, generator: Generator | None, *, mode: str = "closed",
                 warmup: Bucket | None = None) -> dict:
    """summary.json's entry for one step; rates are over the measured part (after warm-up)."""
    duration = max(((info.ended or info.started) - info.started) - info.warmup_s, 1e-9)
    latency = {m: summarize_sketch(bucket.sketches[m]) for m in LATENCIES if m in bucket.sketches}
    speed = bucket.sketches.get("tokens_per_s")
    out = {
        "index": info.index, ("users" if mode == "closed" else "rate_rps"): info.level,
        "duration_s": round(duration, 3), "warmup_s": info.warmup_s,
        "requests": bucket.requests, "ok": bucket.ok, "failures": dict(sorted(bucket.failures.items())),
        "warmup_requests": warmup.requests if warmup else 0,
        **({"arrivals_per_s": round(bucket.arrivals / duration, 3), "dropped_arrivals": bucket.dropped}
           if mode == "open" else {}),
        "throughput": {"requests_per_s": round(bucket.requests / duration, 3),
                       "output_tokens_per_s": round(bucket.output_tokens / duration, 1),
                       "input_tokens_per_s": round(bucket.input_tokens / duration, 1),
                       "goodput_per_s": round(bucket.good / duration, 3)},
        "latency_ms": latency,
        "tokens_per_s_per_user": summarize_sketch(speed, scale=1.0) if speed else {"count": 0},
        "output_tokens_counted": bucket.counted_outputs,
        "prompt_length_error": round(bucket.prompt_error_sum / bucket.prompt_error_n, 4)
        if bucket.prompt_error_n else None,
        "generator": (generator or Generator()).summary(),
    }
    return out
