"""Per-request rows for tail attribution: exact enough, small on the wire, sampled uniformly past the cap."""

from __future__ import annotations

import sys

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.metrics import aggregate
from harness.metrics.aggregate import Bucket
from harness.metrics.by_step import Recorder
from harness.metrics.record import RequestRecord
from harness.metrics.row_columns import RowColumns
from harness.metrics.row_sample import BLOCK_ROWS, RowSample
from harness.metrics.rows import ROW_FIELDS, check_rows, decode_row, encode_row, long_gaps


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


def test_chunks_written_together_do_not_make_every_gap_between_writes_a_silence():
    """A server writing 4 chunks a write every 36 ms: three of four gaps are 0, and the pace is the writes'."""
    batched = [0.05 + 0.036 * (k // 4) for k in range(48)]
    assert long_gaps(batched) == []
    stalled = batched[:24] + [t + 0.15 for t in batched[24:]]  # the front end held 150 ms of writes
    assert long_gaps(stalled) == [round(batched[23] * 1000), 186]
    assert long_gaps([0.4] * 48) == []  # one receive (a gateway's buffer): no silence within it


def test_a_first_token_held_with_the_ones_after_it_is_a_silence_before_it():
    """A front end that stalled before a stream's first token wrote it with the 13 the engine made meanwhile, in one
    receive: no gap between chunks shows it, only a late TTFT; 13 tokens more than the stream's usual receive, at its
    10 ms pace, were held: a 130 ms silence before the first token (``tests/load/test_delivery.py``'s stall caught
    every user so in a CI run, all sent together after the previous stall's flush)."""
    held = [0.16] * 14 + [0.16 + 0.01 * k for k in range(1, 11)]
    assert long_gaps(held) == [30, 130]
    assert long_gaps(held, late=[0]) == [30, -130]  # the reader's late receive may have bunched them: unknown
    assert long_gaps([0.03] * 3 + [0.03 + 0.01 * k for k in range(1, 11)]) == []  # 2 more than usual: 20 < 40 ms
    batched = [0.05 + 0.036 * (k // 4) for k in range(48)]  # a server writing 4 a write: its first is as usual
    assert long_gaps(batched) == []
    four = [0.31 + 0.036 * (k // 4) for k in range(36)]
    assert long_gaps([0.3] * 12 + four) == []  # 8 more than its usual 4: 2 writes' worth (72 ms), < 4 writes'
    assert long_gaps([0.3] * 24 + four) == [120, 180]  # 20 more: 5 writes' worth, at 36 ms a write
    assert long_gaps([0.01] * 20 + [0.02 + 0.01 * k for k in range(10)]) == [0, 10]  # never before the send


def test_a_silence_the_reader_made_is_no_stream_silence():
    """A late receive of several chunks dates them all by the newest: the gap before it is the reader's (a starved
    client), not the server's; the row says so in its flags and keeps that gap as unknown (a negative length: the
    pause detector counts the stream neither silent nor decoding through it)."""
    steady = [0.1 + 0.005 * k for k in range(40)]
    late = steady[:20] + [steady[19] + 0.2] * 3 + [steady[19] + 0.2 + 0.005 * k for k in range(1, 18)]  # 200 ms
    # unread, then 3 chunks in one receive (the kernel's newest time), then on time again
    assert long_gaps(late) == [round(steady[19] * 1000), 200]
    assert long_gaps(late, late=[20]) == [round(steady[19] * 1000), -200]
    paused = steady[:20] + [t + 0.2 for t in steady[20:]]
    assert long_gaps(paused, late=[31]) == [round(steady[19] * 1000), 205]  # a late receive elsewhere: kept
    d = decode_row(encode_row(rec(chunk_times=late, late_chunks=[20]), 1.0, worker=0))
    assert d["late_stamps"] and d["gaps_ms"] == [round(steady[19] * 1000), -200]
    assert not decode_row(encode_row(rec(chunk_times=late), 1.0, worker=0))["late_stamps"]
    assert not d["late_first"]  # the late receive came mid-stream: the first chunk kept its own time
    first = decode_row(encode_row(rec(chunk_times=[0.02] * 3 + steady[3:], late_chunks=[0]), 1.0, worker=0))
    assert first["late_first"] and first["late_stamps"]  # the TTFT is the newest of three chunks' arrival


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
    assert not buckets["warmup"].rows and len(buckets["measure"].rows) == 1
    assert decode_row(buckets["measure"].rows.joined()[0])["t_in_step_s"] == 1.5
    wire = Bucket.from_wire(msgpack.unpackb(msgpack.packb(buckets["measure"].to_wire())))
    assert wire.rows == buckets["measure"].rows and wire.rows_seen == 1


def test_rows_off_the_wire_join_the_columns_with_the_same_values_and_bytes():
    """A master keeps rows by column (``metrics.row_columns``): the same values, gaps as tuples (out of the
    garbage collector's way), the same bytes when shipped again; an older kneecap's rows padded; a malformed
    batch refused whole, by name."""
    import gc

    rows = [encode_row(rec(start=101.5), 1.5, 4) for _ in range(3)]
    rows[1][ROW_FIELDS.index("gaps")] = [120, 200]
    packed = msgpack.packb(rows)
    kept = RowColumns()
    kept.extend_rows(msgpack.unpackb(packed))
    assert len(kept) == 3 and kept[1][ROW_FIELDS.index("gaps")] == (120, 200)
    assert msgpack.packb(kept.rows()) == packed and decode_row(kept[0])["t_in_step_s"] == 1.5
    assert list(kept.columns()["t_ms"]) == [1500] * 3 and len(kept.cols) == len(ROW_FIELDS)
    assert kept.columns()["class"].typecode == "q" and kept[0][ROW_FIELDS.index("class")] is None  # None: NONE
    older = [row[:15] for row in msgpack.unpackb(packed)]  # an older kneecap's rows, and a bool flag: check_rows' way
    older[2][7] = True
    padded = RowColumns.of(older)
    assert list(padded) == [(*row[:15], None, None, None, None) for row in kept.rows()[:2]] + [
        (*kept[2][:7], True, *kept[2][8:15], None, None, None, None)]
    for bad in ([*rows, "x" * len(ROW_FIELDS)], [*rows, dict.fromkeys(range(len(ROW_FIELDS)), 0)],
                [*rows, [*rows[0][:15], 5, *rows[0][16:]]], [*rows, [*rows[0][:7], 1.5, *rows[0][8:]]], {"rows": 1}):
        with pytest.raises(ValueError, match="row"):
            kept.extend_rows(bad)  # type: ignore[arg-type]
    assert len(kept) == 3  # nothing of a refused batch
    gc.collect()
    gc.collect()  # a gaps tuple is untracked once collected (CPython checks each tuple's items as it collects)
    assert not any(map(gc.is_tracked, kept.cols[ROW_FIELDS.index("gaps")]))


@pytest.mark.parametrize("with_numpy", [True, False])
def test_rows_are_taken_and_compressed_by_column(with_numpy, monkeypatch):
    """A master (numpy loaded) compresses every column in one gather, a worker by ``itertools.compress``: the same
    rows."""
    if with_numpy:
        import numpy  # noqa: F401
    else:
        monkeypatch.setitem(sys.modules, "numpy", None)
    kept = RowColumns.of([encode_row(rec(start=100.0 + k), k, 4) for k in range(6)])
    kept.cols[ROW_FIELDS.index("gaps")][2] = (7, 9)
    assert kept.compressed([False, True, True, False, False, False]).rows() == kept.rows()[1:3]
    assert not kept.compressed(b"\x00" * 6) and not RowColumns().compressed(b"")
    t = ROW_FIELDS.index("t_ms")
    assert [r[t] for r in kept.take([4, 1])] == [4000, 1000] and len(kept.take([2])) == 1 and not kept.take([])
    assert list(kept.compressed(b"\x01\x00\x00\x01\x01\x00").columns()["t_ms"]) == [0, 3000, 4000]
    assert list(kept.compressed(k % 2 == 0 for k in range(6)).columns()["t_ms"]) == [0, 2000, 4000]


def test_a_sample_past_its_cap_thins_one_block_a_report_at_one_rate():
    """``RowSample``: below the cap every row; past it the rate halves and the blocks kept are thinned to it one a
    report (never all at once), the open block once it is sealed; ``joined`` brings every block to the rate."""
    sample = RowSample(3 * BLOCK_ROWS)
    for k in range(4):
        sample.add(_rows(k, BLOCK_ROWS))
    assert sample.rate == 0.5 and len(sample.blocks) == 4
    assert [r for _, r in sample.blocks] == [0.5, 1.0, 1.0, 1.0]  # the first block thinned, the others wait
    assert len(sample) == BLOCK_ROWS * 3.5 + (len(sample.blocks[0][0]) - BLOCK_ROWS / 2)
    sample.add(_rows(9, 50))  # a report: the last block is full, so it opens one at its rate; one more thinned
    assert [r for _, r in sample.blocks] == [0.5, 0.5, 1.0, 1.0, 1.0]
    sample.add(_rows(9, 50))  # joins the open block, unthinned until it is sealed
    assert [r for _, r in sample.blocks] == [0.5, 0.5, 0.5, 1.0, 1.0] and len(sample.blocks[-1][0]) == 100
    joined = sample.joined()
    assert all(r == 0.5 for _, r in sample.blocks) and len(joined) == len(sample)
    workers = joined.columns()["worker"]
    for k in range(4):
        assert abs(workers.count(k) - BLOCK_ROWS / 2) < 4 * (BLOCK_ROWS / 4) ** 0.5  # binomial(n, 1/2): 4 sd
    assert 20 <= workers.count(9) <= 80


def test_rows_with_no_open_block_at_their_rate_are_thinned_as_they_come():
    sample = RowSample(3 * BLOCK_ROWS)
    for k in range(4):
        sample.add(_rows(k, BLOCK_ROWS))
    sample.joined()  # every block at the rate (0.5), the last one too
    before = len(sample)
    sample.add(_rows(9, 1000))  # at rate 1: no open block at it, so thinned to 0.5 now (it joins the last block)
    assert all(r == 0.5 for _, r in sample.blocks) and 400 <= len(sample) - before <= 600


def _rows(worker: int, n: int, k: int | None = None) -> RowColumns:
    """``n`` rows of ``worker`` (``k`` in the ``headers`` field), built by column."""
    cols = [[None] * n for _ in ROW_FIELDS]
    cols[ROW_FIELDS.index("worker")], cols[ROW_FIELDS.index("headers")] = [worker] * n, [k] * n
    return RowColumns(cols)


def test_past_the_cap_rows_are_a_uniform_sample_of_every_worker(monkeypatch):
    monkeypatch.setattr(aggregate, "ROWS_CAP", 1000)
    fleet = Bucket()
    for worker, n in ((0, 3000), (1, 1000)):  # worker 0 sent 3x the requests: 3/4 of the kept rows
        b = Bucket()
        b.add_rows(_rows(worker, n), n)
        fleet.merge(b)
    kept = fleet.rows.joined()
    assert fleet.rows_seen == 4000 and 450 <= len(kept) <= 1000, len(kept)  # between half the cap and the cap
    assert abs(len(kept) - 4000 * fleet.rows.rate) <= 4 * (4000 * fleet.rows.rate) ** 0.5  # each request at one rate
    assert 0.7 <= sum(r[11] == 0 for r in kept) / len(kept) <= 0.8


def test_small_reports_into_a_full_bucket_keep_the_sample_uniform(monkeypatch):
    """The master's case: a full bucket takes many small reports; each costs O(report) (``metrics.row_sample``),
    and every request keeps the same chance to be among the rows (here the first 2000 and the 40 later reports of
    50 end up ~half each)."""
    monkeypatch.setattr(aggregate, "ROWS_CAP", 1000)
    fleet = Bucket()
    first = Bucket()
    first.add_rows(_rows(0, 2000), 2000)
    fleet.merge(first)
    for k in range(40):
        b = Bucket()
        b.add_rows(_rows(1, 50, k), 50)
        fleet.merge(b)
    kept = fleet.rows.joined()
    assert fleet.rows_seen == 4000 and 450 <= len(kept) <= 1000, len(kept)
    assert 0.4 <= sum(r[11] == 1 for r in kept) / len(kept) <= 0.6
    early, late = (sum(r[11] == 1 and r[12] < 20 for r in kept), sum(r[12] is not None and r[12] >= 20 for r in kept))
    assert 0.7 < early / late < 1.4  # neither the early nor the late reports crowd the others out


def test_a_window_merge_can_leave_the_rows_out():
    b = Bucket()
    b.add_rows(_rows(0, 1), 1)
    window = Bucket()
    window.merge(b, rows=False)
    assert not window.rows and window.rows_seen == 0


@pytest.mark.parametrize("big, code", [(3, "i"), (2 ** 40, "q")])
def test_rows_by_column_cross_the_wire_as_int32_or_int64(big, code):
    """Version 2 ships the numbers as int32 when every value fits (None as int32's least), else int64: the master
    reads the same rows either way, None included."""
    rows = [encode_row(rec(start=100.0 + k), k, 4) for k in range(3)]
    rows[1][ROW_FIELDS.index("class")] = big
    rows[2][ROW_FIELDS.index("ttft")] = None
    kept = RowColumns.of(rows)
    wire = msgpack.unpackb(msgpack.packb(kept.wire()))
    assert wire[0] == code and len(wire[1]) == (4 if code == "i" else 8) * 3 * (len(ROW_FIELDS) - 1)
    back = RowColumns.from_wire(wire)
    assert back == kept and back.rows() == kept.rows() and back[2][ROW_FIELDS.index("ttft")] is None


@pytest.mark.parametrize("prefill_s", [1e300, 1.7e305, float("inf")])
def test_an_absurd_server_timing_fits_the_row(prefill_s):
    """llama.cpp's ``timings.prompt_ms`` may be any finite float (and ms / 1000 * 10^4 then overflows to inf): the
    row keeps the largest latency it holds, and a worker's rows take it (an int past int64 raised OverflowError)."""
    row = encode_row(rec(server_prefill_s=prefill_s), 1.0, 4)
    assert row[ROW_FIELDS.index("server_prefill")] == 2 ** 62
    sample = RowSample(10)
    sample.append(row)
    assert sample.joined()[0][ROW_FIELDS.index("server_prefill")] == 2 ** 62


def test_rows_off_the_wire_stay_pending_until_read_and_keep_their_order():
    """``from_wire`` keeps a report's numbers as its bytes; ``extend`` gathers them by reference (int32 and int64
    wires, rows of a worker's own between them) and the first read widens them all, in the order they came."""
    def made(first: int, big: int) -> RowColumns:
        rows = [encode_row(rec(start=100.0 + k), k, first + k) for k in range(3)]
        rows[1][ROW_FIELDS.index("class")] = big
        rows[2][ROW_FIELDS.index("ttft")] = None
        return RowColumns.of(rows)

    narrow, local, wide = made(0, 3), made(10, 5), made(20, 2 ** 40)
    parts = [RowColumns.from_wire(msgpack.unpackb(msgpack.packb(r.wire()))) for r in (narrow, wide)]
    assert [p._waiting for p in parts] == [3, 3]  # pending: nothing widened yet
    block = RowColumns()
    block.extend(parts[0])
    block.extend(local)  # settled rows after pending ones: those are widened first
    block.extend(parts[1])
    assert len(block) == 9 and block._pending
    assert block.rows() == narrow.rows() + local.rows() + wide.rows() and not block._pending
    assert block[2][ROW_FIELDS.index("ttft")] is None and block[7][ROW_FIELDS.index("class")] == 2 ** 40


def test_a_sealed_block_is_packed_as_the_next_one_opens():
    pytest.importorskip("numpy")
    sample = RowSample(10 * BLOCK_ROWS)
    report = RowColumns.of([encode_row(rec(start=100.0), 1, 4)] * 1000)
    for _ in range(9):  # 9,000 rows: the first block takes 8 reports, the ninth opens the second
        sample.add(RowColumns.from_wire(report.wire()))
    assert [len(b) for b, _ in sample.blocks] == [8000, 1000]
    (code, _, _), = sample.blocks[0][0]._pending  # one packed part, not 8 reports' wires
    assert code == "p" and [c for c, _, _ in sample.blocks[1][0]._pending] == ["i"]
    assert sample.joined().rows() == report.rows() * 9


_EDGES = [None, 0, -1, 127, -127, -128, 128, 32767, -32768, 2 ** 31 - 1, -(2 ** 31), 2 ** 62, -(2 ** 63) + 1]


_GAPS = st.none() | st.lists(st.integers(0, 2 ** 40), max_size=8)


@given(st.lists(st.tuples(st.lists(st.sampled_from(_EDGES) | st.integers(-(2 ** 63) + 1, 2 ** 63 - 1), min_size=18,
                                   max_size=18), _GAPS), min_size=1, max_size=40))
@settings(max_examples=300, deadline=None, derandomize=True)
def test_packed_rows_read_back_the_same(numbers):
    """Every column at the edges of int8..int64 (a type's least value is None's: -128 needs int16), None anywhere;
    gaps None, empty or long."""
    pytest.importorskip("numpy")
    rows = [[*r[:15], gaps, *r[15:]] for r, gaps in numbers]
    for r in rows:  # flags, send time and worker are never None
        r[7], r[9], r[11] = r[7] or 0, r[9] or 0, r[11] or 0
    packed = RowColumns.of(rows)
    packed.pack()
    assert len(packed) == len(rows) and packed._pending[0][0] == "p"
    assert packed.rows() == RowColumns.of(rows).rows()
    # off the wire as int32 (the master's usual block: narrowed from the reports' bytes, never widened first)
    small = [[v if v is None or k == 15 else max(-(2 ** 31) + 1, min(v, 2 ** 31 - 1)) for k, v in enumerate(r)]
             for r in rows]
    wire = msgpack.unpackb(msgpack.packb(RowColumns.of(small).wire()))
    assert wire[0] == "i"
    half = len(small) // 2
    off = RowColumns.from_wire(msgpack.unpackb(msgpack.packb(RowColumns.of(small[:half]).wire())))
    off.extend(RowColumns.from_wire(msgpack.unpackb(msgpack.packb(RowColumns.of(small[half:]).wire()))))
    off.pack()
    assert off._pending[0][0] == "p" and off.rows() == RowColumns.of(small).rows()


def test_a_usual_block_packs_to_a_third():
    np = pytest.importorskip("numpy")
    rows = [encode_row(rec(start=100.0, in_flight=i % 50), 0.06 * i, i % 2) for i in range(8192)]
    block = RowColumns.of(rows)
    block.pack()
    (_, cols, gaps), = block._pending
    held = sum(c.itemsize if c.strides == (0,) else c.nbytes for c in cols)  # a column of one value: one value
    assert held < 8192 * 30, held / 8192  # 18 numbers a row: 144 bytes as int64
    assert all(c.dtype != np.int64 for c in cols)
    names = [f for f in ROW_FIELDS if f != "gaps"]
    constant = {name for name, c in zip(names, cols, strict=True) if c.strides == (0,)}
    assert {"ttfo", "turn", "class"} <= constant and "t_ms" not in constant, constant
    assert len(gaps.nones) == 8192 and list(gaps) == RowColumns.of(rows).cols[ROW_FIELDS.index("gaps")]
    assert block.rows() == RowColumns.of(rows).rows()
