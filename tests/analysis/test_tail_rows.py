"""Tail attribution from the rows workers ship, joined to the server's scraped queue by send time."""

from __future__ import annotations

import random

from harness.analysis.tail_rows import NEAREST_S, _nearest, explain_rows
from harness.metrics.record import RequestRecord
from harness.metrics.rows import encode_row

STARTED = 1000.0  # the step's start on the master's clock


def rows_and_waiting(seed: int, stall: bool = False) -> tuple[list[list], list[tuple[float, float]]]:
    """A 60 s step, the server scraped every 0.5 s. Queueing: its queue comes and goes (0-15 waiting, a new level
    each half-second) and each request waits ~25 ms per request ahead of it. A stall: 4 random half-seconds with
    15 waiting and +0.4 s, nothing otherwise."""
    rng = random.Random(seed)
    busy = set(rng.sample(range(120), 4))
    levels = [(15.0 if k in busy else 0.0) if stall else float(rng.randrange(16)) for k in range(120)]
    waiting = [(STARTED + k * 0.5, levels[k]) for k in range(120)]
    rows = []
    for i in range(3000):
        sent = rng.uniform(0, 60)
        level = levels[int(sent / 0.5)]
        ttft = 0.05 + rng.random() * 0.02 + (0.4 if stall and level else 0.025 * level * rng.random())
        rec = RequestRecord(start=0.0, ttft_s=ttft, e2e_s=ttft + 1.0, output_tokens=64, prompt_tokens=900,
                            chunk_times=[ttft], in_flight=8)
        rows.append(encode_row(rec, sent, worker=i % 2))
    return rows, waiting


def test_the_queue_at_send_names_queueing():
    rows, waiting = rows_and_waiting(3)
    ttft = explain_rows(rows, waiting=waiting, started=STARTED).get("ttft_s", 0.99)
    assert ttft is not None and ttft.verdict == "cause" and ttft.causes[0] == "server_waiting", ttft.line
    assert "queueing" in ttft.line


def test_a_queue_in_a_few_windows_only_is_a_stall():
    rows, waiting = rows_and_waiting(3, stall=True)
    ttft = explain_rows(rows, waiting=waiting, started=STARTED).get("ttft_s", 0.99)
    assert ttft is not None and ttft.verdict == "time" and ttft.causes[:2] == ["t_in_step_s", "server_waiting"], \
        ttft.line
    assert "the queue at send grew with it" in ttft.line


def test_without_the_scrapes_a_stall_is_time_not_a_request_feature():
    rows, _ = rows_and_waiting(3, stall=True)
    ttft = explain_rows(rows).get("ttft_s", 0.99)
    assert ttft is not None and ttft.verdict == "time", ttft.line


def test_the_nearest_sample_and_none_past_the_limit():
    samples = [(10.0, 1.0), (10.5, 7.0), (20.0, 3.0)]
    times = [t for t, _ in samples]
    assert _nearest(times, samples, 10.3) == 7 and _nearest(times, samples, 9.0) == 1
    assert _nearest(times, samples, 10.5 + NEAREST_S + 0.1) is None and _nearest(times, samples, 19.0) == 3
