"""A bucket's request rows (``metrics.rows``), kept by column: one int64 array per number, a list of gaps. Pure.

Why columns: the master receives rows by the hundred in every worker's report and reads them by column when it
judges the step. Why typed: every field but ``gaps`` is an integer or None, and kept as Python lists they cost an
int object a value — the master's largest memory, a young garbage collection walking them after each report past
the cap (~16 ms at 1,000 workers), and at judging ~3-7 ms a column to turn them into the arrays the analysis reads
(a third of a judged 100k-request step; ``benchmarks/tail_attribution.py``, ``benchmarks/fleet_merge.py``). As
``array('q')`` (None as ``NONE``, int64's least value) a column is 8 bytes a row, invisible to the garbage
collector, joined by memory copies, and read by the analysis as a numpy array without a copy
(``analysis.step_columns``). Row access (``rows()``, ``row[i]``, iteration) gives ints and None.

On the wire (protocol version 2, "rc") a bucket ships ``[typecode, numbers, gaps]``: the numeric columns one after
the other (``ROW_FIELDS`` order without ``gaps``) as little-endian int32 ("i", None as int32's least value), or
int64 ("q") when a value does not fit, then the gaps list. ``from_wire`` (the master's) checks the shape and that
flags, send times and workers are never None, and keeps the numbers pending, as the payload's bytes: ``extend``
gathers them by reference, and the first read of the columns widens every pending part into the arrays in one numpy
pass (a block of ~180 reports at once, ``metrics.row_sample``, where widening each report's 45 rows cost ~15 µs of
the master's ~120 a report at 1,000 workers; ``benchmarks/fleet_merge.py``). A sealed block is ``pack``ed instead:
each column in the narrowest signed type that holds it (int8 for flags, worker, turn; int16 for most latencies in
tenths of a millisecond; its least value is None), all in one buffer, a column of one value (all None, say) as that
value, the gaps as a byte a row and the long ones in narrow arrays; widened when the step is judged
(``benchmarks/row_memory.py``: 28 bytes a row held, 210 as int64). Version 1 shipped rows
(``rows()``, ``extend_rows``), still read.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Iterable, Iterator, Sequence
from itertools import chain, compress, repeat
from operator import is_, itemgetter
from typing import TYPE_CHECKING, Any

from harness.metrics.rows import ROW_FIELDS, check_rows

if TYPE_CHECKING:
    import numpy as np

__all__ = ["NUMERIC", "RowColumns"]

_N = len(ROW_FIELDS)
_FLAGS, _T_MS, _WORKER, _GAPS = (ROW_FIELDS.index(f) for f in ("flags", "t_ms", "worker", "gaps"))
NUMERIC = tuple(i for i in range(_N) if i != _GAPS)
"""The columns kept as ``array('q')``: every field but ``gaps``."""
NONE = -(2 ** 63)
"""None in a numeric column (int64's least value: no row field comes near it)."""
_WIRE_NONE = {"i": -(2 ** 31), "q": NONE}
_NEVER_NONE = {NUMERIC.index(i): name for i, name in ((_FLAGS, "flags"), (_T_MS, "t_ms"), (_WORKER, "worker"))}
"""Positions in the wire's numbers of the columns that are never None (the analysis reads them as integers)."""
_GAP_TYPES = frozenset((list, type(None)))
_GAP_OF = ((), None)
_SWAP = sys.byteorder == "big"  # the wire is little-endian
_LIMITS = tuple((f"int{b}", -(2 ** (b - 1)), 2 ** (b - 1) - 1, b // 8) for b in (8, 16, 32, 64))
"""A packed column's types, narrowest first: name, least value (None's in a column), greatest, bytes."""


def _numbers(values: Iterable) -> array:
    """Ints and None as int64 (None: ``NONE``); TypeError for anything else (OverflowError past int64)."""
    values = values if isinstance(values, list) else list(values)
    try:
        return array("q", values)  # the usual column: no None
    except TypeError:
        return array("q", [NONE if v is None else v for v in values])


def _fits_int32(col: array) -> bool:
    low = min(col, default=0)
    if low == NONE:
        low = min((v for v in col if v != NONE), default=0)
    return low > -(2 ** 31) and max(col, default=0) < 2 ** 31


def _value(x: int) -> int | None:
    return None if x == NONE else x


def _swapped(code: str, blob: bytes) -> array:
    """Little-endian ``blob`` in this (big-endian) machine's order."""
    out = array(code, blob)
    out.byteswap()
    return out


def _widened(np: Any, code: str, blob: bytes | tuple, gaps: list) -> np.ndarray:
    if code == "p":  # packed (``pack``): a narrow array a column, None as its type's least value
        wide = np.empty((len(NUMERIC), len(gaps)), np.int64)
        for row, col in zip(wide, blob, strict=True):
            row[:] = col
            np.putmask(row, col == np.iinfo(col.dtype).min, NONE)
        return wide
    wide = np.frombuffer(blob, f"<i{4 if code == 'i' else 8}").reshape(len(NUMERIC), len(gaps)).astype(np.int64)
    if code == "i":
        np.putmask(wide, wide == _WIRE_NONE["i"], NONE)
    return wide


def _int32_matrix(np: Any, parts: Sequence) -> np.ndarray:
    """Pending int32 parts off the wire as one matrix, a row per ``NUMERIC`` column (one concatenation)."""
    return np.concatenate([np.frombuffer(b, "<i4").reshape(len(NUMERIC), len(g)) for _, b, g in parts], axis=1)


def _empty() -> list:
    """No rows: a column a field, ``ROW_FIELDS`` order (the gaps a list, the numbers int64 arrays)."""
    return [[] if i == _GAPS else array("q") for i in range(_N)]


def _kind(lo: int, hi: int, *, none: bool = False) -> tuple:
    """The narrowest of ``_LIMITS`` that holds ``lo``..``hi`` (with ``none``, its least value left for None)."""
    return next(k for k in _LIMITS if (k[1] < lo if none else k[1] <= lo) and hi <= k[2])


def _narrow(np: Any, a: np.ndarray) -> np.ndarray:
    """``a`` (no None in it) in the narrowest signed type that holds it."""
    return a.astype(_kind(int(a.min()), int(a.max()))[0] if len(a) else "int8")


class _PackedGaps:
    """A packed block's gaps: which rows' are None (a byte a row), and the rows with long gaps (a tuple of int
    objects each, ~100 bytes as they came off the wire) as their places, lengths and numbers in narrow arrays; the
    others' are ``()``. Iterated: the rows' gaps again."""

    __slots__ = ("lens", "nones", "numbers", "rows")

    def __init__(self, np: Any, gaps: Sequence) -> None:
        self.nones = bytes(map(is_, gaps, repeat(None)))
        rows = list(compress(range(len(gaps)), gaps))  # the rows with a gap: neither None nor ()
        some = [gaps[i] for i in rows]
        self.rows = _narrow(np, np.array(rows, np.int64))
        self.lens = _narrow(np, np.fromiter(map(len, some), np.int64, len(some)))
        self.numbers = _narrow(np, np.fromiter(chain.from_iterable(some), np.int64))

    def __len__(self) -> int:
        return len(self.nones)

    def __iter__(self) -> Iterator[tuple | None]:
        out = list(map(_GAP_OF.__getitem__, self.nones))  # a C-level pass: byte 1 is None, 0 is ()
        if len(self.rows):
            numbers, ends = self.numbers.tolist(), self.lens.cumsum().tolist()
            for i, a, b in zip(self.rows.tolist(), [0, *ends[:-1]], ends, strict=True):
                out[i] = tuple(numbers[a:b])
        return iter(out)


class RowColumns:
    """Rows by column. ``extend_rows`` takes rows from the wire (checked: ValueError naming a malformed one),
    ``append`` one encoded row (a worker), ``extend`` another ``RowColumns``; ``columns()`` is the step's columns by
    name (the arrays and the gaps list themselves: read them, never write them); ``rows()`` the rows again, as lists
    of ints and None (the wire of version 1)."""

    __slots__ = ("_cols", "_pending", "_waiting")

    def __init__(self, cols: list[Sequence] | None = None) -> None:
        self._pending: list | tuple = ()
        """Parts off the wire not widened yet, after the columns' rows: ``(typecode, numbers, gaps)`` each."""
        self._waiting = 0
        """Their rows."""
        self._cols: list | None
        if cols is None:
            self._cols = _empty()
        else:  # lists of ints and None (a test, a worker's own) become arrays
            self._cols = [c if i == _GAPS or type(c) is array else _numbers(c) for i, c in enumerate(cols)]

    @property
    def cols(self) -> list:
        """The columns (``ROW_FIELDS`` order), every pending part widened into them first."""
        if self._pending:
            self.settle()
        if self._cols is None:
            self._cols = _empty()
        return self._cols

    @classmethod
    def of(cls, rows: Iterable[Sequence]) -> RowColumns:
        """Rows (lists or tuples) as columns, checked as from the wire."""
        out = cls()
        out.extend_rows([list(r) if isinstance(r, tuple) else r for r in rows])
        return out

    @classmethod
    def _of_numbers(cls, numbers: np.ndarray, gaps: list) -> RowColumns:
        """``numbers``: int64, one row per ``NUMERIC`` column: an array each (no int objects, none of
        ``__init__``'s checks)."""
        out = cls.__new__(cls)
        out._pending, out._waiting = (), 0
        out._cols = [array("q") for _ in NUMERIC]
        if len(gaps):  # one copy a column, from numpy's buffer
            for col, row in zip(out._cols, numbers if numbers.flags.c_contiguous else numbers.copy(), strict=True):
                col.frombytes(row.data.cast("B"))
        out._cols.insert(_GAPS, gaps)
        return out

    def __len__(self) -> int:
        return (0 if self._cols is None else len(self._cols[_GAPS])) + self._waiting

    def __bool__(self) -> bool:
        return len(self) > 0

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RowColumns) and self.cols == other.cols

    def __repr__(self) -> str:
        return f"RowColumns({len(self)} rows)"

    def __iter__(self) -> Iterator[tuple]:
        return zip(*self._values(), strict=True)

    def __getitem__(self, i: int) -> tuple:
        return tuple(c[i] if k == _GAPS else _value(c[i]) for k, c in enumerate(self.cols))

    def _values(self) -> list[list]:
        return [c if k == _GAPS else list(map(_value, c)) for k, c in enumerate(self.cols)]

    def append(self, row: Sequence) -> None:
        """One row as ``metrics.rows.encode_row`` made it."""
        for k, (col, v) in enumerate(zip(self.cols, row, strict=True)):
            col.append(v if k == _GAPS or v is not None else NONE)

    def extend_rows(self, rows: list) -> None:
        """Rows from the wire: every row a list of ``ROW_FIELDS``' length (an older kneecap's padded with None,
        ``check_rows``) with integer flags, send time and worker; else ValueError and nothing added."""
        if not rows:
            return
        if not isinstance(rows, list):
            raise ValueError(f"request rows must be a list, got {type(rows).__name__}")
        # the usual batch in C-level passes: lists only (a dict's keys or a string would chain too), the total
        # length, and exact int flags, send times and workers (a bool or another type takes check_rows' path)
        flat = list(chain.from_iterable(rows)) if set(map(type, rows)) == {list} else []
        if len(flat) != _N * len(rows) or any(set(map(type, flat[i::_N])) != {int} for i in (_FLAGS, _T_MS, _WORKER)):
            check_rows(rows)  # pads an older kneecap's rows in place, refuses a malformed one by name
            flat = list(chain.from_iterable(rows))
        try:  # gaps as tuples: out of the garbage collector's sight once collected ([] is the one empty tuple)
            new = [[g if g is None else tuple(g) for g in flat[i::_N]] if i == _GAPS else _numbers(flat[i::_N])
                   for i in range(_N)]
        except (TypeError, OverflowError):
            bad = next((r for r in rows if type(r[_GAPS]) not in _GAP_TYPES or not all(
                v is None or isinstance(v, (int, float)) for v in r[:_GAPS] + r[_GAPS + 1:])), rows[0])
            raise ValueError(f"a request row's fields must be numbers or None, gaps a list or None, got "
                             f"{bad!r:.80}") from None
        for col, more in zip(self.cols, new, strict=True):
            col.extend(more)

    @classmethod
    def from_wire(cls, wire: object) -> RowColumns:
        """``[typecode, numbers, gaps]`` off the wire (``wire()``): ValueError naming what is wrong, nothing kept.
        The numbers stay pending (the payload's bytes) until the columns are read."""
        if not (type(wire) is list and len(wire) == 3 and wire[0] in _WIRE_NONE and type(wire[1]) is bytes
                and type(wire[2]) is list):
            raise ValueError(f"request rows by column must be [typecode 'i' or 'q', numbers as bytes, gaps], got "
                             f"{wire!r:.80}")
        code, blob, gaps = wire
        n, size = len(gaps), 4 if code == "i" else 8
        if len(blob) != size * n * len(NUMERIC):
            raise ValueError(f"request rows by column: {len(blob)} bytes of numbers for {n} rows, expected "
                             f"{size * n * len(NUMERIC)}")
        if not _GAP_TYPES.issuperset(map(type, gaps)):
            bad = next(g for g in gaps if type(g) not in _GAP_TYPES)
            raise ValueError(f"a request row's gaps must be a list or None, got {bad!r:.80}")
        view = memoryview(blob).cast(code) if not _SWAP else memoryview(_swapped(code, blob))
        for j, name in _NEVER_NONE.items():  # None is the type's least value: a C-level min a column
            if n and min(view[j * n:(j + 1) * n]) == _WIRE_NONE[code]:
                raise ValueError(f"request rows' {name} must be integers, got None")
        out = cls.__new__(cls)
        out._cols = None
        # tuples: out of the garbage collector's sight once collected ([] is the one empty tuple)
        out._pending, out._waiting = ([(code, blob, [g if g is None else tuple(g) for g in gaps])], n) if n else ((), 0)
        return out

    def settle(self) -> None:
        """Widen every pending part into the columns, in one numpy pass (the master's: it has numpy)."""
        if not self._pending:
            return
        import numpy as np  # imported as a master's run starts (load/master.py)

        parts, self._pending, self._waiting = self._pending, (), 0
        if all(code == "i" for code, _, _ in parts):  # the usual wire: one concatenation, one widening
            wide = _int32_matrix(np, parts).astype(np.int64)
            np.putmask(wide, wide == _WIRE_NONE["i"], NONE)
        else:
            wide = np.concatenate([_widened(np, *part) for part in parts], axis=1)
        more = self._of_numbers(wide, list(chain.from_iterable(g for _, _, g in parts)))._cols
        if self._cols is None or not self._cols[_GAPS]:
            self._cols = more
        else:
            for col, new in zip(self._cols, more, strict=True):  # type: ignore[arg-type]  # more: a RowColumns' own
                col.extend(new)

    def pack(self) -> None:
        """Keep the rows as narrow columns (a master's sealed block: the narrowest signed type that holds a column,
        its least value reserved for None), pending until read (``benchmarks/row_memory.py``)."""
        if not len(self):
            return
        import numpy as np  # imported as a master's run starts (load/master.py)

        parts = self._pending
        if (self._cols is None or not self._cols[_GAPS]) and all(code == "i" for code, _, _ in parts):
            # the usual sealed block, reports off the wire: narrowed from their int32, never widened
            numbers, none = _int32_matrix(np, parts), _WIRE_NONE["i"]
            gaps = list(chain.from_iterable(g for _, _, g in parts))
        else:
            cols, none = self.cols, NONE
            numbers = np.frombuffer(b"".join(cols[i] for i in NUMERIC), np.int64).reshape(len(NUMERIC), -1)
            gaps = cols[_GAPS]
        absent = numbers == none
        lo = np.where(absent, np.iinfo(numbers.dtype).max, numbers).min(axis=1).tolist()  # None left out
        hi = numbers.max(axis=1).tolist()  # None is the least value: the max only of a column all None
        kinds = [_LIMITS[0] if b == none else _kind(a, b, none=True) for a, b in zip(lo, hi, strict=True)]
        some = absent.any(axis=1).tolist()
        # one buffer for the block's columns, the widest first (each view aligned): a block held as one allocation
        # among the seal's temporaries, not 18 (the master's heap fragmented around them: benchmarks/soak.py)
        n, wide_first = numbers.shape[1], sorted(range(len(kinds)), key=lambda j: -kinds[j][3])
        spread = [j for j in wide_first if not (hi[j] == none or (lo[j] == hi[j] and not some[j]))]
        buf = np.empty(sum(n * kinds[j][3] for j in spread), np.uint8)
        packed: list = [None] * len(kinds)
        at = 0
        for j in spread:
            size = n * kinds[j][3]
            packed[j] = narrow = buf[at:at + size].view(kinds[j][0])
            at += size
            narrow[:] = numbers[j]
            if some[j] and kinds[j][0] != numbers.dtype.name:
                np.putmask(narrow, absent[j], kinds[j][1])
        for j, col in enumerate(packed):  # every row None, or the same number: one value, read n times
            if col is None:
                packed[j] = np.broadcast_to(np.array(kinds[j][1] if hi[j] == none else lo[j], kinds[j][0]), (n,))
        self._cols, self._pending, self._waiting = None, [("p", tuple(packed), _PackedGaps(np, gaps))], len(gaps)

    def wire(self) -> list:
        """The columns as a worker ships them: ``[typecode, numbers, gaps]`` (``from_wire`` reads them)."""
        numbers = [self.cols[i] for i in NUMERIC]
        code = "i" if all(map(_fits_int32, numbers)) else "q"
        if code == "i":  # None as int32's least value
            numbers = [array("i", [_WIRE_NONE["i"] if v == NONE else v for v in c] if NONE in c else c)
                       for c in numbers]
        if _SWAP:
            numbers = [array(c.typecode, c) for c in numbers]
            for c in numbers:
                c.byteswap()
        return [code, b"".join(c.tobytes() for c in numbers), list(self.cols[_GAPS])]

    def extend(self, other: RowColumns) -> None:
        """Add ``other``'s rows after these: its pending parts by reference (widened when read)."""
        if other._cols is not None and other._cols[_GAPS]:
            for col, more in zip(self.cols, other._cols, strict=True):  # these rows' pending parts first
                col.extend(more)
        if other._pending:
            if not self._pending:
                self._pending = []
            self._pending.extend(other._pending)  # type: ignore[union-attr]  # only the empty _pending is a tuple
            self._waiting += other._waiting

    def rows(self) -> list[list]:
        """The rows as lists of ints and None, in ``ROW_FIELDS`` order (what protocol version 1 shipped)."""
        return [list(r) for r in zip(*self._values(), strict=True)]

    def columns(self) -> dict[str, Sequence]:
        """Name → the column itself: an ``array('q')`` (None as ``NONE``) for a number, the list of ``gaps``."""
        return dict(zip(ROW_FIELDS, self.cols, strict=True))

    def take(self, idx: Sequence[int]) -> RowColumns:
        """The rows at ``idx``, in that order."""
        if len(idx) < 2:
            return RowColumns([[c[i] for i in idx] if k == _GAPS else array("q", [c[i] for i in idx])
                               for k, c in enumerate(self.cols)])
        get = itemgetter(*idx)  # a C-level gather per column
        return RowColumns([list(get(c)) if k == _GAPS else array("q", get(c)) for k, c in enumerate(self.cols)])

    def compressed(self, keep: Iterable) -> RowColumns:
        """The rows whose ``keep`` is true (a C-level pass a column)."""
        keep = keep if isinstance(keep, (bytes, list)) else list(keep)
        np = sys.modules.get("numpy")  # a master's (imported as its run starts): one gather for every column
        if np is None:
            return RowColumns([list(compress(c, keep)) if k == _GAPS else array("q", compress(c, keep))
                               for k, c in enumerate(self.cols)])
        mask = np.frombuffer(keep, np.uint8) != 0 if isinstance(keep, bytes) else np.array(keep, bool)
        numbers = np.frombuffer(b"".join(self.cols[i] for i in NUMERIC), np.int64).reshape(len(NUMERIC), -1)
        return RowColumns._of_numbers(numbers[:, mask], list(compress(self.cols[_GAPS], keep)))
