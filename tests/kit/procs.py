"""Around a process a test starts: a free loopback port for it to listen on, its output line by line as it comes."""

from __future__ import annotations

import socket
import threading
import time
from typing import IO

__all__ = ["Lines", "free_port"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
