"""Wire format of a ``Sketch``: packed bytes (version 2), or a versioned dict of plain types (version 1).

Workers ship sketches to the master inside Locust's ``report_to_master`` data, which Locust packs with
msgpack (and unpacks with ``strict_map_key=False``); msgpack carries bytes as they are.

Version 2 (what ``encode_sketch`` writes): one ``bytes``, little-endian, a 64-byte header then the bins::

    u8 version (2), 3 bytes 0, u32 bins B, f64 alpha, u64 n, f64 sum, f64 min, f64 max, u64 zero, u64 overflow
    int32 keys[B]      each bin's key (absolute, increasing)
    uint32 counts[B]   each bin's count (>= 1)

The fields mean what version 1's below do. Why bytes: a master decodes a fleet's sketches every round (1,000 workers
× 7 sketches every 3 s). Version 1's lists cost it a Python int per key and per count, made by msgpack and walked
by the checks and the merge; version 2's bins are two buffers it checks in a few C-level passes and keeps as they
came (``Sketch._pending``) until the merged sketch is read, then adds in one batch (``sketch.fold_bins``).
A sketch with a bin count past 2^32 - 1, or a key past int32 (an alpha below ~1e-8), is written as version 1.
Size: 64 bytes + 8 a bin (version 1: ~3 a bin), ~650 bytes for 73 bins.

Version 1 (still read: a worker of protocol version 1), a dict that survives msgpack and ``json``, field by field::

    {
      "v": 1,              int    format version. Readers refuse other versions (SketchMismatch); bump it
                                  whenever the meaning of any field or of the key mapping changes.
      "alpha": 0.01,       float  relative accuracy α. The key mapping is fixed by (v, alpha): γ = (1+α)/(1−α),
                                  key = ceil(ln v / ln γ) for v ≥ 1e-9. Sketches merge only with equal alpha.
      "n": 1234,           int    number of samples = zero + sum(counts); overflowed values excluded.
      "sum": 152.3,        float  sum of the samples.
      "min": 0.0123,       float  exact smallest sample (0.0 when n == 0).
      "max": 2.51,         float  exact largest sample (0.0 when n == 0).
      "zero": 0,           int    samples in [0, 1e-9), read back as 0.
      "overflow": 0,       int    samples refused: negative, NaN or infinite.
      "keys": [-220, 1, 3],  list[int]  bin keys in increasing order, delta-encoded: the first is absolute,
                                  each next one is the (positive) step from the previous, so most fit in one
                                  msgpack byte. [-220, 1, 3] means keys -220, -219, -216.
      "counts": [5, 2, 1]  list[int]  count of each bin (≥ 1, empty bins are not sent), same length as keys.
    }

Size: about 3 bytes per bin once packed (1-byte key step, 1–3-byte count): 1.2 kB for 100k
lognormal latencies (σ = 1, 373 bins); see ``benchmarks/sketch_choice.py``.

``decode_sketch`` reads both and never lets a KeyError or TypeError out: a wrong version raises
``SketchMismatch``; anything else wrong raises one ``ValueError`` listing every problem found.
"""

from __future__ import annotations

import functools
import math
import struct
import sys
from array import array
from itertools import accumulate, islice
from operator import itemgetter
from typing import Any

from harness.metrics.sketch import PACKED_HEAD, ZERO_CUTOFF, Sketch, SketchMismatch

__all__ = ["WIRE_VERSION", "decode_sketch", "encode_sketch"]

WIRE_VERSION = 2
_V1 = 1
_FIELDS = ("v", "alpha", "n", "sum", "min", "max", "zero", "overflow", "keys", "counts")
_HEAD = struct.Struct("<BxxxIdQdddQQ")
assert _HEAD.size == PACKED_HEAD
_BIG = sys.byteorder == "big"
_INF = math.inf


