"""Per-request rows for tail attribution: exact enough, small on the wire, sampled uniformly past the cap."""

from __future__ import annotations

import msgpack
import pytest

from harness.metrics import aggregate
from harness.metrics.aggregate import Bucket, Recorder
from harness.metrics.record import RequestRecord
from harness.metrics.rows import ROW_FIELDS, check_rows, decode_row, encode_row, frozen_rows, long_gaps


def rec(**kw) -> RequestRecord:
    base = dict(start=10.0, sent_s=0.0031, loop_lag_s=0.0004, ttft_s=0.2345, e2e_s=1.5, headers_s=0.01,
                connect_s=0.0021, ttfo_s=0.2345, output_tokens=64, prompt_tokens=950, cached_tokens=512,
                chunk_times=[0.2345, 1.5], in_flight=12, new_connection=True)
    return RequestRecord(**{**base, **kw})


def test_a_row_round_trips_to_a_tenth_of_a_millisecond():
    r = rec(turn=3)
    d = decode_row(encode_row(r, 12.3456, worker=2))
    assert d["ttft_s"] == pytest.approx(0.2345) and d["e2e_s"] == 1.5 and d["tpot_s"] == pytest.approx(0.0201)
    counts = (d["prompt_tokens"], d["output_tokens"], d["cached_tokens"], d["in_flight"], d["turn"])
    assert counts == (950, 64, 512, 12, 3)
    assert d["new_connection"] and not d["after_error"] and not d["failed"]
    assert d["t_in_step_s"] == 12.346 and d["worker"] == 2
    assert (d["headers_s"], d["connect_s"], d["server_prefill_s"]) == (0.01, 0.0021, None)


def test_golden_bytes_and_size():
    row = encode_row(rec(), 7.5, worker=1)
    assert msgpack.packb(row) == bytes.fromhex("dc0013cd0929ccc9cd3a98cd0929cd03b640cd0200010ccd1d4cc0016415c0c00a04c0")
    assert len(msgpack.packb(row)) == 35  # the budget: <= 40 bytes a request (19 fields: a 3-byte header)
    assert msgpack.packb(encode_row(rec(class_index=2), 7.5, worker=1))[-1:] == b"\x02"  # a mix's class: 1 byte


def test_a_row_of_the_previous_kneecap_is_read_with_no_gaps():
    for fields in (15, 16, 18):  # before ``gaps``; before ``send`` and ``lag``; before ``class``
        rows = [encode_row(rec(class_index=1), 7.5, worker=1)[:fields]]
        check_rows(rows)
        d = decode_row(rows[0])
        assert len(rows[0]) == len(ROW_FIELDS) and d["class_index"] is None
        assert (d["send_s"] is None and d["loop_lag_s"] is None) == (fields < 18)
        assert d["ttft_s"] == pytest.approx(0.2345) and d["gaps_ms"] is None  # two chunks: too short either way


def test_long_gaps_are_the_streams_own_long_silences():
    steady = [0.1 + 0.005 * k for k in range(40)]
    assert long_gaps(steady) == [] and long_gaps(steady[:4]) is None  # too short to know its usual gap
    paused = steady[:20] + [t + 0.2 for t in steady[20:]]  # 200 ms without a chunk after the 20th
    assert long_gaps(paused) == [round(steady[19] * 1000), 205]
    slow = [0.5 + 0.05 * k for k in range(40)]  # 50 ms a chunk: a 120 ms gap is < 4x its usual, not a silence
    assert long_gaps(slow[:20] + [t + 0.07 for t in slow[20:]]) == []
    assert long_gaps(slow[:20] + [t + 0.2 for t in slow[20:]]) == [round(slow[19] * 1000), 250]


def test_a_silence_the_reader_made_is_no_stream_silence():
    """A late receive of several chunks dates them all by the newest: the gap before it is the reader's (a starved
    client), not the server's; the row says so in its flags and leaves that gap out."""
    steady = [0.1 + 0.005 * k for k in range(40)]
    late = steady[:20] + [steady[19] + 0.2] * 3 + [steady[19] + 0.2 + 0.005 * k for k in range(1, 18)]  # 200 ms
    # unread, then 3 chunks in one receive (the kernel's newest time), then on time again
    assert long_gaps(late) == [round(steady[19] * 1000), 200]
    assert long_gaps(late, late=[20]) == []
    paused = steady[:20] + [t + 0.2 for t in steady[20:]]
    assert long_gaps(paused, late=[31]) == [round(steady[19] * 1000), 205]  # a late receive elsewhere: kept
    d = decode_row(encode_row(rec(chunk_times=late, late_chunks=[20]), 1.0, worker=0))
    assert d["late_stamps"] and d["gaps_ms"] == []
    assert not decode_row(encode_row(rec(chunk_times=late), 1.0, worker=0))["late_stamps"]


