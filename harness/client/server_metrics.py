"""The endpoint's own view: its Prometheus ``/metrics`` mapped to running/waiting requests, KV-cache use,
preemptions, token and time counters, and its per-stage latency histograms. Names: vLLM (``vllm:*``), SGLang
(``sglang:*``), TGI (``tgi_*``), llama.cpp (``llamacpp:*``, with ``--metrics``); docs/server-timing.md lists who
reports what. Parsing is pure; ``scrape`` does one bounded HTTP GET and never raises. Prefix-cache counters:
vLLM v1's ``vllm:prefix_cache_queries`` / ``_hits``.

A histogram is kept as the server sends it, cumulative since the server started (``Histogram``); the step's
share is the delta of two scrapes (``analysis/histogram.py``). Series of one name are summed over their label
sets on the bucket bounds they all have, so the sum is exact (a label set with other bounds only widens buckets).

Only the samples named here are parsed: a line's name is looked up before anything else of it is read, so the
rest of the page (vLLM 0.32's is ~52 KB, 614-629 lines, ~90 of them ours) costs a split and a prefix test
(docs/server-timing.md: the cost per scrape).
"""

from __future__ import annotations

import math
import re
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass

__all__ = ["Histogram", "ServerSample", "parse_server_metrics", "scrape"]

# Our field → the names servers use for it (samples of one name are summed over label sets; the first name present
# wins).
_NAMES = {
    "running": ("vllm:num_requests_running", "sglang:num_running_reqs", "tgi_batch_current_size",
                "llamacpp:requests_processing"),
    "waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs", "tgi_queue_size", "llamacpp:requests_deferred"),
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage",
                       "llamacpp:kv_cache_usage_ratio"),  # llama.cpp: older builds only
    "preemptions": ("vllm:num_preemptions_total", "vllm:num_preemptions"),
    # Prefix cache, in tokens (vLLM v1 counters; SGLang exposes only a hit-rate gauge, not a counter pair).
    "prefix_cache_queries": ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_queries"),
    "prefix_cache_hits": ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_hits"),
    # Token counters: vLLM, SGLang (python/sglang/srt/metrics/collector.py), llama.cpp (tools/server README).
    "prompt_tokens": ("vllm:prompt_tokens_total", "sglang:prompt_tokens_total", "llamacpp:prompt_tokens_total"),
    "generation_tokens": ("vllm:generation_tokens_total", "sglang:generation_tokens_total",
                          "llamacpp:tokens_predicted_total"),
    # llama.cpp's busy time, summed over its slots: prompt processing and generation.
    "prefill_seconds": ("llamacpp:prompt_seconds_total",),
    "decode_seconds": ("llamacpp:tokens_predicted_seconds_total",),
}

# Our histogram → the servers' names. vLLM: vllm/v1/metrics/loggers.py (queue = queued → scheduled, prefill =
# scheduled → first token, decode = first → last token, inference = prefill + decode; TTFT and e2e from arrival).
# SGLang: python/sglang/srt/metrics/collector.py (queue_time_seconds: waiting queue → forward). TGI:
# router/src/server.rs and docs/source/reference/metrics.md (``*_duration`` histograms; inference = after the queue
# to the last token; mean time per token per request). SGLang's inter_token_latency_seconds and vLLM's
# inter_token_latency_seconds are per token, not per request, and TGI's tgi_batch_*_duration per batch: not mapped.
_HISTOGRAMS = {
    "queue_time": ("vllm:request_queue_time_seconds", "sglang:queue_time_seconds", "tgi_request_queue_duration"),
    "prefill_time": ("vllm:request_prefill_time_seconds",),
    "decode_time": ("vllm:request_decode_time_seconds",),
    "inference_time": ("vllm:request_inference_time_seconds", "tgi_request_inference_duration"),
    "ttft": ("vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds"),
    "e2e": ("vllm:e2e_request_latency_seconds", "sglang:e2e_request_latency_seconds", "tgi_request_duration"),
    "time_per_token": ("vllm:request_time_per_output_token_seconds", "tgi_request_mean_time_per_token_duration"),
    # Per token, not per request: every gap between two output tokens (vLLM 0.32; before v0.11 vLLM called it
    # time_per_output_token_seconds; SGLang's collector.py). Its sum/count is the exact mean inter-token gap.
    "itl": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds",
            "sglang:inter_token_latency_seconds"),
}
_HIST_SAMPLES = {name + part: (name, part) for names in _HISTOGRAMS.values() for name in names
                 for part in ("_bucket", "_sum", "_count")}
"""A histogram's sample name → (its name, which part): one dict lookup per sample."""
_WANTED = frozenset(_HIST_SAMPLES) | {n for names in _NAMES.values() for n in names}
_PREFIXES = tuple(sorted({n.split(":", 1)[0] + ":" if ":" in n else n.split("_", 1)[0] + "_" for n in _WANTED}))
"""What a wanted sample's line starts with ("vllm:", "tgi_", ...): most unwanted lines stop at this test."""
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"')
"""One label pair; a value may hold escaped quotes, backslashes and commas (the exposition format's escapes)."""