def encode_sketch(sketch: Sketch) -> bytes | dict[str, Any]:
    """The version-2 payload of ``sketch`` (new bytes; the sketch is not changed), or version 1's dict when its
    bins do not fit 32 bits."""
    bins = sketch.bins()  # sorted by key
    try:
        keys, counts = array("i", bins), array("I", bins.values())
    except OverflowError:
        return _encode_v1(sketch)
    if _BIG:
        keys.byteswap()
        counts.byteswap()
    empty = sketch.count == 0
    return _HEAD.pack(WIRE_VERSION, len(keys), sketch.relative_accuracy, sketch.count, sketch.sum,
                      0.0 if empty else sketch.min, 0.0 if empty else sketch.max, sketch.zero_count,
                      sketch.overflow) + keys.tobytes() + counts.tobytes()


def _encode_v1(sketch: Sketch) -> dict[str, Any]:
    bins = sketch.bins()  # sorted by key
    keys: list[int] = []
    previous = 0
    for i, key in enumerate(bins):
        keys.append(key if i == 0 else key - previous)
        previous = key
    empty = sketch.count == 0
    return {
        "v": _V1,
        "alpha": sketch.relative_accuracy,
        "n": sketch.count,
        "sum": sketch.sum,
        "min": 0.0 if empty else sketch.min,
        "max": 0.0 if empty else sketch.max,
        "zero": sketch.zero_count,
        "overflow": sketch.overflow,
        "keys": keys,
        "counts": list(bins.values()),
    }


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_real(x: object) -> bool:
    return isinstance(x, float) or _is_int(x)


_GET_FIELDS = itemgetter(*_FIELDS)
_REAL = (float, int)
_INT = frozenset((int,))


def _decode_well_formed(payload: object) -> Sketch | None:
    """The common case (a master decodes thousands of sketches per round): the checks of ``decode_sketch`` in
    few steps; None when any fails, and ``decode_sketch`` then finds and names the problems."""
    if type(payload) is not dict or len(payload) != len(_FIELDS):
        return None
    try:  # ten fields, all present: exactly _FIELDS (one C-level lookup of them all, no set built)
        v, alpha, n, total, lo, hi, zero, overflow, keys, counts = _GET_FIELDS(payload)
    except KeyError:
        return None
    if not (v == _V1 and type(alpha) is float and 0.0 < alpha < 1.0 and type(n) is int
            and type(zero) is int and type(overflow) is int and n >= 0 and zero >= 0 and overflow >= 0):
        return None
    # NaN fails >= 0, inf fails < inf
    if not (type(total) in _REAL and type(lo) in _REAL and type(hi) in _REAL and 0 <= total < math.inf
            and 0 <= lo < math.inf and 0 <= hi < math.inf):
        return None
    if type(keys) is not list or type(counts) is not list or len(keys) != len(counts):
        return None
    bins = _well_formed_bins(keys, counts)
    if bins is None or zero + sum(counts) != n or (n and lo > hi):
        return None
    return Sketch._from_parts(relative_accuracy=alpha, bins=bins, zero=zero, overflow=overflow, total=float(total),
                              lo=float(lo), hi=float(hi), count=n)


def _well_formed_bins(keys: list, counts: list) -> dict[int, int] | None:
    # issuperset over a map stops at the first bad type and builds no set; bool is not int here
    if (_INT.issuperset(map(type, keys)) and _INT.issuperset(map(type, counts))
            and (len(keys) < 2 or min(islice(keys, 1, None)) >= 1) and (not counts or min(counts) >= 1)):
        return dict(zip(accumulate(keys), counts, strict=True))
    return None


@functools.lru_cache(maxsize=16)
def _key_range(alpha: float) -> tuple[int, int]:
    # the keys a value in [ZERO_CUTOFF, the largest float] can have: a key past them is garbage (and would make the
    # master's batch span them). An alpha too small for its gamma to differ from 1 (a corrupted one) has none.
    log_gamma = math.log((1.0 + alpha) / (1.0 - alpha))
    if log_gamma <= 0:
        return 0, -1
    inv = 1.0 / log_gamma
    return math.ceil(math.log(ZERO_CUTOFF) * inv) - 1, math.ceil(math.log(sys.float_info.max) * inv) + 1


