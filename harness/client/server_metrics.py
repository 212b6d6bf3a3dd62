"""The endpoint's own view: its Prometheus ``/metrics`` mapped to running/waiting requests, KV-cache use and
preemptions. Names: vLLM (``vllm:*``), SGLang (``sglang:*``), TGI (``tgi_*``). Parsing is pure; ``scrape`` does
one bounded HTTP GET and never raises. Prefix-cache counters: vLLM v1's ``vllm:prefix_cache_queries`` / ``_hits``."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["ServerSample", "parse_server_metrics", "scrape"]

# Our field → the names servers use for it (samples of one name are summed over label sets).
_NAMES = {
    "running": ("vllm:num_requests_running", "sglang:num_running_reqs", "tgi_batch_current_size"),
    "waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs", "tgi_queue_size"),
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"),
    "preemptions": ("vllm:num_preemptions_total", "vllm:num_preemptions"),
    # Prefix cache, in tokens (vLLM v1 counters; SGLang exposes only a hit-rate gauge, not a counter pair).
    "prefix_cache_queries": ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_queries"),
    "prefix_cache_hits": ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_hits"),
}


@dataclass(frozen=True)
class ServerSample:
    running: float | None
    waiting: float | None
    kv_cache_usage: float | None
    """0..1."""
    preemptions: float | None
    """Cumulative count."""
    prefix_cache_queries: float | None = None
    """Cumulative prompt tokens looked up in the prefix cache."""
    prefix_cache_hits: float | None = None
    """Cumulative prompt tokens found there."""


def parse_server_metrics(text: str) -> ServerSample | None:
    """None when the text is not Prometheus exposition or has none of the known names."""
    sums: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                sums[s.name] = sums.get(s.name, 0.0) + s.value
    except (ValueError, TypeError, IndexError):
        return None
    found = {field: next((sums[n] for n in names if n in sums), None) for field, names in _NAMES.items()}
    if all(v is None for v in found.values()):
        return None
    return ServerSample(**found)


def scrape(url: str, timeout_s: float = 2.0, context: ssl.SSLContext | None = None) -> ServerSample | None:
    """The endpoint's /metrics now, or None when it does not answer; ``context``: the endpoint's TLS settings."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s, context=context) as resp:
            return parse_server_metrics(resp.read(4 << 20).decode("utf-8", "replace"))
    except (urllib.error.URLError, OSError, ValueError):
        return None
