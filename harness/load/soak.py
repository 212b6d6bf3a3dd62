"""A process's own health over a long run, for soaks: off unless ``KNEECAP_SOAK_FILE`` names a file.

Every ``KNEECAP_SOAK_EVERY_S`` seconds (30 by default) each kneecap process (master, workers) appends one JSON line
to that file: its role and pid, resident memory, open file descriptors, live greenlets (those made since the master
froze its start-up heap: growth is what counts), tracked Python objects, and its role's own sizes (the master:
steps, buckets and request rows held; ``benchmarks/soak.py`` reads them). Counting greenlets and objects walks the
garbage collector's lists (~10-50 ms in a worker): one short stall per interval, which is why it is off outside
soaks.
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

FILE_ENV, EVERY_ENV = "KNEECAP_SOAK_FILE", "KNEECAP_SOAK_EVERY_S"


def start_soak_sampler(role: str, sizes: Callable[[], dict[str, int]] = dict) -> gevent.Greenlet | None:
    """Sample this process into ``$KNEECAP_SOAK_FILE`` every ``$KNEECAP_SOAK_EVERY_S`` s; None when not asked."""
    path = os.environ.get(FILE_ENV)
    if not path:
        return None
    every = float(os.environ.get(EVERY_ENV) or 30.0)
    me = psutil.Process()

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
            with open(path, "a", encoding="utf-8") as f:  # one short line per write: appends do not interleave
                f.write(json.dumps(line) + "\n")

    return gevent.spawn(loop)