def _decode_v2(payload: bytes) -> Sketch:
    if len(payload) >= _HEAD.size and not _BIG:  # the common case, its checks in few steps (``_checked_v2`` names)
        v, size, alpha, n, total, lo, hi, zero, overflow = _HEAD.unpack_from(payload)
        if (v == WIRE_VERSION and len(payload) == _HEAD.size + 8 * size and 0.0 < alpha < 1.0 and 0 <= total < _INF
                and 0 <= lo < _INF and 0 <= hi < _INF and (lo <= hi or not n)):
            view = memoryview(payload)
            keys, counts = view[_HEAD.size:_HEAD.size + 4 * size].cast("i"), view[_HEAD.size + 4 * size:].cast("I")
            first, last = _key_range(alpha)
            if not size:
                if zero == n:
                    return Sketch._from_parts(relative_accuracy=alpha, bins={}, zero=zero, overflow=overflow,
                                              total=total, lo=lo, hi=hi, count=n)
            elif first <= min(keys) and max(keys) <= last and min(counts) >= 1 and zero + sum(counts) == n:
                return Sketch._from_parts(relative_accuracy=alpha, bins={}, zero=zero, overflow=overflow, total=total,
                                          lo=lo, hi=hi, count=n, pending=(payload,))
    return _checked_v2(payload)


def _checked_v2(payload: bytes) -> Sketch:
    if len(payload) < _HEAD.size:
        if payload[:1] not in (b"", bytes([WIRE_VERSION])):
            raise SketchMismatch(_mismatch(payload[0]))
        raise ValueError(f"malformed sketch payload: {len(payload)} bytes, shorter than its {_HEAD.size}-byte header")
    v, size, alpha, n, total, lo, hi, zero, overflow = _HEAD.unpack_from(payload)
    if v != WIRE_VERSION:
        raise SketchMismatch(_mismatch(v))
    problems = []
    if len(payload) != _HEAD.size + 8 * size:
        problems.append(f"{size} bins take {_HEAD.size + 8 * size} bytes, the payload has {len(payload)}")
    if not 0.0 < alpha < 1.0:
        problems.append(f"'alpha' must be a number in (0, 1), got {alpha!r}")
    for name, value in (("sum", total), ("min", lo), ("max", hi)):
        if not 0 <= value < math.inf:  # NaN fails too
            problems.append(f"{name!r} must be a finite number >= 0, got {value!r}")
    if problems:
        raise ValueError("malformed sketch payload: " + "; ".join(problems))
    view = memoryview(payload)
    keys, counts = view[_HEAD.size:_HEAD.size + 4 * size], view[_HEAD.size + 4 * size:]
    if _BIG:  # the pending payload in this machine's byte order (``sketch.fold_bins``)
        keys, counts = _swapped(keys, "i"), _swapped(counts, "I")
        payload = payload[:_HEAD.size] + keys.tobytes() + counts.tobytes()
    keys, counts = keys.cast("i"), counts.cast("I")
    first, last = _key_range(alpha)
    if size and not (first <= min(keys) and max(keys) <= last):
        problems.append(f"keys must be in [{first}, {last}] for alpha {alpha}, got {min(keys)} to {max(keys)}")
    if size and min(counts) < 1:
        problems.append("every count must be >= 1, got 0")
    if not problems and zero + sum(counts) != n:
        problems.append(f"'n' is {n} but zero + sum(counts) is {zero + sum(counts)}")
    if n and lo > hi:
        problems.append(f"'min' {lo!r} is greater than 'max' {hi!r}")
    if problems:
        raise ValueError("malformed sketch payload: " + "; ".join(problems))
    return Sketch._from_parts(relative_accuracy=alpha, bins={}, zero=zero, overflow=overflow, total=total, lo=lo,
                              hi=hi, count=n, pending=(payload,) if size else ())


