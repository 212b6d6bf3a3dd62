"""Wire format: round trips (plain, msgpack as Locust ships it; version 1 also JSON), golden payloads of both
versions, clear errors, and the master's batch of pending bins (``sketch.fold_bins``) against the plain merge."""

from __future__ import annotations

import json
import math
from array import array

import msgpack
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from harness.metrics import Sketch, SketchMismatch, decode_sketch, encode_sketch, wire
from harness.metrics import sketch as sketch_module

# A version-1 payload for: 0.0, 0.0012 ×2, 0.05, 0.0503, 0.1, 0.3 ×3, 2.5, plus -1.0 and NaN
# (overflow). Never edit these: a later version must still read them, or bump "v" and keep both.
GOLDEN_V1 = {
    "v": 1, "alpha": 0.01, "n": 10, "sum": 3.6027, "min": 0.0, "max": 2.5, "zero": 1, "overflow": 2,
    "keys": [-336, 187, 34, 55, 106], "counts": [2, 2, 1, 3, 1],
}
GOLDEN_V1_MSGPACK = bytes.fromhex(  # msgpack.packb(GOLDEN_V1), as a worker sends it
    "8aa17601a5616c706861cb3f847ae147ae147ba16e0aa373756dcb400cd25460aa64c3a36d696ecb0000000000000000a36d6178"
    "cb4004000000000000a47a65726f01a86f766572666c6f7702a46b65797395d1feb0ccbb22376aa6636f756e7473950202010301"
)
# The same sketch as version 2 writes it (header: v 2, 5 bins, alpha, n 10, sum, min 0, max 2.5, zero 1, overflow 2;
# keys -336 -149 -115 -60 46; counts 2 2 1 3 1). Never edit either.
GOLDEN_V2 = bytes.fromhex(
    "02000000050000007b14ae47e17a843f0a00000000000000c364aa6054d20c400000000000000000000000000000044001000000"
    "000000000200000000000000b0feffff6bffffff8dffffffc4ffffff2e0000000200000002000000010000000300000001000000"
)


def _golden_sketch() -> Sketch:
    s = Sketch()
    for v in (0.0, 0.0012, 0.0012, 0.05, 0.0503, 0.1, 2.5, -1.0, math.nan):
        s.add(v)
    s.add(0.3, 3)
    return s


def _lognormal_sketch(n: int = 100_000) -> Sketch:
    s = Sketch()
    for v in np.random.default_rng(7).lognormal(math.log(0.05), 1.0, n).tolist():
        s.add(v)
    return s


def _same(a: Sketch, b: Sketch) -> bool:
    return (a.relative_accuracy, a.bins(), a.count, a.zero_count, a.overflow, a.sum, a.min, a.max) == (
        b.relative_accuracy, b.bins(), b.count, b.zero_count, b.overflow, b.sum, b.min, b.max)


@pytest.mark.parametrize("golden", [GOLDEN_V2, msgpack.unpackb(GOLDEN_V1_MSGPACK, strict_map_key=False)],
                         ids=["v2", "v1"])
def test_golden_payloads_are_what_we_write_and_still_read(golden) -> None:
    assert encode_sketch(_golden_sketch()) == GOLDEN_V2
    assert wire._encode_v1(_golden_sketch()) == GOLDEN_V1
    assert msgpack.unpackb(msgpack.packb(GOLDEN_V2)) == GOLDEN_V2  # msgpack carries the bytes as they are
    s = decode_sketch(golden)
    assert _same(s, _golden_sketch())
    assert (s.count, s.overflow, s.zero_count, s.min, s.max) == (10, 2, 1, 0.0, 2.5)
    assert s.quantile(0.5) == pytest.approx(0.05, rel=0.01)  # rank 4 of the 10 samples is 0.05
    assert s.quantile(0.9) == pytest.approx(0.3, rel=0.01)


def test_round_trip_plain_and_msgpack_and_version_1_through_json() -> None:
    s = _lognormal_sketch(20_000)
    s.add(0.0)
    s.add(-1.0)
    payload = encode_sketch(s)
    assert _same(decode_sketch(payload), s)
    packed = msgpack.packb(payload)
    assert _same(decode_sketch(msgpack.unpackb(packed, strict_map_key=False)), s)
    assert _same(decode_sketch(json.loads(json.dumps(wire._encode_v1(s)))), s)
    assert [decode_sketch(payload).quantile(q) for q in (0, 0.5, 0.99, 1)] == [s.quantile(q) for q in (0, 0.5, 0.99, 1)]


