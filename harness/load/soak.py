"""A process's own health over a long run, for soaks: off unless ``KNEECAP_SOAK_FILE`` names a file.

Every ``KNEECAP_SOAK_EVERY_S`` seconds (30 by default) each kneecap process (master, workers) appends one JSON line
to that file: its role and pid, resident memory, open file descriptors, live greenlets (those made since the master
froze its start-up heap: growth is what counts), tracked Python objects, and its role's own sizes (the master:
steps, buckets and request rows held; ``benchmarks/soak.py`` reads them). Counting greenlets and objects walks the
garbage collector's lists (~10-50 ms in a worker): one short stall per interval, which is why it is off outside
soaks. ``KNEECAP_SOAK_TRACE`` (seconds): the master also traces its allocations (``tracemalloc``, slower) and, from
that many seconds on, adds to each line the allocation sites that grew most since then (``trace``: KiB, objects,
the site's last frames): how the rows' gaps and the scrapes' series were found growing.
"""

from __future__ import annotations

import gc
import json
import os
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
                    "greenlets": sum(isinstance(o, greenlet.greenlet) for o in objects),
                    "objects": len(objects) + gc.get_freeze_count(),
                    **sizes()}
            del objects
            if trace is not None:
                grown = trace.since_base(line["t"])
                if grown:
                    line["trace"] = grown
            with open(path, "a", encoding="utf-8") as f:  # one short line per write: appends do not interleave
                f.write(json.dumps(line) + "\n")

    return gevent.spawn(loop)


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