def _swapped(view: memoryview, code: str) -> memoryview:
    a = array(code, view.tobytes())
    a.byteswap()
    return memoryview(a.tobytes())


def _mismatch(v: object) -> str:
    return (f"sketch payload has format version {v!r}, this kneecap reads versions {_V1} and {WIRE_VERSION}; "
            "run the same kneecap version on the master and every worker")


def decode_sketch(payload: bytes | dict[str, Any]) -> Sketch:
    """Rebuild a ``Sketch`` from ``encode_sketch`` output (possibly after msgpack; version 1 also after JSON)."""
    if type(payload) is bytes:
        return _decode_v2(payload)
    fast = _decode_well_formed(payload)
    if fast is not None:
        return fast
    if not isinstance(payload, dict):
        raise ValueError(f"sketch payload must be a dict, got {type(payload).__name__}")
    if "v" not in payload:
        found = sorted(map(str, payload))
        raise ValueError(f"sketch payload has no format version 'v'; is it a sketch? it has keys {found}")
    if payload["v"] != _V1:
        raise SketchMismatch(_mismatch(payload["v"]))

    problems = [f"missing field {name!r}" for name in _FIELDS if name not in payload]
    problems += [f"unknown field {name!r}" for name in payload if name not in _FIELDS]
    if problems:
        raise ValueError("malformed sketch payload: " + "; ".join(problems))

    alpha, n, zero, overflow = payload["alpha"], payload["n"], payload["zero"], payload["overflow"]
    total, lo, hi = payload["sum"], payload["min"], payload["max"]
    if not (_is_real(alpha) and 0.0 < alpha < 1.0):
        problems.append(f"'alpha' must be a number in (0, 1), got {alpha!r}")
    for name, value in (("n", n), ("zero", zero), ("overflow", overflow)):
        if not (_is_int(value) and value >= 0):
            problems.append(f"{name!r} must be an int >= 0, got {value!r}")
    for name, value in (("sum", total), ("min", lo), ("max", hi)):
        if not (_is_real(value) and math.isfinite(value) and value >= 0):
            problems.append(f"{name!r} must be a finite number >= 0, got {value!r}")

    bins = _decode_bins(payload["keys"], payload["counts"], problems)
    if not problems:
        if zero + sum(bins.values()) != n:
            problems.append(f"'n' is {n} but zero + sum(counts) is {zero + sum(bins.values())}")
        if n and lo > hi:
            problems.append(f"'min' {lo!r} is greater than 'max' {hi!r}")
    if problems:
        raise ValueError("malformed sketch payload: " + "; ".join(problems))
    return Sketch._from_parts(relative_accuracy=float(alpha), bins=bins, zero=zero, overflow=overflow,
                              total=float(total), lo=float(lo), hi=float(hi), count=n)


def _decode_bins(keys: object, counts: object, problems: list[str]) -> dict[int, int]:
    if not isinstance(keys, list):
        problems.append(f"'keys' must be a list, got {type(keys).__name__}")
    if not isinstance(counts, list):
        problems.append(f"'counts' must be a list, got {type(counts).__name__}")
    if not (isinstance(keys, list) and isinstance(counts, list)):
        return {}
    if len(keys) != len(counts):
        problems.append(f"'keys' has {len(keys)} entries but 'counts' has {len(counts)}")
        return {}
    fast = _well_formed_bins(keys, counts)
    if fast is not None:
        return fast
    bins: dict[int, int] = {}
    key = 0
    for i, (step, count) in enumerate(zip(keys, counts, strict=True)):
        if not _is_int(step) or (i > 0 and step < 1):
            problems.append(f"keys[{i}] must be {'an int' if i == 0 else 'an int >= 1 (a step)'}, got {step!r}")
            return {}
        if not (_is_int(count) and count >= 1):
            problems.append(f"counts[{i}] must be an int >= 1, got {count!r}")
            return {}
        key = step if i == 0 else key + step
        bins[key] = count
    return bins
