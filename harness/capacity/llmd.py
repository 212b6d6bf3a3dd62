"""A run's summary as llm-d benchmark reports (version 0.2.1): one report per measured step. Pure.

The llm-d project's benchmark report (``llm-d/llm-d-benchmark``, ``llmdbenchmark/analysis/benchmark_report/``:
Pydantic models ``schema_v0_2.py`` + ``schema_v0_2_1.py``, published as ``br_v0_2_1_json_schema.json``, followed
at commit 8bc9f1ddd873a24f1657d6cca2e0d0fb6947dd36) describes one load point: its README says a report "describes
a single point in any sweep", and their own converters write one report per stage (inference-perf's stages,
GuideLLM's benchmarks) with ``scenario.load.standardized.stage``. So a kneecap run of N steps gives N reports, the
step's index as the stage::

    export = llmd_reports(summary)        # LlmdExport(reports=[StepReport(stage, file_name, body)], skipped=[3])
    yaml.safe_dump(export.reports[0].body)

Only what kneecap measured is written; a figure it does not keep is left out, never filled in (almost every field
of the schema is optional; a block whose required fields kneecap cannot fill, like an inference engine's
accelerators, is not written). Units: kneecap's latencies are milliseconds (``latency_ms``) and the schema
takes each Statistics block with its own ``units``, so they are written as they are, in ``ms`` (TTFT, E2E) and
``ms/token`` (TPOT, ITL): no conversion, no rounding added. Percentiles are kneecap's sketch's (±1% relative).
Statistics need a ``mean``: a block without one (a metric with no samples) is left out. The field mapping, and
what is left out and why: docs/export.md.
"""

from __future__ import annotations

import datetime
import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from msgspec import UNSET

from harness.analysis.counted import WHY, not_counted

if TYPE_CHECKING:
    from harness.summary import Percentiles, Sessions, Step, Summary

__all__ = ["FILE_PREFIX", "SCHEMA_COMMIT", "VERSION", "LlmdExport", "StepReport", "llmd_reports"]

VERSION = "0.2.1"
"""The benchmark report version written (``version``); 0.2.1 is an additive superset of 0.2."""
SCHEMA_COMMIT = "8bc9f1ddd873a24f1657d6cca2e0d0fb6947dd36"
"""The llm-d-benchmark commit whose ``br_v0_2_1_json_schema.json`` the reports follow (tests/capacity/llmd_schema/)."""
FILE_PREFIX = "benchmark_report_v0.2.1,_kneecap_stage_"
"""llm-d's tools find reports by ``benchmark_report_v0.2*.yaml`` (results store, cross-treatment analysis)."""

_STATS = (("p50", "p50"), ("p90", "p90"), ("p95", "p95"), ("p99", "p99"), ("p999", "p99p9"), ("max", "max"))
"""kneecap's percentile keys -> the schema's Statistics keys (kneecap keeps no min, stddev, p1..p25, p75)."""
_LATENCY = (("ttft", "time_to_first_token", "ms"), ("tpot", "time_per_output_token", "ms/token"),
            ("itl_token", "inter_token_latency", "ms/token"), ("e2e", "request_latency", "ms"))
"""kneecap metric -> schema field and its unit. ITL is ``itl_token``, the per-token gap: kneecap's ``itl`` is the gap
between chunks, per token only when each chunk carries one, and the schema's ITL is per token."""
_ENDPOINT = "endpoint"
"""The one stack component a report names: the endpoint kneecap measured (its engine and hardware are unknown)."""


@dataclass(frozen=True)
class StepReport:
    """One step's report."""

    stage: int
    """The step's index (the report's ``scenario.load.standardized.stage``)."""
    file_name: str
    """``benchmark_report_v0.2.1,_kneecap_stage_N.yaml``."""
    body: dict[str, Any]
    """The report, plain types only (strings, numbers, lists, dicts): ready for JSON or YAML."""


@dataclass(frozen=True)
class LlmdExport:
    """Every report of a run, and the steps left without one."""

    reports: list[StepReport]
    skipped: list[int]
    """Indexes of steps with no measured request (cut short before any ended): nothing to report."""


