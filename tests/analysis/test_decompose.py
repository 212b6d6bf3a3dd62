"""The TTFT split on plain data: client parts exact, the server's from per-request timings or step histograms."""

from __future__ import annotations

import random

import msgspec
import pytest

from harness.analysis.why.decompose import NEGATIVE, UNKNOWN, ttft_split
from harness.metrics.record import RequestRecord
from harness.metrics.rows import ROW_FIELDS, encode_row
from harness.summary import Server


def rows(n: int = 100, *, prefill_s: float | None = None, new_every: int = 0) -> list[list]:
    out = []
    for i in range(n):
        ttft = 0.100 + i * 0.001  # 100..199 ms
        rec = RequestRecord(start=0.0, ttft_s=ttft, headers_s=0.004, e2e_s=ttft + 1, output_tokens=10,
                            chunk_times=[ttft], server_prefill_s=prefill_s, new_connection=bool(new_every) and
                            i % new_every == 0, connect_s=0.002 if new_every and i % new_every == 0 else None)
        out.append(encode_row(rec, i * 0.1, worker=0))
    out.append(encode_row(RequestRecord(start=0.0, error="reset", e2e_s=0.5), 11.0, worker=0))  # no TTFT
    return out


def test_client_parts_are_exact():
    split = ttft_split(rows(new_every=10), None)
    c = split["client"]
    assert c["ttft"]["n"] == 100 and c["ttft"]["p50_ms"] == 150.0 and c["ttft"]["mean_ms"] == 149.5
    assert c["headers"]["p50_ms"] == 4.0 and c["headers_to_first_token"]["p50_ms"] == 146.0
    assert c["connect"]["n"] == 10 and c["connect"]["p50_ms"] == 2.0 and c["new_connection_share"] == 0.1
    assert split["server"] == {"source": UNKNOWN}


def test_llama_cpp_timings_give_the_server_prefill_per_request():
    split = ttft_split(rows(prefill_s=0.080), None)
    s = split["server"]
    assert s["source"].startswith("per request") and s["prefill"]["p50_ms"] == 80.0 and s["queue"] == UNKNOWN
    assert s["network_client_queue"]["p50_ms"] == 70.0  # 150 - 80, request by request


def test_histograms_give_the_server_ttft_and_the_rest_with_bucket_bounds():
    stages = {"ttft": {"count": 100, "mean_ms": 140.0, "p50_ms": [140.0, 100.0, 250.0],
                       "p95_ms": [240.0, 100.0, 250.0]},
              "queue_time": {"count": 100, "mean_ms": 60.0, "p50_ms": [55.0, 50.0, 100.0]},
              "prefill_time": {"count": 100, "mean_ms": 78.0, "p50_ms": [75.0, 50.0, 100.0]}}
    split = ttft_split(rows(), msgspec.convert({"waiting_mean": 3.0, "stages": stages}, Server))
    s = split["server"]
    assert s["source"].startswith("per step") and s["queue"]["mean_ms"] == 60.0 and s["prefill"]["mean_ms"] == 78.0
    net = s["network_client"]
    assert net == {"mean_ms": 9.5}  # 149.5 - 140: means add up; quantiles do not subtract, so none is given


def test_a_server_mean_above_the_clients_is_named_not_shown_as_a_part():
    stages = {"ttft": {"count": 100, "mean_ms": 400.0, "p50_ms": [400.0, 250.0, 500.0]}}
    net = ttft_split(rows(), msgspec.convert({"stages": stages}, Server))["server"]["network_client"]
    assert net["mean_ms"] == -250.5 and net["note"] == NEGATIVE


def test_no_successful_request_no_split():
    assert ttft_split([encode_row(RequestRecord(start=0.0, error="reset"), 0.0, worker=0)], None) is None


def test_a_step_without_a_histogram_delta_says_so_rather_than_that_the_server_is_silent():
    from harness.analysis.server import NO_STAGE_DELTA, ServerStep
    from harness.client.server_metrics import Histogram, ServerSample

    def sample(n: float) -> ServerSample:
        h = Histogram(bounds=(0.1, 1.0, float("inf")), counts=(n, n, n), sum=0.05 * n, count=n)
        return ServerSample(running=1.0, waiting=0.0, kv_cache_usage=0.1, preemptions=0.0, ttft=h, queue_time=h)

    cut_short = ServerStep()
    cut_short.add(sample(10))  # one scrape in the step: no delta
    summary = cut_short.summary()
    assert summary.stages is msgspec.UNSET and summary.stages_note == NO_STAGE_DELTA
    assert ttft_split(rows(), summary)["server"] == {"source": NO_STAGE_DELTA}
    full = ServerStep()
    full.add(sample(10))
    full.add(sample(30))
    assert full.summary().stages["ttft"].count == 20 and full.summary().stages_note is msgspec.UNSET
    silent = ServerStep()  # a server without the histograms: nothing to note
    silent.add(ServerSample(running=1.0, waiting=0.0, kv_cache_usage=None, preemptions=None))
    assert silent.summary().stages_note is msgspec.UNSET and ttft_split(rows(), silent.summary())["server"] == {
        "source": UNKNOWN}


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("failures", [0.0, 0.05])
def test_the_split_is_every_part_over_the_requests_that_have_it(seed, failures):
    """Against the plain definition, request by request: the fast paths (no failure, every part known) and the
    filtered ones give the same figures."""
    rng = random.Random(seed)
    rs = []
    for i in range(3000):
        new = rng.random() < 0.1
        rec = RequestRecord(start=0.0, ttft_s=rng.uniform(0.01, 0.5), headers_s=rng.uniform(0.001, 0.009),
                            e2e_s=1.0, output_tokens=10, chunk_times=[0.1], new_connection=new,
                            connect_s=rng.uniform(0.001, 0.004) if new else None,
                            sent_s=rng.choice((None, rng.uniform(0, 0.002))), loop_lag_s=rng.uniform(0, 0.003),
                            server_prefill_s=None, error="reset" if rng.random() < failures else None)
        rs.append(encode_row(rec, i * 0.01, worker=0))
    c = ttft_split(rs, None)["client"]
    ok = [r for r in rs if r[0] is not None]

    def stat(vals: list[int]) -> dict | None:
        if not vals:
            return None
        vals = sorted(vals)
        n = len(vals)
        return {"n": n, "mean_ms": round(sum(vals) / n / 10, 3), "p50_ms": round(vals[int(0.5 * n)] / 10, 3),
                "p95_ms": round(vals[int(0.95 * n)] / 10, 3)}

    k = {f: i for i, f in enumerate(ROW_FIELDS)}
    assert c["ttft"] == stat([r[k["ttft"]] for r in ok])
    assert c["headers"] == stat([r[k["headers"]] for r in ok])
    assert c["headers_to_first_token"] == stat([r[k["ttft"]] - r[k["headers"]] for r in ok])
    assert c["connect"] == stat([r[k["connect"]] for r in ok if r[k["flags"]] & 1 and r[k["connect"]] is not None])
    assert c["send"] == stat([r[k["send"]] for r in ok if r[k["send"]] is not None])
    assert c["loop_lag"] == stat([r[k["lag"]] for r in ok])
    assert c["new_connection_share"] == round(sum(1 for r in ok if r[k["flags"]] & 1) / len(ok), 4)
