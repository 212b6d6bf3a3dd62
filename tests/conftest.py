"""Shared fixtures: a real simulator process on a free loopback port, and a process's output line by line."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO

import pytest

from tests.kit.lanes import lane

# Locust monkey-patches the whole process with gevent when first imported (locust/__init__.py). In a pytest-xdist
# worker that breaks xdist's own thread (gevent's LoopExit when the worker waits for its next test), and in one
# process it made every test after the first Locust import run patched. Import it once here, unpatched (as
# tests/load/test_hub.py does): in-process tests get plain threads; the processes the tests start patch themselves.
os.environ["LOCUST_SKIP_MONKEY_PATCH"] = "1"
try:
    import locust  # noqa: F401
finally:
    del os.environ["LOCUST_SKIP_MONKEY_PATCH"]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """Under ``pytest -n``, a test marked ``timing`` runs with no other test beside it (``tests/kit/lanes.py``)."""
    if not hasattr(item.config, "workerinput"):  # not an xdist worker: nothing runs beside anything
        return (yield)
    folder = pathlib.Path(item.config.workerinput["lanes_dir"])
    with lane(folder, alone=item.get_closest_marker("timing") is not None):
        return (yield)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """xdist (controller): every worker locks in the same folder, this session's."""
    node.workerinput["lanes_dir"] = str(node.config._lanes_dir)


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):
        config._lanes_dir = pathlib.Path(tempfile.mkdtemp(prefix="kneecap-lanes-"))


def pytest_unconfigure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):
        shutil.rmtree(config._lanes_dir, ignore_errors=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Longest first: tests that start real processes (marked ``integration``, most of the suite's wall time, mostly
    waiting) run before the quick pure ones, so that with ``-n`` (pytest-xdist, README) the quick ones fill the gaps
    instead of a long run starting last; a module sharing one real run (an ``xdist_group``) before the rest. Tests
    marked ``timing`` come last, one at a time on a machine the others have left (``tests/kit/lanes.py``)."""
    items.sort(key=lambda item: (item.get_closest_marker("timing") is not None,
                                 item.get_closest_marker("integration") is None,
                                 item.get_closest_marker("xdist_group") is None))


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


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    """A tiny-preset simulator (8 slots, fast iterations) shared by a test module."""
    with start_sim("--preset", "tiny", "--stall-s", "0.5", "--long-line-bytes", "70000", "--eos-median", "30") as s:
        yield s


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