def test_a_failure_keeps_its_features_but_no_latency():
    d = decode_row(encode_row(rec(error="reset", after_error=True), 1.0, worker=0))
    assert d["failed"] and d["after_error"] and d["ttft_s"] is None and d["e2e_s"] is None
    assert d["prompt_tokens"] == 950


def test_malformed_rows_are_refused():
    for bad in ([1, 2], "x", [None] * (len(ROW_FIELDS) + 1)):
        with pytest.raises(ValueError):
            decode_row(bad)  # type: ignore[arg-type]


def test_the_recorder_keeps_rows_of_the_measured_part_only():
    r = Recorder(warmup_s=1.0)
    r.worker = 4
    r.set_step(0, 100.0)
    r.add(rec(start=100.2), 100.5)  # warm-up
    r.add(rec(start=101.5), 102.0)
    buckets = {phase: b for _, phase, b in r.drain()}
    assert buckets["warmup"].rows == [] and len(buckets["measure"].rows) == 1
    assert decode_row(buckets["measure"].rows[0])["t_in_step_s"] == 1.5
    wire = Bucket.from_wire(msgpack.unpackb(msgpack.packb(buckets["measure"].to_wire())))
    assert list(map(list, wire.rows)) == buckets["measure"].rows and wire.rows_seen == 1


def test_rows_off_the_wire_are_tuples_with_the_same_values_and_bytes():
    """A master keeps rows as tuples (out of the garbage collector's way, ``frozen_rows``): same values, gaps
    included, and the same bytes when packed again."""
    import gc

    rows = [encode_row(rec(start=101.5), 1.5, 4) for _ in range(3)]
    rows[1][ROW_FIELDS.index("gaps")] = [120, 200]
    packed = msgpack.packb(rows)
    frozen = frozen_rows(msgpack.unpackb(packed))
    assert all(type(r) is tuple for r in frozen) and frozen[1][ROW_FIELDS.index("gaps")] == (120, 200)
    assert msgpack.packb(frozen) == packed and decode_row(frozen[0])["t_in_step_s"] == 1.5
    older = [row[:15] for row in msgpack.unpackb(packed)]  # an older kneecap's rows, and a bool flag: check_rows' way
    older[2][7] = True
    assert frozen_rows(older) == [(*row[:15], None, None, None, None) for row in frozen[:2]] + [
        (*frozen[2][:7], True, *frozen[2][8:15], None, None, None, None)]
    gc.collect()
    gc.collect()  # a row is untracked once its gaps tuple is (CPython checks each tuple's items as it collects)
    assert not any(map(gc.is_tracked, frozen))  # what they are for


def test_past_the_cap_rows_are_a_uniform_sample_of_every_worker(monkeypatch):
    monkeypatch.setattr(aggregate, "ROWS_CAP", 1000)
    fleet = Bucket()
    for worker, n in ((0, 3000), (1, 1000)):  # worker 0 sent 3x the requests: 3/4 of the kept rows
        b = Bucket()
        b.add_rows([[None] * 11 + [worker, None, None, None] for _ in range(n)], n)
        fleet.merge(b)
    assert len(fleet.rows) == 1000 and fleet.rows_seen == 4000
    assert 700 <= sum(r[11] == 0 for r in fleet.rows) <= 800


def test_small_reports_into_a_full_bucket_keep_the_sample_uniform(monkeypatch):
    """The master's case: a full bucket takes many small reports; each costs O(report), and every request keeps
    the same chance to be among the rows (here the first 2000 and the 40 later reports of 50 end up ~half each)."""
    monkeypatch.setattr(aggregate, "ROWS_CAP", 1000)
    fleet = Bucket()
    first = Bucket()
    first.add_rows([[None] * 11 + [0, None, None, None] for _ in range(2000)], 2000)
    fleet.merge(first)
    for k in range(40):
        b = Bucket()
        b.add_rows([[None] * 11 + [1, k, None, None] for _ in range(50)], 50)
        fleet.merge(b)
    assert len(fleet.rows) == 1000 and fleet.rows_seen == 4000
    assert 420 <= sum(r[11] == 1 for r in fleet.rows) <= 580
    early, late = (sum(r[11] == 1 and r[12] < 20 for r in fleet.rows), sum(r[12] is not None and r[12] >= 20
                                                                            for r in fleet.rows))
    assert 0.7 < early / late < 1.4  # neither the early nor the late reports crowd the others out


def test_a_window_merge_can_leave_the_rows_out():
    b = Bucket()
    b.add_rows([[None] * 15], 1)
    window = Bucket()
    window.merge(b, rows=False)
    assert window.rows == [] and window.rows_seen == 0
