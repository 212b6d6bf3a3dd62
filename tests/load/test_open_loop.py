"""Open loop end to end: the fleet's arrivals follow the schedule, and the generator stays honest."""

from __future__ import annotations

import pytest

from tests.kit.run import kneecap_run, write_scenario

pytestmark = pytest.mark.integration


@pytest.mark.timing
def test_open_loop_rates_and_saturation(tmp_path):
    path = write_scenario(tmp_path, """
        name: open-test
        endpoint: {api: chat, model: sim-tiny}
        workload: {input_tokens: 100, output_tokens: 20}
        load:
          mode: open_staircase
          rate: {start: 40, step: 120, max: 160}
          arrival: {process: constant}
          step: {warmup_s: 1, min_duration_s: 3, min_requests: 1, max_duration_s: 3}
    """, name="open.yaml")
    # warm-up 1 s: a worker's users start up to ~0.4 s after the first step begins on a busy machine (its scenario,
    # samplers and corpus at test start); the arrivals meanwhile go out late, in a burst, and a 0.5 s warm-up let a
    # few of them into the measured part (send lag p99 239 ms in a full-suite run of 2026-12-03, loop lag 1.3 ms)
    r = kneecap_run(path, workers=2, out=tmp_path / "out", lag_limit_ms=None)  # alone: the real 10 ms
    summary = r.summary
    assert summary["mode"] == "open", r.output
    low, high = summary["steps"][0], summary["steps"][1]
    assert (low["rate_rps"], high["rate_rps"]) == (40, 160)
    # Two workers, one schedule: the fleet's achieved arrival rate is the target.
    assert low["arrivals_per_s"] == pytest.approx(40, rel=0.02)
    assert high["arrivals_per_s"] == pytest.approx(160, rel=0.02)
    assert low["dropped_arrivals"] == high["dropped_arrivals"] == 0
    # 160 req/s is past the tiny simulator's ~95 req/s: latency from the intended start explodes...
    lat_low, lat_high = low["latency_ms"], high["latency_ms"]
    assert lat_high["ttft_intended"]["p99"] > 5 * lat_low["ttft_intended"]["p99"]
    # ...because of the server's queue, not the generator: requests left on time, or kneecap said they did not
    # (a send-lag p99 past the 10 ms limit unjudges the step: 10.8 and 15.4 ms in 2 of ~15 fresh-clone CI runs
    # on this 2-core VM, whose moments of steal time no warm-up avoids; a p95 of 14.3 ms in a full-suite run at
    # ~25% steal)
    for step in (low, high):
        lag, gen = step["latency_ms"]["send_lag"], step["generator"]
        assert gen["send_lag_p99_ms"] == pytest.approx(lag["p99"], abs=0.002), (gen, lag)
        assert (lag["p99"] < 10 and gen["reliable"]) or (
            not gen["reliable"] and f"UNRELIABLE: step {step['index']} (" in r.output), (lag, gen, r.output)
