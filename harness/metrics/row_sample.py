"""A bucket's request rows, at most a cap of them: a uniform sample of its requests, in blocks. Pure.

Past the cap (``metrics.aggregate.ROWS_CAP``) the rows are a Bernoulli sample of every request at one rate, the
same for all whichever worker and report they came in (so a uniform sample): when the rows pass the cap the rate
halves, and the blocks (``BLOCK_ROWS`` rows) above it are thinned to it one per report, not all at once — each
thinning a random byte a row and one gather of every column, where halving 100k rows at once held a master's loop
74 ms in one report (``benchmarks/fleet_merge.py``, 1,000 workers). A report's rows join the open (last) block at
their own rate, and that block is thinned once it is sealed (a block of 8,192 rows in one gather, ~0.06 µs a row,
not 45 rows at a time at ~0.3); rows with no open block at their rate are thinned as they come. When the step is
judged (``joined``), every block is at the rate. Between half the cap and the cap rows are kept, and at most one
open block's worth more until it is sealed. On a master a sealed block is packed (``RowColumns.pack``: each column
in the narrowest integer type that holds it: 28 bytes a row held against 210 as int64, ``benchmarks/row_memory.py``)
and widened only when the step is judged: an hour-long step's rows are what a master's memory grows by
(``benchmarks/soak.py``).

Why not a fixed-size reservoir: replacing a row at a random place costs a write into every column, each a cache
miss (~0.45 µs: 19 a row), with the draws of the places two fifths of a 1,000-worker merge past the cap (cProfile)
(``benchmarks/fleet_merge.py``). Seeded: the same reports in the same order, the same rows.
"""

from __future__ import annotations

import math
import random
import sys
from itertools import islice

from harness.metrics.row_columns import RowColumns

__all__ = ["BLOCK_ROWS", "RowSample"]

BLOCK_ROWS = 8192
_HALVING = [bytes(int(b < 256 >> j) for b in range(256)) for j in range(9)]
"""``_HALVING[j]`` maps a random byte to 1 with probability 2^-j: a Bernoulli mask by ``bytes.translate``."""


def _seal(rows: RowColumns) -> None:
    """A sealed block packed (``RowColumns.pack``) on a master, which has numpy; a worker's kept as it is."""
    if "numpy" in sys.modules:
        rows.pack()


class RowSample:
    """Usage: ``add(rows, rate)`` (``rows`` a uniform sample of their requests at ``rate``), ``append(row)`` (one
    request's row, a worker), ``joined()`` the rows as one ``RowColumns``, every block at the sample's ``rate``."""

    __slots__ = ("_n", "_rng", "blocks", "cap", "rate")

    def __init__(self, cap: int) -> None:
        self.blocks: list[list] = []
        """[RowColumns, the rate its rows were sampled at], oldest first."""
        self.cap = cap
        self.rate = 1.0
        """Each request's chance to be among the rows once every block is thinned to it."""
        self._n = 0
        self._rng: random.Random | None = None

    def __len__(self) -> int:
        return self._n

    def __bool__(self) -> bool:
        return self._n > 0

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RowSample) and self.joined() == other.joined()

    def __repr__(self) -> str:
        return f"RowSample({self._n} rows, rate {self.rate:g})"

    def append(self, row: list) -> None:
        """One request's row (``metrics.rows.encode_row``)."""
        last = self.blocks[-1] if self.blocks else None
        if self.rate == 1.0 and self._n < self.cap and last is not None and len(last[0]) < BLOCK_ROWS:
            last[0].append(row)
            self._n += 1
        else:
            self.add(RowColumns([[v] for v in row]))

    def add(self, rows: RowColumns, rate: float = 1.0, *, take: bool = False) -> None:
        """``rows``, a uniform sample of their requests at ``rate`` (1: all of them); copied, never kept, unless
        ``take`` (rows no one else holds: a report's off the wire) and they begin a block."""
        if not rows:
            return
        last = self.blocks[-1] if self.blocks else None
        if rate > self.rate and (last is None or last[1] != rate):  # no open block at their rate: thinned now
            rows, rate = self._thinned(rows, self.rate / rate), self.rate
        elif rate < self.rate:
            self.rate = rate  # the blocks above it are thinned below, one a call
        if last is None or last[1] != rate or len(last[0]) + len(rows) > BLOCK_ROWS:
            if last is not None:  # the block before is sealed: packed now, in one pass (a worker's: as it is)
                _seal(last[0])
            self.blocks.append([rows if take else RowColumns(), rate])
            if not take:
                self.blocks[-1][0].extend(rows)
        else:
            last[0].extend(rows)
        self._n += len(rows)
        while self._n > self.cap and sum(len(b) * self.rate / r for b, r in self.blocks) > self.cap:
            self.rate /= 2
        for entry in islice(self.blocks, len(self.blocks) - 1):  # a sealed block above the rate, one a call
            if entry[1] > self.rate:
                self._thin(entry)
                break

    def joined(self) -> RowColumns:
        """Every row, each block thinned to the rate: one ``RowColumns`` (the only block itself when there is one
        at the rate — a worker's report: read it, never write it)."""
        if len(self.blocks) == 1 and self.blocks[0][1] == self.rate:
            return self.blocks[0][0]
        out = RowColumns()
        for entry in self.blocks:
            if entry[1] > self.rate:
                self._thin(entry)
            out.extend(entry[0])
        return out

    def _thin(self, entry: list) -> None:
        before = len(entry[0])
        entry[0] = self._thinned(entry[0], self.rate / entry[1])
        entry[1] = self.rate
        if entry is not self.blocks[-1]:
            _seal(entry[0])
        self._n -= before - len(entry[0])

    def _thinned(self, rows: RowColumns, keep: float) -> RowColumns:
        if self._rng is None:
            self._rng = random.Random(0)
        rng, n = self._rng, len(rows)
        j = -math.log2(keep)
        if j == int(j) and 0 < j < len(_HALVING):  # the usual case: a power of two, a random byte a row
            return rows.compressed(rng.randbytes(n).translate(_HALVING[int(j)]))
        return rows.compressed([rng.random() < keep for _ in range(n)])
