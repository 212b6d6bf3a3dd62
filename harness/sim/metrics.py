"""The simulator's Prometheus ``/metrics``, with vLLM's metric names so scrapers built for vLLM work.

Gauges and counters are read from the engine at scrape time (nothing on the hot path); the three
latency histograms are observed as tokens are sent, with vLLM's bucket bounds. With the prefix cache
on, vLLM v1's ``vllm:prefix_cache_queries_total`` and ``vllm:prefix_cache_hits_total`` (in tokens:
prompt tokens looked up, and those found) are there too.

Per-stage histograms, observed once per finished generation request from the engine's own times
(``Sequence.stages()``): ``vllm:request_queue_time_seconds`` (arrival → first scheduled),
``vllm:request_prefill_time_seconds`` (scheduled → first token), ``vllm:request_decode_time_seconds``
(first token → last token), ``vllm:request_inference_time_seconds`` (scheduled → last token). Names,
help texts and buckets (``request_latency_buckets``, the e2e histogram's) follow vLLM v1's
``PrometheusStatLogger`` in ``vllm/v1/metrics/loggers.py`` (vllm-project/vllm at commit 005a810bc40f,
0.9-era: ``vllm:gpu_cache_usage_perc`` still there, deprecated). ``vllm:time_to_first_token_seconds`` is
arrival (first request bytes) → first token sent, as vLLM's; it is measured on the real clock, so it exceeds
queue + prefill (the engine's planned times) by how late the first token went out.

Several served models (``--serve-model``, ``models.py``): every family has one sample (or histogram child) per
model, labelled ``model_name`` as vLLM labels its served model; a LoRA adapter's requests count under its base
model (vLLM's ``model_name`` is the served model, never the adapter).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from harness.sim.engine import Engine, Sequence

__all__ = ["ModelMetrics", "SimMetrics"]

_TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
_ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0)
_E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
                480.0, 960.0, 1920.0, 7680.0)


class _EngineCollector:
    """Every engine's gauges and counters, one sample per model in each family."""

    def __init__(self, engines: dict[str, Engine]) -> None:
        self._engines = engines

    def _family(self, cls: type, name: str, doc: str, value: Callable[[Engine], float]) -> Metric:
        family = cls(name, doc, labels=["model_name"])
        for model, engine in self._engines.items():
            family.add_metric([model], value(engine))
        return family

    def collect(self) -> Iterator[Metric]:
        for name, doc, value in (
            ("vllm:num_requests_running", "Number of requests in model execution batches.", lambda e: len(e.running)),
            ("vllm:num_requests_waiting", "Number of requests waiting to be processed.", lambda e: len(e.waiting)),
            ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", lambda e: e.kv_usage),
        ):
            yield self._family(GaugeMetricFamily, name, doc, value)
        for name, doc, value in (
            ("vllm:num_preemptions", "Cumulative number of preemptions from the engine.",
             lambda e: e.preemptions_total),
            ("vllm:prompt_tokens", "Number of prefill tokens processed.", lambda e: e.prompt_tokens_total),
            ("vllm:generation_tokens", "Number of generation tokens processed.", lambda e: e.generation_tokens_total),
        ):
            yield self._family(CounterMetricFamily, name, doc, value)
        if next(iter(self._engines.values())).prefix_caching:
            for name, doc, value in (
                ("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.",
                 lambda e: e.prefix_cache_queries_total),
                ("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
                 lambda e: e.prefix_cache_hits_total),
            ):
                yield self._family(CounterMetricFamily, name, doc, value)


class ModelMetrics:
    """One model's latency histograms (its ``model_name`` label's children)."""

    def __init__(self, families: dict[str, Histogram], model: str) -> None:
        self.ttft, self.itl, self.e2e = (families[k].labels(model) for k in ("ttft", "itl", "e2e"))
        self.stages = {k: families[k].labels(model) for k in _STAGES}

    def finished(self, seq: Sequence) -> None:
        """Observe the stage times of a request that finished (nothing for one that never had a token)."""
        times = seq.stages()
        if times is None:
            return
        h = self.stages
        h["queue"].observe(times.queue_s)
        h["prefill"].observe(times.prefill_s)
        h["decode"].observe(times.decode_s)
        h["inference"].observe(times.inference_s)


_STAGES = {"queue": "WAITING", "prefill": "PREFILL", "decode": "DECODE", "inference": "RUNNING"}


class SimMetrics:
    """The registry over every served model's engine; ``model(name)`` is one model's histograms."""

    def __init__(self, engines: dict[str, Engine]) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_EngineCollector(engines))

        def hist(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, ["model_name"], buckets=buckets, registry=self.registry)

        families = {
            "ttft": hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                         _TTFT_BUCKETS),
            "itl": hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                        _ITL_BUCKETS),
            "e2e": hist("vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.",
                        _E2E_BUCKETS),
            **{name: hist(f"vllm:request_{name}_time_seconds", f"Histogram of time spent in {phase} phase for "
                          f"request.", _E2E_BUCKETS) for name, phase in _STAGES.items()}}
        self.models = {name: ModelMetrics(families, name) for name in engines}

    def model(self, name: str) -> ModelMetrics:
        return self.models[name]

    def render(self) -> bytes:
        return generate_latest(self.registry)
