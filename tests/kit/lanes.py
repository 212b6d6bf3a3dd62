"""Lanes for ``pytest -n`` (pytest-xdist): tests marked ``timing`` run alone, everything else side by side.

Most of the suite's wall time is real processes waiting (a load step lasts seconds whatever the CPU does),
so three xdist workers on two cores finish it in under half the time (four overloaded the cores: knee
and generator-health assertions failed in one fresh-clone run of two). A few tests assert on time itself — a
client stamp within a millisecond of the server's, a send lag under 10 ms, a count of requests in 2 s — and
those need the cores to themselves, as on a quiet machine. They are marked ``@pytest.mark.timing``.

A readers–writer lock across the xdist workers, on one file (``flock``): every test holds the shared lock
while it runs; a ``timing`` test holds the exclusive one, so it waits for the tests running elsewhere to end
and no test starts beside it. Readers are not held back for a waiting writer (a writer that blocked the
other workers would idle them for as long as the longest test running, up to 90 s): ``timing`` tests come
last in the order (``conftest.py``), where they run one after the other on a quiet machine. Without xdist
(one process) nothing is locked.
"""

from __future__ import annotations

import fcntl
import os
import pathlib
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["lane"]


@contextmanager
def _flock(path: pathlib.Path, mode: int) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, mode)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


@contextmanager
def lane(folder: pathlib.Path, *, alone: bool) -> Iterator[None]:
    """Hold the shared lock (``alone=False``) or the exclusive one (``alone=True``) for the duration."""
    with _flock(folder / "lanes.lock", fcntl.LOCK_EX if alone else fcntl.LOCK_SH):
        yield
