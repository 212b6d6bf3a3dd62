"""Around a process a test starts: a free loopback port for it to listen on, its output line by line as it comes."""

from __future__ import annotations

import pathlib
import random
import socket
import threading
import time
from typing import IO

__all__ = ["Lines", "free_port", "port_below_ephemeral"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_below_ephemeral() -> int:
    """A free loopback port below the kernel's ephemeral range (``ip_local_port_range``), or ``free_port()`` when that
    range leaves no room below it: no ``bind(0)`` and no outgoing connection anywhere is handed such a port, so it
    stays this test's while nothing listens on it (a database down on purpose, to come back on the same port)."""
    low = int(pathlib.Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    rng = random.Random()
    for _ in range(100 if low > 11_024 else 0):
        port = rng.randrange(low - 10_000, low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    return free_port()


class Lines:
    """A process's output, read line by line by a thread as it comes; ``wait_for`` blocks until a line matches."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._ended = False
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()
        with self._changed:
            self._ended = True
            self._changed.notify_all()

    def wait_for(self, text: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        seen = 0
        with self._changed:
            while True:
                for line in self.lines[seen:]:
                    if text in line:
                        return line
                seen = len(self.lines)
                left = deadline - time.monotonic()
                assert not self._ended and left > 0, f"no line with {text!r} in:\n{''.join(self.lines)}"
                self._changed.wait(left)

    def text(self) -> str:
        """Everything so far; after the process has exited and ``join``, everything."""
        with self._changed:
            return "".join(self.lines)

    def join(self) -> None:
        self._thread.join(timeout=10)
