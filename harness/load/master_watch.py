"""A worker whose master process is gone stops its load and exits within ~5 s (Locust's own check waits 60 s).

Locust's master answers every worker heartbeat (each second), and Locust's worker quits after 60 s without an
answer: a minute of load that nobody measures. A master process that died on a host that is still up leaves its
port closed, so a connection to it is refused at once. When the answers stop for ``SILENT_S``, the worker tries one
TCP connection to the master's port: refused means no master listens there any more, and the worker stops its
users, says so and exits with ``MASTER_LOST``. A timeout or an unreachable network is a partition (or a whole host
gone): the worker waits, as Locust does, because a master that comes back wants the reports the worker queued
meanwhile (``tests/load/test_multihost.py`` partitions a worker for 10 s).
"""

from __future__ import annotations

import logging
import socket
import time
from typing import Any

import gevent

from harness import exitcodes

__all__ = ["CHECK_EVERY_S", "SILENT_S", "watch_master"]

log = logging.getLogger("kneecap")

SILENT_S = 3.0
"""No heartbeat answer for this long: is the master still there?"""
CHECK_EVERY_S = 1.0
_CONNECT_TIMEOUT_S = 1.0


def watch_master(environment: Any, runner: Any) -> gevent.Greenlet:
    """Watch ``runner``'s (a Locust ``WorkerRunner``) master until it is lost (module docstring)."""

    def loop() -> None:
        while True:
            gevent.sleep(CHECK_EVERY_S)
            last = runner.last_heartbeat_timestamp  # None until the master first answered
            if last is None or time.time() - last < SILENT_S:
                continue
            host, port = runner.master_host, runner.master_port
            if not master_refuses(host, port):
                continue  # a partition, a slow master or a whole host gone: Locust's own 60 s applies
            log.error("kneecap: lost the master: no heartbeat answer for %.0f s and %s:%d refuses connections; "
                      "stopping the load and exiting (exit %d)", time.time() - last, host, port,
                      exitcodes.MASTER_LOST)
            environment.process_exit_code = exitcodes.MASTER_LOST
            runner.quit()  # stops the users; the runner's greenlet ends, so Locust's main shuts the process down
            return

    return gevent.spawn(loop)


def master_refuses(host: str, port: int) -> bool:
    """True when a TCP connection to the master's port is refused (nothing listens there)."""
    try:
        with socket.create_connection((host, port), timeout=_CONNECT_TIMEOUT_S):
            return False
    except ConnectionRefusedError:
        return True
    except OSError:  # timed out, unreachable: not known to be gone
        return False
