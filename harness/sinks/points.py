"""InfluxDB line-protocol points for kneecap's measurements (``schema.py``). Pure: data in, lines out.

influxdb_client (~0.2 s of imports, numpy among them) is imported by the first point built, i.e. only in a
master with a sink configured: importing this module costs nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from msgspec import to_builtins

from harness.analysis.results import StepResult
from harness.client.server_metrics import ServerSample
from harness.metrics.aggregate import Bucket
from harness.metrics.vocabulary import CI_PERCENTILES, HEADLINE, METRICS
from harness.sinks.schema import PERCENTILE_FIELDS

if TYPE_CHECKING:
    from influxdb_client import Point

__all__ = ["event_point", "generator_point", "server_point", "step_points", "window_points"]

WINDOW_METRICS = tuple(m.name for m in METRICS if "kneecap_latency" in m.influx)
"""The metrics the registry writes to ``kneecap_latency`` each window (the live window merges their sketches)."""


def _point(measurement: str, tags: dict[str, str], ts_ms: int) -> Point:
    from influxdb_client import Point, WritePrecision

    p = Point(measurement).time(ts_ms, WritePrecision.MS)
    for k, v in tags.items():
        p = p.tag(k, v)
    return p


def _lines(points: list[Point]) -> list[str]:
    return [p.to_line_protocol() for p in points]


def window_points(b: Bucket, *, tags: dict[str, str], ts_ms: int, window: int, step: int, load: float,
                  duration_s: float) -> list[str]:
    """One window's fleet-wide percentiles, throughput and errors."""
    out = []
    st = {**tags, "step": str(step)}
    for metric in WINDOW_METRICS:
        s = b.sketches.get(metric)
        if s is None or s.count == 0:
            continue
        p = _point("kneecap_latency", {**st, "metric": metric}, ts_ms)
        for name, q in (("p50", 0.5), ("p90", 0.9), ("p95", 0.95), ("p99", 0.99), ("p999", 0.999)):
            p = p.field(name, round(s.quantile(q) * 1000, 3))
        out.append(p.field("mean", round(s.mean * 1000, 3)).field("count", s.count).field("window", window))
    d = max(duration_s, 1e-9)
    out.append(_point("kneecap_throughput", st, ts_ms).field("requests_per_s", round(b.requests / d, 3))
               .field("ok_per_s", round(b.ok / d, 3)).field("output_tokens_per_s", round(b.output_tokens / d, 1))
               .field("input_tokens_per_s", round(b.input_tokens / d, 1))
               .field("goodput_per_s", round(b.good / d, 3)).field("load", float(load)).field("window", window))
    for error, count in sorted(b.failures.items()):
        out.append(_point("kneecap_errors", {**st, "error": error}, ts_ms).field("count", count)
                   .field("window", window))
    return _lines(out)


def _session_stats(step: StepResult) -> list[tuple[str, dict]]:
    """Session sketches of a step as (metric, stats): whole sessions, then TTFT by turn bucket."""
    v = step.sessions
    if v is None:
        return []
    out = [("session_duration", v.duration_ms), ("session_model_time", v.model_time_ms),
           ("session_ttft", v.session_ttft_ms), *((f"ttft_turn_{label}", t.ttft_ms) for label, t in v.by_turn.items())]
    return [(name, to_builtins(stats)) for name, stats in out if stats is not None]


def step_points(step: StepResult, *, tags: dict[str, str], ts_ms: int) -> list[str]:
    """A judged step's summary.json numbers, one point per metric; the client side (connections, CPU); the prefix cache,
    sessions and cost when known."""
    out = []
    st = {**tags, "step": str(step.index)}
    for metric, stats in [*step.latency_ms.items(), *_session_stats(step)]:
        if not stats.get("count"):
            continue
        p = _point("kneecap_step", {**tags, "metric": metric, "step": str(step.index)}, ts_ms)
        for name in PERCENTILE_FIELDS:
            p = p.field(name, stats[name])
        if stats.get("p99_ci"):
            p = p.field("p99_ci_lo", stats["p99_ci"][0]).field("p99_ci_hi", stats["p99_ci"][1])
        out.append(p.field("load", float(step.level)))
    cache = step.prefix_cache
    share = cache.client.cached_share if cache is not None else None
    rate = cache.server.hit_rate if cache is not None else None
    if isinstance(share, float) or rate is not None:
        p = _point("kneecap_step_cache", st, ts_ms).field("load", float(step.level))
        if isinstance(share, float):
            p = p.field("client_cached_share", share)
        if rate is not None:
            p = p.field("server_hit_rate", float(rate))
        out.append(p)
    g = step.generator
    if step.new_connection_share is not None or g.cpu_s is not None:
        p = _point("kneecap_step_client", st, ts_ms).field("load", float(step.level))
        if step.new_connection_share is not None:
            p = p.field("new_connections", step.new_connections) \
                .field("new_connection_share", float(step.new_connection_share))
        for name in ("cpu_s", "cpu_us_per_token", "gc_pause_max_ms"):
            if getattr(g, name) is not None:
                p = p.field(name, float(getattr(g, name)))
        out.append(p.field("output_tokens", g.output_tokens).field("shared_stamp_share", float(g.shared_stamp_share)))
    if (v := step.sessions) is not None and v.ended:
        p = _point("kneecap_step_sessions", st, ts_ms).field("ended", v.ended).field("failed", v.failed) \
            .field("turns_mean", float(v.turns_mean or 0)).field("load", float(step.level))
        if v.agent_stall_s is not None:
            p = p.field("agent_stall_s", float(v.agent_stall_s))
        out.append(p)
    out += _split_point(step, st, ts_ms) + _tail_points(step, st, ts_ms) + _cost_point(step, st, ts_ms)
    out += _class_points(step, st, ts_ms)
    return _lines(out)


