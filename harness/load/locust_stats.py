"""Locust's own request counts per second, kept only as far back as Locust reads them.

Locust counts every request of a stats entry by the second it ended (``StatsEntry.num_reqs_per_sec``, failures in
``num_fail_per_sec``) and reads only the last ~12 seconds (``current_rps``, ``current_fail_per_sec``: the web UI's
RPS, the console table). A worker resets its entries with every report; the process that merges them (the master,
or a local run's one process) keeps a key a second for as long as the run lasts, in every entry and the total: 189
KB in 20 minutes of a traced soak (``benchmarks/soak.py --trace``), ~9.5 KB a minute. ``trim_per_second``
drops the seconds older than ``KEEP_S`` before the newest request; ``start_trimming`` does it every ``EVERY_S``.
"""

from __future__ import annotations

from typing import Any

import gevent

__all__ = ["EVERY_S", "KEEP_S", "start_trimming", "trim_per_second"]

KEEP_S = 60
"""Seconds of per-second counts kept: five times what Locust reads (12 s back from the last request)."""
EVERY_S = 30.0


def trim_per_second(stats: Any, now: float, keep_s: int = KEEP_S) -> int:
    """Drop from every entry of Locust's ``RequestStats`` (and its total) the seconds before ``now - keep_s``;
    returns how many were dropped."""
    oldest = int(now) - keep_s
    dropped = 0
    for entry in [stats.total, *stats.entries.values()]:
        for counts in (entry.num_reqs_per_sec, entry.num_fail_per_sec):
            old = [t for t in counts if t < oldest]
            for t in old:
                del counts[t]
            dropped += len(old)
    return dropped


def start_trimming(environment: Any, every_s: float = EVERY_S) -> gevent.Greenlet:
    """Trim ``environment.stats`` every ``every_s`` for as long as the process lives, back from its newest request
    (the workers' clocks: Locust's keys are theirs)."""

    def loop() -> None:
        while True:
            gevent.sleep(every_s)
            newest = environment.stats.last_request_timestamp
            if newest is not None:
                trim_per_second(environment.stats, newest)

    return gevent.spawn(loop)