def llmd_reports(summary: Summary) -> LlmdExport:
    """One llm-d benchmark report per step of ``summary`` that measured a request (module docstring)."""
    measured = [s for s in summary.steps if s.requests > 0]
    input_mean = _run_input_mean(measured)
    reports = [StepReport(stage=s.index, file_name=f"{FILE_PREFIX}{s.index}.yaml",
                          body=_report(summary, s, input_mean)) for s in measured]
    return LlmdExport(reports=reports, skipped=[s.index for s in summary.steps if s.requests == 0])


def _report(summary: Summary, step: Step, input_mean: float | None) -> dict[str, Any]:
    scenario: dict[str, Any] = {"stack": [_stack(summary)]}
    if input_mean is not None:  # input_seq_len is required in a load block: without it, no load block
        scenario["load"] = _load(summary, step, input_mean)
    results: dict[str, Any] = {"request_performance": {"aggregate": _aggregate(step)}}
    if step.sessions is not UNSET and step.sessions.ended:
        results["session_performance"] = {"sessions": _sessions(step.sessions)}
    if (obs := _observability(step)) is not None:
        results["observability"] = obs
    return {"version": VERSION, "run": _run(summary, step), "scenario": scenario, "results": results}


def _stat(p: Percentiles | None, units: str) -> dict[str, Any] | None:
    """A kneecap percentile block as the schema's Statistics; None without a mean (no samples)."""
    if p is None or p.mean is None:
        return None
    out: dict[str, Any] = {"units": units, "mean": p.mean}
    out.update((theirs, v) for ours, theirs in _STATS if (v := getattr(p, ours)) is not None)
    return out


def _mean(value: float, units: str) -> dict[str, Any]:
    """A figure kneecap keeps as one number (a rate over the step) as a Statistics with only its mean."""
    return {"units": units, "mean": value}


def _iso(epoch_s: float) -> str:
    return datetime.datetime.fromtimestamp(epoch_s, tz=datetime.timezone.utc).isoformat()


def _hash(config: dict[str, Any]) -> str:
    """A configuration's id as llm-d's converters make it: sha256 of its JSON with sorted keys."""
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode("utf-8")).hexdigest()


def _run(summary: Summary, step: Step) -> dict[str, Any]:
    # The measured part of the step: it starts warmup_s after the step began and lasts duration_s.
    time: dict[str, Any] = {"duration": f"PT{step.duration_s}S"}
    if step.started_at is not UNSET:  # absent from older summaries
        start = step.started_at + step.warmup_s
        time.update(start=_iso(start), end=_iso(start + step.duration_s))
    # eid groups the reports of one experiment (all steps of this run); description is llm-d's default label,
    # "<model> [<experiment id>]" (their README: llm-d-prism shows it). keywords are never generated (their policy).
    # The experiment's id is the run folder's default name, NAME-RUNID.
    eid = f"{summary.scenario}-{summary.run_id}"
    return {"uid": f"{eid}-stage-{step.index}", "eid": eid, "time": time, "description": f"{summary.model} [{eid}]"}


def _stack(summary: Summary) -> dict[str, Any]:
    """The endpoint as a ``generic`` component: model and URL are known; engine, version, replicas and accelerators
    (an ``inference_engine`` component requires them) are not in summary.json, so they are not claimed."""
    facts = {"model": {"name": summary.model}, "url": summary.host}
    return {"metadata": {"label": _ENDPOINT, "cfg_id": _hash(facts),
                         "description": "the endpoint kneecap measured; its engine and hardware are not recorded"},
            "standardized": {"kind": "generic", "tool": "unknown", "tool_version": "unknown", **facts},
            "native": {}}


def _run_input_mean(steps: list[Step]) -> float | None:
    """Prompt tokens per successful request over the run: the workload's input length as observed (summary.json
    keeps the token rate of successes, not the scenario's distribution). None when no step saw a prompt token:
    a server that sends no usage leaves the rate 0, which is not a length."""
    tokens = sum(s.throughput.input_tokens_per_s * s.duration_s for s in steps)
    ok = sum(s.ok for s in steps)
    return round(tokens / ok, 1) if tokens > 0 and ok else None


