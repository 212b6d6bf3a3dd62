"""Wire format: round trips (plain, msgpack as Locust ships it, JSON), a golden payload, and clear errors."""

from __future__ import annotations

import json
import math

import msgpack
import numpy as np
import pytest

from harness.metrics import Sketch, SketchMismatch, decode_sketch, encode_sketch

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


def test_golden_payload_is_what_we_write_and_still_reads() -> None:
    assert encode_sketch(_golden_sketch()) == GOLDEN_V1
    assert msgpack.unpackb(GOLDEN_V1_MSGPACK, strict_map_key=False) == GOLDEN_V1
    s = decode_sketch(msgpack.unpackb(GOLDEN_V1_MSGPACK, strict_map_key=False))
    assert _same(s, _golden_sketch())
    assert (s.count, s.overflow, s.zero_count, s.min, s.max) == (10, 2, 1, 0.0, 2.5)
    assert s.quantile(0.5) == pytest.approx(0.05, rel=0.01)  # rank 4 of the 10 samples is 0.05
    assert s.quantile(0.9) == pytest.approx(0.3, rel=0.01)


def test_round_trip_plain_msgpack_and_json() -> None:
    s = _lognormal_sketch(20_000)
    s.add(0.0)
    s.add(-1.0)
    payload = encode_sketch(s)
    assert _same(decode_sketch(payload), s)
    packed = msgpack.packb(payload)
    assert _same(decode_sketch(msgpack.unpackb(packed, strict_map_key=False)), s)
    assert _same(decode_sketch(json.loads(json.dumps(payload))), s)
    assert [decode_sketch(payload).quantile(q) for q in (0, 0.5, 0.99, 1)] == [s.quantile(q) for q in (0, 0.5, 0.99, 1)]


def test_payload_is_plain_types_and_small() -> None:
    payload = encode_sketch(_lognormal_sketch())
    assert all(isinstance(k, str) for k in payload)
    assert all(type(v) in (int, float, list) for v in payload.values())
    assert all(type(x) is int for x in payload["keys"] + payload["counts"])
    assert all(step >= 1 for step in payload["keys"][1:])  # delta-encoded, increasing
    assert len(msgpack.packb(payload)) <= 8_000


def test_encode_does_not_change_the_sketch() -> None:
    s = _golden_sketch()
    payload = encode_sketch(s)
    payload["counts"][0] = 99
    assert _same(s, _golden_sketch())


@pytest.mark.parametrize("sketch", [Sketch(), Sketch(relative_accuracy=0.02)], ids=["empty", "empty-2pct"])
def test_round_trip_empty(sketch: Sketch) -> None:
    sketch.add(math.inf)  # overflow only: still empty
    payload = encode_sketch(sketch)
    assert (payload["n"], payload["min"], payload["max"], payload["keys"], payload["overflow"]) == (0, 0.0, 0.0, [], 1)
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


def test_wrong_version_is_a_mismatch() -> None:
    with pytest.raises(SketchMismatch, match=r"version 2.*reads version 1"):
        decode_sketch({**GOLDEN_V1, "v": 2})


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
    from harness.metrics import wire

    rng = np.random.default_rng(3)
    payloads = [GOLDEN_V1, {**GOLDEN_V1, "sum": 152, "min": 0, "max": 3}, encode_sketch(Sketch())]
    for n in (1, 7, 500, 20_000):
        s = Sketch()
        for x in rng.lognormal(-2, 1.5, n):
            s.add(float(x))
        s.add(0.0)
        payloads.append(msgpack.unpackb(msgpack.packb(encode_sketch(s))))
    fast = [decode_sketch(p) for p in payloads]
    assert all(wire._decode_well_formed(p) is not None for p in payloads)  # the short path did take them
    monkeypatch.setattr(wire, "_decode_well_formed", lambda p: None)
    for p, f in zip(payloads, fast, strict=True):
        slow = decode_sketch(p)
        assert (f.bins(), f.count, f.sum, f.min, f.max, f.zero_count, f.overflow, f.relative_accuracy) == \
            (slow.bins(), slow.count, slow.sum, slow.min, slow.max, slow.zero_count, slow.overflow,
             slow.relative_accuracy)
