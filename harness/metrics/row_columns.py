"""A bucket's request rows (``metrics.rows``), kept by column: one list per ``ROW_FIELDS`` name. Pure.

Why columns: the master receives rows by the hundred in every worker's report and reads them by column when it
judges the step. Kept as rows (a tuple each) they cost a Python object per request, made one at a time per report
(a fifth of a 300-worker merge under cProfile, ``benchmarks/fleet_merge.py``), and a pass over all of them per
step to turn them into columns (~45 ms at 100k requests, ``benchmarks/tail_attribution.py``). Kept as columns,
a report's rows join them in one C-level pass per field, the step's columns are ready when it is judged, and the
garbage collector sees 19 lists a bucket, not a tuple a request. Values are the rows' own (ints, None; ``gaps`` a
tuple or None), so the answers are the same.

On the wire a worker's bucket ships its columns (protocol version 2: ``from_wire`` checks them and takes the
lists as they come, a report's rows then cost the master a check and a copy per column, not a pass per value);
version 1 shipped rows (``rows()``, ``extend_rows``), which the master still reads.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import chain, compress
from operator import itemgetter

from harness.metrics.rows import ROW_FIELDS, check_rows

__all__ = ["RowColumns"]

_N = len(ROW_FIELDS)
_FLAGS, _T_MS, _WORKER, _GAPS = (ROW_FIELDS.index(f) for f in ("flags", "t_ms", "worker", "gaps"))
_GAP_TYPES = frozenset((list, type(None)))


class RowColumns:
    """Rows by column. ``extend_rows`` takes rows from the wire (checked: ValueError naming a malformed one),
    ``append`` one encoded row (a worker), ``extend`` another ``RowColumns``; ``columns()`` is the step's columns by
    name (the lists themselves: read them, never write them); ``rows()`` the rows again, as lists (the wire)."""

    __slots__ = ("cols",)

    def __init__(self, cols: list[list] | None = None) -> None:
        self.cols: list[list] = cols if cols is not None else [[] for _ in ROW_FIELDS]

    @classmethod
    def of(cls, rows: Iterable[Sequence]) -> RowColumns:
        """Rows (lists or tuples) as columns, checked as from the wire."""
        out = cls()
        out.extend_rows([list(r) if isinstance(r, tuple) else r for r in rows])
        return out

    def __len__(self) -> int:
        return len(self.cols[0])

    def __bool__(self) -> bool:
        return bool(self.cols[0])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RowColumns) and self.cols == other.cols

    def __repr__(self) -> str:
        return f"RowColumns({len(self)} rows)"

    def __iter__(self) -> Iterator[tuple]:
        return zip(*self.cols, strict=True)

    def __getitem__(self, i: int) -> tuple:
        return tuple(c[i] for c in self.cols)

    def append(self, row: Sequence) -> None:
        """One row as ``metrics.rows.encode_row`` made it."""
        for col, v in zip(self.cols, row, strict=True):
            col.append(v)

    def extend_rows(self, rows: list) -> None:
        """Rows from the wire: every row a list of ``ROW_FIELDS``' length (an older kneecap's padded with None,
        ``check_rows``) with integer flags, send time and worker; else ValueError and nothing added."""
        if not rows:
            return
        if not isinstance(rows, list):
            raise ValueError(f"request rows must be a list, got {type(rows).__name__}")
        # the usual batch in C-level passes: lists only (a dict's keys or a string would chain too), the total
        # length, and exact int flags and send times (a bool or another type takes check_rows' path)
        flat = list(chain.from_iterable(rows)) if set(map(type, rows)) == {list} else []
        if len(flat) != _N * len(rows) or any(set(map(type, flat[i::_N])) != {int} for i in (_FLAGS, _T_MS, _WORKER)):
            check_rows(rows)  # pads an older kneecap's rows in place, refuses a malformed one by name
            flat = list(chain.from_iterable(rows))
        gaps = flat[_GAPS::_N]
        try:  # tuples: out of the garbage collector's sight once collected ([] is the one empty tuple)
            gaps = [g if g is None else tuple(g) for g in gaps]
        except TypeError:
            raise ValueError(f"a request row's gaps must be a list or None, got {gaps!r:.80}") from None
        for i, col in enumerate(self.cols):
            col.extend(gaps if i == _GAPS else flat[i::_N])

    @classmethod
    def from_wire(cls, cols: object) -> RowColumns:
        """Columns off the wire (``ROW_FIELDS``' number of lists of one length, integer flags, send times and
        workers, gaps lists or None); the lists are taken, not copied: ValueError naming what is wrong, and nothing
        kept."""
        if not (type(cols) is list and len(cols) == _N and set(map(type, cols)) == {list}
                and len(set(map(len, cols))) == 1):
            raise ValueError(f"request rows by column must be {_N} lists of one length, got {cols!r:.80}")
        for name, i in (("flags", _FLAGS), ("t_ms", _T_MS), ("worker", _WORKER)):
            if cols[i] and set(map(type, cols[i])) != {int}:
                raise ValueError(f"request rows' {name} must be integers, got {cols[i]!r:.80}")
        gaps = cols[_GAPS]
        if not _GAP_TYPES.issuperset(map(type, gaps)):
            bad = next(g for g in gaps if type(g) not in _GAP_TYPES)
            raise ValueError(f"a request row's gaps must be a list or None, got {bad!r:.80}")
        # tuples: out of the garbage collector's sight once collected ([] is the one empty tuple)
        cols[_GAPS] = [g if g is None else tuple(g) for g in gaps]
        return cls(cols)

    def wire(self) -> list[list]:
        """The columns as a worker ships them (copies, ``ROW_FIELDS`` order; ``from_wire`` reads them)."""
        return [list(c) for c in self.cols]

    def extend(self, other: RowColumns) -> None:
        for col, more in zip(self.cols, other.cols, strict=True):
            col.extend(more)

    def rows(self) -> list[list]:
        """The rows as lists, in ``ROW_FIELDS`` order (what protocol version 1 shipped)."""
        return [list(r) for r in zip(*self.cols, strict=True)]

    def columns(self) -> dict[str, list]:
        return dict(zip(ROW_FIELDS, self.cols, strict=True))

    def take(self, idx: Sequence[int]) -> RowColumns:
        """The rows at ``idx``, in that order."""
        if len(idx) < 2:
            return RowColumns([[c[i] for i in idx] for c in self.cols])
        get = itemgetter(*idx)  # a C-level gather per column
        return RowColumns([list(get(c)) for c in self.cols])

    def compressed(self, keep: Iterable) -> RowColumns:
        """The rows whose ``keep`` is true (a C-level pass a column)."""
        keep = keep if isinstance(keep, (bytes, list)) else list(keep)
        return RowColumns([list(compress(c, keep)) for c in self.cols])
