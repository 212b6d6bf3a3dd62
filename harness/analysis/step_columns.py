"""A judged step's request-row columns, each turned into a numpy array at most once. Pure (numpy at first use).

The master keeps a step's rows as Python lists by column (``metrics.row_columns``) and its analysis reads them
many times: the tail's four metrics, the TTFT split's parts, the pauses' send times and ends, the long prompts. Each
read that wants numbers in an array paid its own list → array pass (~3 ms a column at 100k requests): a fifth of a
judged step went to converting the same columns again (``benchmarks/tail_attribution.py``, cProfile). A
``StepColumns`` is the step's columns (name → list, read as before) and each column's array, made on the first ask.
The analysis asks through ``floats``/``ints`` below, which take a plain dict of lists too (tests, a worker's report):
then the array is made each time, as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

__all__ = ["StepColumns", "floats", "ints"]


class StepColumns(dict):
    """name → the column as kept (a list: read it, never write it); ``floats(name)``, ``ints(name)``: its array,
    made once."""

    __slots__ = ("_arrays",)

    def __init__(self, columns: Mapping[str, Sequence] = (), /) -> None:
        super().__init__(columns)
        self._arrays: dict[tuple[str, str], Any] = {}

    def floats(self, name: str) -> np.ndarray:
        """The column as float64, None as NaN (the rows' values are integers below 2^53: exact)."""
        key = (name, "f")
        if key not in self._arrays:
            self._arrays[key] = _floats(self[name])
        return self._arrays[key]

    def ints(self, name: str) -> np.ndarray:
        """The column as int64: a column that never holds None (flags, send times, workers); TypeError otherwise."""
        key = (name, "i")
        if key not in self._arrays:
            self._arrays[key] = _ints(self[name])
        return self._arrays[key]


def floats(cols: Mapping[str, Sequence], name: str) -> np.ndarray:
    """``cols[name]`` as float64, None as NaN: a ``StepColumns``' own array (read it, never write it)."""
    return cols.floats(name) if isinstance(cols, StepColumns) else _floats(cols[name])


def ints(cols: Mapping[str, Sequence], name: str) -> np.ndarray:
    """``cols[name]`` as int64 (no None in it): a ``StepColumns``' own array (read it, never write it)."""
    return cols.ints(name) if isinstance(cols, StepColumns) else _ints(cols[name])


def _floats(col: Sequence) -> np.ndarray:
    import numpy as np  # here: numpy only in a process that judges a step (tests/load/test_lean_imports.py)

    try:  # ~40% cheaper than np.array when there is no None; a None, usually among the first, ends it soon
        return np.fromiter(col, np.float64, len(col))
    except TypeError:
        return np.array(col, dtype=np.float64)


def _ints(col: Sequence) -> np.ndarray:
    import numpy as np

    return np.fromiter(col, np.int64, len(col))
