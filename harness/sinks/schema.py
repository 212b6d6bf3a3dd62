"""What kneecap writes to InfluxDB: measurements, tags, fields. Pure; the README and Grafana follow this.

Every point carries the tags ``run`` (run id), ``scenario`` and ``model``; below are the others.
Latency fields are milliseconds. Cardinality stays low: no per-request series.
"""

from __future__ import annotations

__all__ = ["COMMON_TAGS", "MEASUREMENTS", "PERCENTILE_FIELDS"]

COMMON_TAGS = ("run", "scenario", "model")
PERCENTILE_FIELDS = ("p50", "p90", "p95", "p99", "p999", "mean", "count")

MEASUREMENTS: dict[str, dict] = {
    "kneecap_latency": {
        "doc": "fleet-wide percentiles of one metric over one window (default 5 s), every window",
        "tags": ("metric", "step"),
        "fields": (*PERCENTILE_FIELDS, "window"),
    },
    "kneecap_throughput": {
        "doc": "per window: completed requests, tokens and goodput per second, and the load level",
        "tags": ("step",),
        "fields": ("requests_per_s", "ok_per_s", "output_tokens_per_s", "input_tokens_per_s", "goodput_per_s",
                   "load", "window"),
    },
    "kneecap_errors": {
        "doc": "per window and error class: failed requests",
        "tags": ("step", "error"),
        "fields": ("count", "window"),
    },
    "kneecap_step": {
        "doc": "per judged step: the summary.json numbers of one metric (p99_ci_lo/hi included)",
        "tags": ("metric", "step"),
        "fields": (*PERCENTILE_FIELDS, "p99_ci_lo", "p99_ci_hi", "load"),
    },
    "kneecap_generator": {
        "doc": "per window and worker: load-generator health",
        "tags": ("worker",),
        "fields": ("lag_p99_ms", "lag_max_ms", "cpu_pct", "window"),
    },
    "kneecap_server": {
        "doc": "per window: the endpoint's own /metrics (vLLM names, SGLang/TGI where mapped)",
        "tags": ("step",),
        "fields": ("running", "waiting", "kv_cache_usage", "preemptions", "window"),
    },
    "kneecap_event": {
        "doc": "annotations: run start/end, step changes, the knee",
        "tags": ("kind",),
        "fields": ("text", "load"),
    },
}