def _class_points(step: StepResult, st: dict[str, str], ts_ms: int) -> list:
    """A mix's classes in the step, one point each (tag ``class``); a figure a class has not (no requests) left out."""
    out = []
    for c in step.classes or ():
        p = _point("kneecap_step_class", {**st, "class": c["name"]}, ts_ms).field("load", float(step.level)) \
            .field("requests", c["requests"]).field("failed", c["failed"])
        for name in ("share", "weight_share", "error_rate"):  # weight_share: None for a class of fixed users
            if c[name] is not None:
                p = p.field(name, float(c[name]))
        for metric, stats in c["latency_ms"].items():
            if metric in HEADLINE:
                for q in CI_PERCENTILES:
                    p = p.field(f"{metric}_{q}", float(stats[q]))
        if c["slo_passed"] is not None:
            p = p.field("slo_passed", int(c["slo_passed"]))
        out.append(p)
    return out


def _cost_point(step: StepResult, st: dict[str, str], ts_ms: int) -> list:
    """The step's cost figures (docs/cost.md); a figure that is None (a missing price, no throughput) is left out."""
    c = step.cost
    if c is None:
        return []
    p = _point("kneecap_step_cost", {**st, "currency": c.currency}, ts_ms).field("load", float(step.level)) \
        .field("input_tokens", c.tokens.input).field("cached_input_tokens", c.tokens.cached_input) \
        .field("output_tokens", c.tokens.output)
    for name in ("test_cost", "flat_per_mtok", "metered_per_mtok", "metered_blended_per_mtok",
                 "break_even_tokens_per_month", "capacity_tokens_per_month"):
        if getattr(c, name) is not None:
            p = p.field(name, float(getattr(c, name)))
    if c.floor_held is not None:  # a number: 1 held, 0 not (TSDBs that keep numbers only keep it too)
        p = p.field("floor_held", int(c.floor_held))
    return [p]


def _mean(part: object) -> float | None:
    return float(part["mean_ms"]) if isinstance(part, dict) and part.get("mean_ms") is not None else None


def _split_point(step: StepResult, st: dict[str, str], ts_ms: int) -> list:
    """Where the step's TTFT went, means in ms (they add up), and the server side's source."""
    sp = step.ttft_split
    if not sp:
        return []
    c, v = sp["client"], sp["server"]
    p = _point("kneecap_step_ttft", st, ts_ms).field("load", float(step.level)).field("server_source", v["source"])
    net = v.get("network_client") or v.get("network_client_queue")
    for name, part in (("client_ttft_ms", c["ttft"]), ("headers_ms", c["headers"]),
                       ("headers_to_first_token_ms", c["headers_to_first_token"]), ("connect_ms", c["connect"]),
                       ("server_ttft_ms", v.get("ttft")), ("server_queue_ms", v.get("queue")),
                       ("server_prefill_ms", v.get("prefill")), ("network_client_ms", net)):
        if _mean(part) is not None:
            p = p.field(name, _mean(part))
    return [p]


def _tail_points(step: StepResult, st: dict[str, str], ts_ms: int) -> list:
    """Why the tail, per metric and quantile: the verdict, the first cause and the plain-words line."""
    out = []
    for a in (step.tail or {}).get("attributions", ()):
        tags = {**st, "metric": a["metric"].removesuffix("_s"), "q": f"p{100 * a['quantile']:g}"}
        p = _point("kneecap_step_tail", tags, ts_ms).field("verdict", a["verdict"]).field("line", a["line"]) \
            .field("load", float(step.level))
        out.append(p.field("cause", a["causes"][0]) if a["causes"] else p)
    return out


def generator_point(worker: str, lag_p99_ms: float, lag_max_ms: float, cpu: float, *, tags: dict[str, str],
                    ts_ms: int, window: int, cpu_s: float | None = None, gc_pause_max_ms: float | None = None) -> str:
    """One worker's health over one window; ``cpu_s`` (its CPU seconds in the window) and its longest GC pause
    when the worker measures them."""
    p = _point("kneecap_generator", {**tags, "worker": worker}, ts_ms).field("lag_p99_ms", lag_p99_ms) \
        .field("lag_max_ms", lag_max_ms).field("cpu_pct", cpu).field("window", window)
    if cpu_s is not None:
        p = p.field("cpu_s", float(cpu_s))
    if gc_pause_max_ms is not None:
        p = p.field("gc_pause_max_ms", float(gc_pause_max_ms))
    return p.to_line_protocol()


def server_point(s: ServerSample, *, tags: dict[str, str], ts_ms: int, window: int, step: int) -> str:
    p = _point("kneecap_server", {**tags, "step": str(step)}, ts_ms)
    for name in ("running", "waiting", "kv_cache_usage", "preemptions", "prefix_cache_queries", "prefix_cache_hits"):
        value = getattr(s, name)
        if value is not None:
            p = p.field(name, float(value))
    return p.field("window", window).to_line_protocol()


def event_point(kind: str, text: str, load: float | None, *, tags: dict[str, str], ts_ms: int) -> str:
    p = _point("kneecap_event", {**tags, "kind": kind}, ts_ms).field("text", text)
    if load is not None:
        p = p.field("load", float(load))
    return p.to_line_protocol()
