"""A real simulator process (``kneecap sim``) on a free loopback port, for as long as a ``with`` block."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

__all__ = ["SimProcess", "start_sim"]


@dataclass
class SimProcess:
    host: str
    port: int
    proc: subprocess.Popen

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


@contextmanager
def start_sim(*args: str) -> Iterator[SimProcess]:
    """Run ``kneecap sim --port 0 ARGS`` and wait for /health; always stops it."""
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "sim", "--port", "0", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        match = re.search(r"http://([\d.]+):(\d+)", line)
        if not match:
            proc.kill()
            raise RuntimeError(f"simulator did not start: {line!r} {proc.stderr.read()!r}")
        sim = SimProcess(match.group(1), int(match.group(2)), proc)
        deadline = time.monotonic() + 10
        while True:
            try:
                with urllib.request.urlopen(sim.url + "/health", timeout=1) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield sim
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