def test_payload_is_a_header_and_8_bytes_a_bin() -> None:
    s = _lognormal_sketch()
    payload = encode_sketch(s)
    assert type(payload) is bytes and len(payload) == 64 + 8 * len(s.bins()) <= 8_000


def test_a_count_past_32_bits_is_written_as_version_1() -> None:
    s = _golden_sketch()
    s.add(0.2, 2 ** 32)
    payload = encode_sketch(s)
    assert payload["v"] == 1 and max(payload["counts"]) == 2 ** 32
    assert _same(decode_sketch(msgpack.unpackb(msgpack.packb(payload))), s)


def test_encode_does_not_change_the_sketch() -> None:
    s = _golden_sketch()
    payload = wire._encode_v1(s)
    payload["counts"][0] = 99
    assert _same(s, _golden_sketch())


@pytest.mark.parametrize("sketch", [Sketch(), Sketch(relative_accuracy=0.02)], ids=["empty", "empty-2pct"])
def test_round_trip_empty(sketch: Sketch) -> None:
    sketch.add(math.inf)  # overflow only: still empty
    payload = encode_sketch(sketch)
    assert len(payload) == 64
    back = decode_sketch(msgpack.unpackb(msgpack.packb(payload), strict_map_key=False))
    assert back.count == 0 and back.overflow == 1 and back.relative_accuracy == sketch.relative_accuracy
    assert math.isnan(back.quantile(0.5)) and math.isnan(back.min)
    back.add(1.0)
    assert back.min == back.max == 1.0


def test_decoded_sketches_merge_like_the_originals() -> None:
    a, b = _golden_sketch(), _lognormal_sketch(1000)
    merged = decode_sketch(encode_sketch(a))
    merged.merge(decode_sketch(encode_sketch(b)))
    a.merge(b)
    assert _same(merged, a)
    with pytest.raises(SketchMismatch, match="relative accuracy"):
        merged.merge(decode_sketch(encode_sketch(Sketch(relative_accuracy=0.05))))


@pytest.mark.parametrize("payload", [{**GOLDEN_V1, "v": 3}, b"\x03" + GOLDEN_V2[1:], b"\x07\x00"], ids=["dict", "bytes",
                                                                                                 "short"])
def test_wrong_version_is_a_mismatch(payload) -> None:
    with pytest.raises(SketchMismatch, match=r"version \d.*reads versions 1 and 2"):
        decode_sketch(payload)


def _v2(**changes) -> bytes:
    """GOLDEN_V2 with header fields changed (by name) or its bins replaced (keys, counts)."""
    fields = dict(zip(("v", "size", "alpha", "n", "sum", "min", "max", "zero", "overflow"),
                      wire._HEAD.unpack_from(GOLDEN_V2), strict=True))
    keys = changes.pop("keys", [-336, -149, -115, -60, 46])
    counts = changes.pop("counts", [2, 2, 1, 3, 1])
    fields.update(changes)
    return wire._HEAD.pack(*fields.values()) + array("i", keys).tobytes() + array("I", counts).tobytes()


