"""A judged step's request-row columns as numpy arrays (without a copy) and, where asked, as lists. Pure.

The master keeps a step's rows by column, each number an int64 ``array('q')`` (None as ``row_columns.NONE``,
``metrics.row_columns``); its analysis reads them many times: the tail's four metrics, the TTFT split's parts, the
pauses' send times and ends, the long prompts. ``StepColumns`` gives each as a numpy array: ``ints`` over the same
memory, ``floats`` a float64 copy with None as NaN, made once — converting Python lists again for each reader was a
third of a judged 100k-request step (``benchmarks/tail_attribution.py``). Reading it as a mapping
(``cols["output"]``) gives what the rest of the analysis was written for, a list of ints and None, made once a column
and only for the columns read that way (a mix's classes, the probes). A plain dict of lists (tests,
``tail_rows.columns``) works the same: the functions ``floats``/``ints`` convert its lists each time.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Mapping, Sequence
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from harness.metrics.row_columns import NONE

if TYPE_CHECKING:
    import numpy as np

__all__ = ["StepColumns", "floats", "ints"]


class StepColumns(Mapping[str, Sequence[Any]]):
    """name → the column as a list of ints and None (``gaps``: its list); ``floats(name)``, ``ints(name)``: as an
    array (read them, never write them); ``take(idx)``: the rows ``idx`` as another ``StepColumns``."""

    def __init__(self, columns: Mapping[str, Any]) -> None:
        self._raw: dict[str, Any] = dict(
            columns.items() if not isinstance(columns, StepColumns) else columns._raw.items())
        self._made: dict[tuple[str, str], Any] = {}

    def __getitem__(self, name: str) -> Sequence[Any]:
        raw = self._raw[name]
        if isinstance(raw, list):
            return raw
        return self._memo(name, "l", lambda: _as_list(raw))

    def __iter__(self) -> Iterator[str]:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)

    def floats(self, name: str) -> np.ndarray:
        """The column as float64, None as NaN (the rows' values are integers below 2^53: exact)."""
        raw = self._raw[name]
        return self._memo(name, "f", lambda: _floats(raw))

    def ints(self, name: str) -> np.ndarray:
        """The column as int64: a column that never holds None (flags, send times, workers); TypeError otherwise."""
        raw = self._raw[name]
        return self._memo(name, "i", lambda: _ints(raw))

    def take(self, idx: Sequence[int]) -> StepColumns:
        """The rows ``idx`` (in that order): arrays gathered, lists by a C-level gather."""
        import numpy as np

        at = np.asarray(idx, dtype=np.int64)
        get = itemgetter(*idx) if len(idx) > 1 else (lambda col: tuple(col[i] for i in idx))
        return StepColumns({k: list(get(v)) if isinstance(v, list) else _int64(v)[at] for k, v in self._raw.items()})

    def _memo(self, name: str, kind: str, make: Any) -> Any:
        key = (name, kind)
        if key not in self._made:
            self._made[key] = make()
        return self._made[key]


def floats(cols: Mapping[str, Any], name: str) -> np.ndarray:
    """``cols[name]`` as float64, None as NaN: a ``StepColumns``' own array (read it, never write it)."""
    return cols.floats(name) if isinstance(cols, StepColumns) else _floats(cols[name])


def ints(cols: Mapping[str, Any], name: str) -> np.ndarray:
    """``cols[name]`` as int64 (no None in it): a ``StepColumns``' own array (read it, never write it)."""
    return cols.ints(name) if isinstance(cols, StepColumns) else _ints(cols[name])


def _int64(col: array | np.ndarray) -> np.ndarray:
    import numpy as np  # here: numpy only in a process that judges a step (tests/load/test_lean_imports.py)

    return np.frombuffer(col, dtype=np.int64)  # the same memory: no copy


def _floats(col: Any) -> np.ndarray:
    import numpy as np

    if isinstance(col, (array, np.ndarray)):  # int64, None as NONE (metrics.row_columns)
        a = _int64(col)
        out = a.astype(np.float64)
        out[a == NONE] = np.nan
        return out
    try:  # ~40% cheaper than np.array when there is no None; a None, usually among the first, ends it soon
        return np.fromiter(col, np.float64, len(col))
    except TypeError:
        return np.array(col, dtype=np.float64)


def _ints(col: Any) -> np.ndarray:
    import numpy as np

    if isinstance(col, (array, np.ndarray)):
        a = _int64(col)
        if (a == NONE).any():
            raise TypeError("an integer column holds None")
        return a
    return np.fromiter(col, np.int64, len(col))


def _as_list(col: array | np.ndarray) -> list:
    """Ints, and None for ``NONE``."""
    import numpy as np

    a = _int64(col)
    out = a.tolist()
    for i in np.flatnonzero(a == NONE).tolist():
        out[i] = None
    return out