@dataclass(frozen=True, slots=True)
class Histogram:
    """A cumulative Prometheus histogram as scraped: observations since the server started, in seconds."""

    bounds: tuple[float, ...]
    """Upper bounds (``le``), ascending; the last is ``inf``."""
    counts: tuple[float, ...]
    """Observations <= each bound (cumulative, as Prometheus sends them)."""
    sum: float
    count: float


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
    prompt_tokens: float | None = None
    """Cumulative prompt tokens processed (llama.cpp: cached ones excluded)."""
    generation_tokens: float | None = None
    """Cumulative output tokens."""
    prefill_seconds: float | None = None
    """Cumulative seconds spent processing prompts (llama.cpp, summed over its slots)."""
    decode_seconds: float | None = None
    """Cumulative seconds spent generating (llama.cpp, summed over its slots)."""
    queue_time: Histogram | None = None
    """Per request: arrival → scheduled (vLLM, SGLang, TGI)."""
    prefill_time: Histogram | None = None
    """Per request: scheduled → first token (vLLM)."""
    decode_time: Histogram | None = None
    """Per request: first → last token (vLLM)."""
    inference_time: Histogram | None = None
    """Per request: scheduled → last token (vLLM, TGI)."""
    ttft: Histogram | None = None
    """Per request: arrival → first token, the server's clock (vLLM, SGLang)."""
    e2e: Histogram | None = None
    """Per request: arrival → last token (vLLM, SGLang, TGI)."""
    time_per_token: Histogram | None = None
    """Per request: its mean time per output token (vLLM v1, TGI)."""
    itl: Histogram | None = None
    """Per output token after the first: the gap before it (vLLM, SGLang): one observation per token."""


class _Series:
    """One histogram name's samples, summed over label sets as they come."""

    __slots__ = ("buckets", "count", "sum")

    def __init__(self) -> None:
        self.buckets: dict[float, list[float]] = {}  # le → [summed count, label sets with this bound]
        self.sum = self.count = 0.0

    def add(self, part: str, le: str | None, value: float) -> None:
        if part == "_bucket":
            bound = float(le)  # type: ignore[arg-type]  # "+Inf" reads as inf; a missing or bad le raises
            b = self.buckets.get(bound)
            if b is None:
                self.buckets[bound] = [value, 1]
            else:
                b[0] += value
                b[1] += 1
        elif part == "_sum":
            self.sum += value
        else:
            self.count += value

    def histogram(self) -> Histogram | None:
        inf = self.buckets.get(math.inf)
        if inf is None:  # no +Inf bucket: not a histogram we can read
            return None
        # Every label set has a +Inf bucket: the bounds all of them have are those seen as often.
        bounds = sorted(le for le, (_, n) in self.buckets.items() if n == inf[1])
        return Histogram(bounds=tuple(bounds), counts=tuple(self.buckets[le][0] for le in bounds), sum=self.sum,
                         count=self.count)


def _samples(text: str):
    """(name, labels text or "", value text) of each wanted sample line, in order; an unwanted line is skipped
    after a prefix test and a name lookup, never parsed."""
    wanted, prefixes = _WANTED, _PREFIXES
    for line in text.splitlines():
        if not line.startswith(prefixes):
            continue
        brace = line.find("{")
        space = line.find(" ")
        if brace != -1 and (space == -1 or brace < space):
            name = line[:brace].rstrip()
            if name not in wanted:
                continue
            close = line.rfind("}")
            if close < brace:
                raise ValueError(f"unclosed labels: {line[:80]!r}")
            yield name, line[brace + 1:close], line[close + 1:]
        else:
            name = line[:space] if space != -1 else line
            if name in wanted:
                yield name, "", line[len(name):]


def _le(labels: str) -> str | None:
    for key, value in _LABEL.findall(labels):
        if key == "le":
            return value
    return None


def parse_server_metrics(text: str) -> ServerSample | None:
    """None when the text is not Prometheus exposition or has none of the known names."""
    sums: dict[str, float] = {}
    series: dict[str, _Series] = {}
    hist_samples = _HIST_SAMPLES
    try:
        for name, labels, rest in _samples(text):
            value = float(rest.split()[0])  # a timestamp may follow the value
            hit = hist_samples.get(name)
            if hit is None:
                sums[name] = sums.get(name, 0.0) + value
            elif not math.isnan(value):  # a NaN would poison the step's delta
                ser = series.get(hit[0])
                if ser is None:
                    ser = series[hit[0]] = _Series()
                ser.add(hit[1], _le(labels) if hit[1] == "_bucket" else None, value)
    except (ValueError, TypeError, IndexError):
        return None
    found: dict[str, object] = {field: next((sums[n] for n in names if n in sums), None)
                                for field, names in _NAMES.items()}
    for field, names in _HISTOGRAMS.items():
        ser = next((series[n] for n in names if n in series), None)
        found[field] = ser.histogram() if ser is not None else None
    if all(v is None for v in found.values()):
        return None
    return ServerSample(**found)  # type: ignore[arg-type]  # floats by _NAMES, Histograms by _HISTOGRAMS


def scrape(url: str, timeout_s: float = 2.0, context: ssl.SSLContext | None = None) -> ServerSample | None:
    """The endpoint's /metrics now, or None when it does not answer; ``context``: the endpoint's TLS settings."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s, context=context) as resp:
            return parse_server_metrics(resp.read(4 << 20).decode("utf-8", "replace"))
    except (urllib.error.URLError, OSError, ValueError):
        return None
