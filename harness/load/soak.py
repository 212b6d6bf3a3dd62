"""A process's own health over a long run, for soaks: off unless ``KNEECAP_SOAK_FILE`` names a file.

Every ``KNEECAP_SOAK_EVERY_S`` seconds (30 by default) each kneecap process (master, workers) appends one JSON line
to that file: its role and pid, resident memory, open file descriptors, live greenlets of its loop (those made since
the master froze its start-up heap: growth is what counts), its native threads and how many are gevent's pool's,
tracked Python objects, the two allocators' own accounts (glibc's heap: its size, the part in use and the part free;
pymalloc's arenas, their blocks in use and free: RSS that grows while the parts in use do not is fragmentation, not
objects held), and its role's own sizes (the master: steps, buckets and request rows held; ``benchmarks/soak.py``
reads them). Counting greenlets and objects walks the garbage collector's lists (~10-50 ms in a worker): one short
stall per interval, which is why it is off outside soaks. ``KNEECAP_SOAK_TRACE`` (seconds): the master also traces
its allocations (``tracemalloc``, slower) and, from that many seconds on, adds to each line the allocation sites that
grew most since then (``trace``: KiB, objects, the site's last frames): how the rows' gaps, the scrapes' series and
Locust's per-second counts were found growing.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable

import gevent
import greenlet
import psutil

__all__ = ["start_soak_sampler"]

FILE_ENV, EVERY_ENV, TRACE_ENV = "KNEECAP_SOAK_FILE", "KNEECAP_SOAK_EVERY_S", "KNEECAP_SOAK_TRACE"


def start_soak_sampler(role: str, sizes: Callable[[], dict[str, int]] = dict) -> gevent.Greenlet | None:
    """Sample this process into ``$KNEECAP_SOAK_FILE`` every ``$KNEECAP_SOAK_EVERY_S`` s; None when not asked."""
    path = os.environ.get(FILE_ENV)
    if not path:
        return None
    every = float(os.environ.get(EVERY_ENV) or 30.0)
    me = psutil.Process()
    trace = _Growth(float(os.environ[TRACE_ENV])) if os.environ.get(TRACE_ENV) and role == "master" else None

    def loop() -> None:
        while True:
            gevent.sleep(every)
            objects = gc.get_objects()
            line = {"role": role, "pid": me.pid, "t": round(time.time(), 3),
                    "rss_mb": round(me.memory_info().rss / 2**20, 2), "fds": me.num_fds(),
                    "greenlets": _loop_greenlets(objects), "threads": me.num_threads(),
                    "pool_threads": gevent.get_hub().threadpool.size,
                    "objects": len(objects) + gc.get_freeze_count(),
                    **_malloc(), **_pymalloc(), **sizes()}
            del objects
            if trace is not None:
                grown = trace.since_base(line["t"])
                if grown:
                    line["trace"] = grown
            with open(path, "a", encoding="utf-8") as f:  # one short line per write: appends do not interleave
                f.write(json.dumps(line) + "\n")

    return gevent.spawn(loop)


def _loop_greenlets(objects: list) -> int:
    """The greenlets of this thread's loop: not those of gevent's pool threads (``pool_threads``, a worker greenlet
    and a root each), which the pool adds when work overlaps, up to its size, and keeps (counted with them, the
    master's went 1 → 3 once in each of two hour-long soaks, at minutes 25 and 50)."""
    mine = _root(greenlet.getcurrent())
    return sum(isinstance(o, greenlet.greenlet) and _root(o) is mine for o in objects)


def _root(g: greenlet.greenlet) -> greenlet.greenlet:
    while g.parent is not None:
        g = g.parent
    return g


def _malloc() -> dict[str, float]:
    """glibc's own account of its heap (``mallinfo2``, all arenas): RSS that grows while ``heap_used_mb`` does not is
    memory freed but kept (fragmentation), not objects held. Empty where it is not glibc."""
    global _MALLINFO
    if _MALLINFO is None:
        try:
            libc = ctypes.CDLL("libc.so.6")
            libc.mallinfo2.restype = _Mallinfo2
            _MALLINFO = libc.mallinfo2
        except (OSError, AttributeError):
            _MALLINFO = False
    if not callable(_MALLINFO):  # False: not glibc
        return {}
    m = _MALLINFO()
    return {"heap_mb": round(m.arena / 2**20, 2), "heap_used_mb": round(m.uordblks / 2**20, 2),
            "heap_free_mb": round(m.fordblks / 2**20, 2), "malloc_mmap_mb": round(m.hblkhd / 2**20, 2)}


def _pymalloc() -> dict[str, float]:
    """Python's small-object allocator (``sys._debugmallocstats``, which writes to descriptor 2: read back from a
    file): its arenas, the bytes in live objects and those free inside the arenas."""
    with tempfile.TemporaryFile() as f:
        saved = os.dup(2)
        try:
            os.dup2(f.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        f.seek(0)
        text = f.read().decode(errors="replace")
    out = {}
    for key, pattern in (("py_arenas_mb", r"(\d+) arenas \* (\d+) bytes/arena"),
                         ("py_used_mb", r"# bytes in allocated blocks\s+=\s+([\d,]+)"),
                         ("py_free_mb", r"# bytes in available blocks\s+=\s+([\d,]+)"),
                         ("py_unused_pools_mb", r"unused pools \* \d+ bytes\s+=\s+([\d,]+)")):
        m = re.search(pattern, text)
        if m:
            n = int(m.group(1).replace(",", "")) * (int(m.group(2)) if m.lastindex == 2 else 1)
            out[key] = round(n / 2**20, 2)
    return out


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


_MALLINFO: Callable | bool | None = None


class _Growth:
    """The allocation sites that grew most since the first snapshot at or after ``after_s``."""

    def __init__(self, after_s: float) -> None:
        import tracemalloc

        tracemalloc.start(4)
        self.after = time.time() + after_s
        self.base: tracemalloc.Snapshot | None = None

    def since_base(self, now: float) -> list | None:
        import tracemalloc

        if now < self.after:
            return None
        snap = tracemalloc.take_snapshot()
        if self.base is None:
            self.base = snap
            return None
        return [[round(d.size_diff / 1024), d.count_diff,
                 [f"{'/'.join(f.filename.split('/')[-2:])}:{f.lineno}" for f in d.traceback]]
                for d in snap.compare_to(self.base, "traceback")[:12]]