@pytest.mark.parametrize(("payload", "message"), [
    (GOLDEN_V2[:40], "40 bytes, shorter than its 64-byte header"),
    (GOLDEN_V2[:-1], "5 bins take 104 bytes, the payload has 103"),
    (_v2(size=4), "4 bins take 96 bytes"),
    (_v2(alpha=math.nan), "'alpha' must be a number in \\(0, 1\\)"),
    (_v2(sum=math.inf, min=-1.0), "'sum' must be a finite.*'min' must be a finite"),  # every problem at once
    (_v2(keys=[-336, -149, -115, -60, 10 ** 6]),
     "keys must be in \\[-1037, 35489\\] for alpha 0.01, got -336 to 1000000"),
    (_v2(counts=[2, 2, 0, 3, 2]), "every count must be >= 1"),
    (_v2(n=11), "'n' is 11 but zero \\+ sum\\(counts\\) is 10"),
    (_v2(min=3.0), "'min' 3.0 is greater than 'max' 2.5"),
], ids=["short", "truncated", "size", "alpha", "sum-min", "key-range", "zero-count", "n", "min-max"])
def test_malformed_version_2_payload_gives_a_clear_error(payload: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        decode_sketch(payload)


def _without(*names: str) -> dict:
    return {k: v for k, v in GOLDEN_V1.items() if k not in names}


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ([1, 2], "must be a dict, got list"),
        (_without("v"), "no format version 'v'"),
        (_without("counts"), "missing field 'counts'"),
        (_without("sum", "keys"), "missing field 'sum'; missing field 'keys'"),
        ({**GOLDEN_V1, "extra": 1}, "unknown field 'extra'"),
        ({**GOLDEN_V1, "alpha": "0.01"}, "'alpha' must be a number in \\(0, 1\\)"),
        ({**GOLDEN_V1, "alpha": 1.5}, "'alpha' must be a number"),
        ({**GOLDEN_V1, "n": -1}, "'n' must be an int >= 0, got -1"),
        ({**GOLDEN_V1, "n": 11}, "'n' is 11 but zero \\+ sum\\(counts\\) is 10"),
        ({**GOLDEN_V1, "zero": True}, "'zero' must be an int"),
        ({**GOLDEN_V1, "sum": math.nan}, "'sum' must be a finite number"),
        ({**GOLDEN_V1, "min": 3.0}, "'min' 3.0 is greater than 'max' 2.5"),
        ({**GOLDEN_V1, "keys": "abc"}, "'keys' must be a list, got str"),
        ({**GOLDEN_V1, "counts": None}, "'counts' must be a list, got NoneType"),
        ({**GOLDEN_V1, "keys": [-336, 187]}, "'keys' has 2 entries but 'counts' has 5"),
        ({**GOLDEN_V1, "keys": [-336, 187, 0, 55, 106]}, "keys\\[2\\] must be an int >= 1"),
        ({**GOLDEN_V1, "keys": [-336.5, 187, 34, 55, 106]}, "keys\\[0\\] must be an int"),
        ({**GOLDEN_V1, "counts": [2, 2, 0, 3, 2]}, "counts\\[2\\] must be an int >= 1"),
        ({**GOLDEN_V1, "n": "ten", "overflow": -2}, "'n' must be.*'overflow' must be"),  # every problem at once
    ],
)
def test_malformed_payload_gives_a_clear_error(payload: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        decode_sketch(payload)  # type: ignore[arg-type]


def test_the_fast_decoder_reads_exactly_what_the_checked_one_reads(monkeypatch) -> None:
    """``decode_sketch`` takes a short path for well-formed payloads (the master decodes thousands per round):
    random sketches, and payloads near the edges (ints for floats, one bin, empty), decode the same both ways."""
    rng = np.random.default_rng(3)
    payloads = [GOLDEN_V1, {**GOLDEN_V1, "sum": 152, "min": 0, "max": 3}, wire._encode_v1(Sketch())]
    packed = [GOLDEN_V2, encode_sketch(Sketch())]
    for n in (1, 7, 500, 20_000):
        s = Sketch()
        for x in rng.lognormal(-2, 1.5, n):
            s.add(float(x))
        s.add(0.0)
        payloads.append(msgpack.unpackb(msgpack.packb(wire._encode_v1(s))))
        packed.append(encode_sketch(s))
    for p in packed:
        f, slow = decode_sketch(p), wire._checked_v2(p)
        assert (f.bins(), f.count, f.sum, f.min, f.max, f.zero_count, f.overflow, f.relative_accuracy) == \
            (slow.bins(), slow.count, slow.sum, slow.min, slow.max, slow.zero_count, slow.overflow,
             slow.relative_accuracy)
    fast = [decode_sketch(p) for p in payloads]
    assert all(wire._decode_well_formed(p) is not None for p in payloads)  # the short path did take them
    monkeypatch.setattr(wire, "_decode_well_formed", lambda p: None)
    for p, f in zip(payloads, fast, strict=True):
        slow = decode_sketch(p)
        assert (f.bins(), f.count, f.sum, f.min, f.max, f.zero_count, f.overflow, f.relative_accuracy) == \
            (slow.bins(), slow.count, slow.sum, slow.min, slow.max, slow.zero_count, slow.overflow,
             slow.relative_accuracy)


@pytest.mark.parametrize("reports", [3, sketch_module.SETTLE_AT - 6], ids=["dict-path", "numpy-path"])
def test_a_master_s_pending_bins_add_up_to_the_plain_merge(reports: int) -> None:
    """Decoded sketches merge their bins as pending buffers, added when first read (``fold_bins``: a dict update
    each for a few, one numpy pass for thousands of bins): the same bins, counts and quantiles as merging the
    originals, whatever is read when; a pending sketch merged into itself doubles."""
    rng = np.random.default_rng(11)
    plain, pending, partly = Sketch(), Sketch(), Sketch()
    for i in range(reports):
        s = Sketch()
        for x in rng.lognormal(-3 + (i % 7), 0.8, 60).tolist():
            s.add(x)
        plain.merge(s)
        pending.merge(decode_sketch(encode_sketch(s)))
        partly.merge(decode_sketch(encode_sketch(s)))
        if i % 50 == 1:
            partly.quantile(0.5)  # read between merges: folded, then more pending
    assert len(pending._pending) == reports and sum((len(p) - 64) // 8 for p in pending._pending) > (
        0 if reports == 3 else sketch_module._NUMPY_FROM)
    for q in (0, 0.01, 0.5, 0.99, 0.999, 1):
        assert pending.quantile(q) == partly.quantile(q) == plain.quantile(q)
    assert _same(pending, plain) and _same(partly, plain) and not pending._pending
    twice = decode_sketch(encode_sketch(plain))
    twice.merge(twice)
    plain.merge(plain)
    assert _same(twice, plain)


def test_big_endian_buffers_are_swapped() -> None:
    view = memoryview(array("i", [1, -2]).tobytes())
    assert wire._swapped(view, "i").tobytes() == b"\x00\x00\x00\x01\xff\xff\xff\xfe"


def test_a_sketch_no_one_reads_keeps_a_bounded_number_of_pending_bins() -> None:
    """Each pending (keys, counts) holds its report's bytes: past ``SETTLE_AT`` they are folded, not kept."""
    one = Sketch()
    one.add(0.1)
    one.add(0.2, 3)
    payload, total = encode_sketch(one), Sketch()
    for _ in range(sketch_module.SETTLE_AT + 10):
        total.merge(decode_sketch(payload))
    assert len(total._pending) == 10 and total.bins() == {k: v * (sketch_module.SETTLE_AT + 10)
                                                          for k, v in one.bins().items()}
    doubled = Sketch()
    for _ in range(sketch_module.SETTLE_AT // 2 + 3):
        doubled.merge(decode_sketch(payload))
    doubled.merge(doubled)  # into itself, its pending past SETTLE_AT: folded once, after the bins are doubled
    assert doubled.bins() == {k: v * (sketch_module.SETTLE_AT + 6) for k, v in one.bins().items()}


@settings(max_examples=400, deadline=None, derandomize=True)
@given(flips=st.lists(st.tuples(st.integers(0, 10 ** 6), st.integers(1, 255)), min_size=1, max_size=4),
       cut=st.one_of(st.none(), st.integers(0, 10 ** 6)))
@example(flips=[(15, 3)], cut=None)  # alpha 3.6e-17: its gamma is 1.0 (a ZeroDivisionError once, not a refusal)
def test_corrupted_version_2_bytes_are_refused_or_read_whole(flips, cut) -> None:
    """A version-2 payload with bytes flipped or cut: refused by name (ValueError, SketchMismatch), or a sketch whose
    bins fold and read without an error, its quantiles within [min, max] (a flipped count that still adds up to n
    reads as the data it says)."""
    payload = bytearray(encode_sketch(_lognormal_sketch(300)))
    for at, xor in flips:
        payload[at % len(payload)] ^= xor
    data = bytes(payload if cut is None else payload[:cut % (len(payload) + 1)])
    try:
        s = decode_sketch(data)
    except (ValueError, SketchMismatch):
        return
    many = Sketch(relative_accuracy=s.relative_accuracy)
    for _ in range(sketch_module._NUMPY_FROM // 40 + 1):  # past the numpy fold too
        many.merge(decode_sketch(data))
    for sk in (s, many):
        assert sum(sk.bins().values()) + sk.zero_count == sk.count
        step = max(1, sk.count // 500)  # every bin's rank is read (a bin holds >= 1 of the 300 samples)
        assert all(sk.min <= sk.value_at_rank(r) <= sk.max for r in range(0, sk.count, step))