def _load(summary: Summary, step: Step, input_mean: float) -> dict[str, Any]:
    native = {"scenario": summary.scenario, "host": summary.host, "model": summary.model, "mode": summary.mode,
              "summary_schema": summary.schema}
    std: dict[str, Any] = {
        # summary.json does not record kneecap's release; the schema string of the file it wrote stands in
        "tool": "kneecap", "tool_version": summary.schema, "source": "unknown", "stage": step.index,
        "input_seq_len": {"distribution": "other", "value": input_mean}}
    if summary.workers >= 1:
        std["parallelism"] = summary.workers  # Locust worker processes: the parallel load generators
    if step.sessions is not UNSET:
        std["multi_turn"] = {"enabled": True}
    if step.rate_rps is not UNSET:  # open loop: arrivals at a rate, concurrency whatever it became
        if step.rate_rps > 0:
            std["rate_qps"] = step.rate_rps
    elif step.users is not UNSET and step.users >= 1 and float(step.users).is_integer():
        std["concurrency"] = int(step.users)  # closed loop: users, each with one request in flight
    return {"metadata": {"cfg_id": _hash(native), "description": _describe(summary, step)},
            "standardized": std, "native": {"config": native}}


def _describe(summary: Summary, step: Step) -> str:
    level = f"{step.level:g} {'req/s' if summary.mode == 'open' else 'users'} ({summary.mode} loop)"
    why = not_counted(step)
    return f"kneecap scenario {summary.scenario!r}, step {step.index}: {level}" + \
        (f"; not counted by kneecap: {WHY[why]}" if why else "")


def _aggregate(step: Step) -> dict[str, Any]:
    requests: dict[str, Any] = {"total": step.requests, "failures": step.requests - step.ok}  # failed: every class
    rates = {"request_rate": _mean(round(step.ok / step.duration_s, 3), "queries/s")} if step.duration_s > 0 else {}
    if step.ok:
        # kneecap keeps token rates over successful requests, so their means per request follow exactly
        inputs = step.throughput.input_tokens_per_s * step.duration_s / step.ok
        outputs = step.throughput.output_tokens_per_s * step.duration_s / step.ok
        if inputs > 0:  # 0: the server sent no usage (a prompt has tokens)
            requests["input_length"] = _mean(round(inputs, 1), "count")
        requests["output_length"] = _mean(round(outputs, 1), "count")
        tin, tout = step.throughput.input_tokens_per_s, step.throughput.output_tokens_per_s
        rates.update(input_token_rate=_mean(tin, "tokens/s"), output_token_rate=_mean(tout, "tokens/s"),
                     total_token_rate=_mean(round(tin + tout, 1), "tokens/s"))
    latency = {theirs: stat for ours, theirs, units in _LATENCY
               if (stat := _stat(step.latency_ms.get(ours), units)) is not None}
    out: dict[str, Any] = {"requests": requests}
    if latency:
        out["latency"] = latency
    if rates:
        out["throughput"] = rates
    return out


def _sessions(s: Sessions) -> dict[str, Any]:
    out: dict[str, Any] = {"total": s.ended, "succeeded": s.ended - s.failed, "failed": s.failed}
    if s.calls_mean is not None:
        out["events_per_session"] = _mean(s.calls_mean, "count")
    if (duration := _stat(s.duration_ms, "ms")) is not None:
        out["session_duration"] = duration
    return out


def _observability(step: Step) -> dict[str, Any] | None:
    """The server's own /metrics over the step, where kneecap has a mean: queue length (scrape mean, max) and the
    prefix cache's hit rate (the step's hits ÷ queries: the query-weighted mean)."""
    metrics: dict[str, Any] = {}
    if step.server is not UNSET and step.server.waiting_mean is not None:
        metrics["waiting_requests"] = {"units": "count", "mean": step.server.waiting_mean}
        if step.server.waiting_max is not None:
            metrics["waiting_requests"]["max"] = step.server.waiting_max
    if step.prefix_cache is not UNSET and step.prefix_cache.server.hit_rate is not None:
        metrics["cache_hit_rate"] = _mean(step.prefix_cache.server.hit_rate, "fraction")
    return {"components": [{"component_label": _ENDPOINT, "aggregate": metrics}]} if metrics else None
