"""Tail attribution from the rows workers ship, joined to the server's scraped queue by send time."""

from __future__ import annotations

import random

import pytest

from harness.analysis.why.attribute import TailParams, explain_tail
from harness.analysis.why.prefill_hol import long_prompt_threshold
from harness.analysis.why.rows import NEAREST_S, _nearest, columns, explain_rows
from harness.metrics.record import RequestRecord
from harness.metrics.rows import FLAG_AFTER_ERROR, FLAG_NEW_CONNECTION, ROW_FIELDS, encode_row

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


def random_rows(seed: int, n: int) -> list[list]:
    """Rows as a worker ships them, with what the wire allows: failures (no latencies), unknown fields, a stall."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        prompt = round(rng.lognormvariate(7, 0.5)) * (10 if rng.random() < 0.03 else 1)
        ttft = rng.lognormvariate(-2.3, 0.2) + prompt * 2e-5 + (0.3 if 20 < i * 60 / n < 21 else 0)
        failed = rng.random() < 0.03
        rec = RequestRecord(start=0.0, ttft_s=ttft, e2e_s=ttft + rng.lognormvariate(1.3, 0.3),
                            ttfo_s=ttft + rng.random() if rng.random() < 0.9 else None,
                            output_tokens=rng.randrange(1, 400), prompt_tokens=None if rng.random() < 0.02 else prompt,
                            cached_tokens=rng.choice((0, prompt // 2)), new_connection=rng.random() < 0.05,
                            after_error=rng.random() < 0.02, in_flight=rng.randrange(30), turn=rng.randrange(1, 9),
                            chunk_times=[ttft, ttft + rng.random()] if rng.random() < 0.95 else [ttft],
                            sent_s=rng.random() * 0.004, loop_lag_s=rng.choice((None, rng.random() * 0.003)),
                            error="HTTP 503" if failed else None)
        rows.append(encode_row(rec, i * 60 / n, worker=rng.randrange(3)))
    return rows


def _hol_words(threshold: int) -> str:
    return f"head-of-line blocking behind long prefills (prompts over {threshold:,} tokens); consider chunked prefill"


def test_columns_are_the_rows_field_by_field():
    rows = random_rows(1, 500)
    c = columns(rows)
    assert list(c) == list(ROW_FIELDS)
    assert all(c[f] == [r[k] for r in rows] for k, f in enumerate(ROW_FIELDS))
    assert columns([]) == {f: [] for f in ROW_FIELDS}
    with pytest.raises(ValueError, match="a request row has 19 fields"):
        columns([*rows[:3], rows[3][:-1], *rows[4:]])


@pytest.mark.parametrize(("seed", "n", "max_rest"), [(1, 3000, 5000), (2, 6000, 800), (3, 20_000, 5000)])
def test_rows_by_column_say_what_the_rows_in_seconds_say(seed: int, n: int, max_rest: int):
    """``explain_rows`` reads the latencies in tenths of a ms and derives flags, send times and the queue for the
    rows tested only; the answer is that of every row converted first (the per-request path it replaced)."""
    rows = random_rows(seed, n)
    rng = random.Random(seed)
    waiting = [(STARTED + 0.5 * k, float(rng.randrange(20))) for k in range(120) if not 40 < k < 50]  # a gap
    params = TailParams(max_rest=max_rest)
    seconds = {"ttft_s": 0, "tpot_s": 1, "e2e_s": 2, "ttfo_s": 3}
    flags = {"new_connection": FLAG_NEW_CONNECTION, "after_error": FLAG_AFTER_ERROR}
    whole = {**{m: [None if r[k] is None else r[k] / 10_000 for r in rows] for m, k in seconds.items()},
             **{f: [r[k] for r in rows] for f, k in (("prompt_tokens", 4), ("output_tokens", 5), ("cached_tokens", 6),
                                                      ("in_flight", 8), ("turn", 10), ("worker", 11))},
             **{f: [bool(r[7] & bit) for r in rows] for f, bit in flags.items()},
             "t_in_step_s": [r[9] / 1000 for r in rows],
             **{f: [None if r[k] is None else r[k] / 10 for r in rows]
                for f, k in (("send_ms", 16), ("loop_lag_ms", 17))},
             "server_waiting": [_nearest([t for t, _ in waiting], waiting, STARTED + r[9] / 1000) for r in rows]}
    # behind a long prefill, by brute force over every long request's wait (prefill_hol bisects sorted windows)
    threshold = long_prompt_threshold([r[4] for r in rows])
    waits = [(r[9], r[9] + r[0] / 10) for r in rows if r[4] is not None and r[4] >= threshold and r[0] is not None]
    whole["behind_long_prefill"] = [None if r[4] is None or r[0] is None or r[4] >= threshold else
                                    any(a < r[9] + r[0] / 10 and b > r[9] for a, b in waits) for r in rows]
    ours = explain_rows(rows, params, waiting=waiting, started=STARTED)
    assert ours.to_dict() == explain_tail(whole, params, words={"hol": _hol_words(threshold)}).to_dict()
    assert ours.to_dict() == explain_rows(columns(rows), params, waiting=waiting, started=STARTED).to_dict()
    assert {a.verdict for a in ours.attributions} >= {"cause"}
