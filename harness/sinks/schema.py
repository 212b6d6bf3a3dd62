"""What kneecap writes to InfluxDB: measurements, tags, fields. Pure; the README and Grafana follow this.

Every point carries the tags ``run`` (run id), ``scenario`` and ``model``; below are the others.
Latency fields are milliseconds. Cardinality stays low: no per-request series.
"""

from __future__ import annotations

from harness.metrics.vocabulary import PERCENTILES, influx_fields

__all__ = ["COMMON_TAGS", "MEASUREMENTS", "PERCENTILE_FIELDS"]

COMMON_TAGS = ("run", "scenario", "model")
PERCENTILE_FIELDS = (*PERCENTILES, "mean", "count")

MEASUREMENTS: dict[str, dict] = {
    "kneecap_latency": {
        "doc": "fleet-wide percentiles of one metric over one window (default 5 s), every window",
        "tags": ("metric", "step"),
        "fields": (*PERCENTILE_FIELDS, "window"),
    },
    "kneecap_throughput": {
        "doc": "per window: completed requests, tokens and goodput per second, and the load level",
        "tags": ("step",),
        "fields": (*influx_fields("kneecap_throughput"), "load", "window"),
    },
    "kneecap_errors": {
        "doc": "per window and error class: failed requests",
        "tags": ("step", "error"),
        "fields": ("count", "window"),
    },
    "kneecap_step": {
        "doc": "per judged step: the summary.json numbers of one metric (p99_ci_lo/hi included); sessions add "
               "session_duration, session_model_time, session_ttft and ttft_turn_<bucket> (e.g. ttft_turn_2-4)",
        "tags": ("metric", "step"),
        "fields": (*PERCENTILE_FIELDS, "p99_ci_lo", "p99_ci_hi", "load"),
    },
    "kneecap_step_class": {
        "doc": "per judged step and class of a workload.mix (tag class): its requests, share of the step's, weight "
               "share, failures, error rate, TTFT/TPOT/E2E p50/p95/p99 (ms) and its own SLO held (1) or not (0)",
        "tags": ("step", "class"),
        "fields": ("requests", "share", "weight_share", "failed", "error_rate", "ttft_p50", "ttft_p95", "ttft_p99",
                   "tpot_p50", "tpot_p95", "tpot_p99", "e2e_p50", "e2e_p95", "e2e_p99", "slo_passed", "load"),
    },
    "kneecap_step_cache": {
        "doc": "per judged step, when the endpoint reports it: prefix-cache hit share from the client's usage "
               "(cached_tokens / prompt_tokens) and from the server's /metrics counters",
        "tags": ("step",),
        "fields": ("client_cached_share", "server_hit_rate", "load"),
    },
    "kneecap_step_ttft": {
        "doc": "per judged step: where TTFT went, means in ms (client TTFT = network + client + server TTFT): headers, "
               "headers to first token, connect (new connections), the server's TTFT, queue and prefill where it says, "
               "and where that came from (server_source)",
        "tags": ("step",),
        "fields": ("client_ttft_ms", "headers_ms", "headers_to_first_token_ms", "connect_ms", "server_ttft_ms",
                   "server_queue_ms", "server_prefill_ms", "network_client_ms", "server_source", "load"),
    },
    "kneecap_step_tail": {
        "doc": "per judged step, latency metric and tail quantile (q: p99, p95): why the tail is slow — verdict "
               "(cause, time, none, too_few), the first cause (a request feature) and the line in words",
        "tags": ("step", "metric", "q"),
        "fields": ("verdict", "cause", "line", "load"),
    },
    "kneecap_step_client": {
        "doc": "per judged step: the client's side: requests that opened a new connection inside their own time and "
               "their share of the step's requests; the workers' CPU seconds in the step, the output tokens streamed "
               "in it (warm-up included), CPU µs per token, the longest GC pause, the share of requests with chunk "
               "times that may be late by more than 1 ms",
        "tags": ("step",),
        "fields": ("new_connections", "new_connection_share", "cpu_s", "output_tokens", "cpu_us_per_token",
                   "gc_pause_max_ms", "shared_stamp_share", "load"),
    },
    "kneecap_step_cost": {
        "doc": "per judged step, with the scenario's cost: block (docs/cost.md): the tokens it consumed (warm-up "
               "included), what they cost metered, cost per 1M output tokens flat (flat price / sustained output "
               "tokens/s) and metered (as is, and blended with the step's input), the break-even output tokens a "
               "month, the monthly capacity at this load, whether the speed floor held (1/0; absent: no floor)",
        "tags": ("step", "currency"),
        "fields": ("input_tokens", "cached_input_tokens", "output_tokens", "test_cost", "flat_per_mtok",
                   "metered_per_mtok", "metered_blended_per_mtok", "break_even_tokens_per_month",
                   "capacity_tokens_per_month", "floor_held", "load"),
    },
    "kneecap_step_sessions": {
        "doc": "per judged step of a sessions workload: sessions ended and failed, mean turns, agent stall (s)",
        "tags": ("step",),
        "fields": ("ended", "failed", "turns_mean", "agent_stall_s", "load"),
    },
    "kneecap_generator": {
        "doc": "per window and worker: load-generator health; its CPU seconds in the window and longest GC pause",
        "tags": ("worker",),
        "fields": ("lag_p99_ms", "lag_max_ms", "cpu_pct", "cpu_s", "gc_pause_max_ms", "window"),
    },
    "kneecap_server": {
        "doc": "per window: the endpoint's own /metrics (vLLM names, SGLang/TGI where mapped)",
        "tags": ("step",),
        "fields": ("running", "waiting", "kv_cache_usage", "preemptions", "prefix_cache_queries", "prefix_cache_hits",
                   "window"),
    },
    "kneecap_event": {
        "doc": "annotations: run start/end, step changes, the knee",
        "tags": ("kind",),
        "fields": ("text", "load"),
    },
}
