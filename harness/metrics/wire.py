"""Wire format of a ``Sketch``: a versioned dict of plain types, for msgpack and JSON.

Workers ship sketches to the master inside Locust's ``report_to_master`` data, which Locust packs with
msgpack (and unpacks with ``strict_map_key=False``). The payload uses only str keys, ints, floats and
lists, so it survives msgpack and ``json`` unchanged. Version 1, field by field::

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

``decode_sketch`` never lets a KeyError or TypeError out: a wrong version raises ``SketchMismatch``;
anything else wrong raises one ``ValueError`` listing every problem found.
"""

from __future__ import annotations

import math
from itertools import accumulate, islice
from operator import itemgetter
from typing import Any

from harness.metrics.sketch import Sketch, SketchMismatch

__all__ = ["WIRE_VERSION", "decode_sketch", "encode_sketch"]

WIRE_VERSION = 1
_FIELDS = ("v", "alpha", "n", "sum", "min", "max", "zero", "overflow", "keys", "counts")


def encode_sketch(sketch: Sketch) -> dict[str, Any]:
    """The version-1 payload of ``sketch`` (a new dict of plain types; the sketch is not changed)."""
    bins = sketch.bins()  # sorted by key
    keys: list[int] = []
    previous = 0
    for i, key in enumerate(bins):
        keys.append(key if i == 0 else key - previous)
        previous = key
    empty = sketch.count == 0
    return {
        "v": WIRE_VERSION,
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
    if not (v == WIRE_VERSION and type(alpha) is float and 0.0 < alpha < 1.0 and type(n) is int
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


def decode_sketch(payload: dict[str, Any]) -> Sketch:
    """Rebuild a ``Sketch`` from ``encode_sketch`` output (possibly after msgpack or JSON)."""
    fast = _decode_well_formed(payload)
    if fast is not None:
        return fast
    if not isinstance(payload, dict):
        raise ValueError(f"sketch payload must be a dict, got {type(payload).__name__}")
    if "v" not in payload:
        found = sorted(map(str, payload))
        raise ValueError(f"sketch payload has no format version 'v'; is it a sketch? it has keys {found}")
    if payload["v"] != WIRE_VERSION:
        raise SketchMismatch(
            f"sketch payload has format version {payload['v']!r}, this kneecap reads version {WIRE_VERSION}; "
            "run the same kneecap version on the master and every worker"
        )

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
