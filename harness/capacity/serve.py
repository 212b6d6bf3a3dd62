"""A sweep's server: started for a set of params, waited for, asked what it is, stopped with all it started.

The command runs without a shell, in its own process group (``procs.start_child``: it gets SIGTERM if
the sweep dies, even by SIGKILL). Stopping signals the whole group — an engine's own workers and children
(vLLM's API server, its engine core) go with it — then kills the group after ``STOP_GRACE_S``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from harness.capacity.sweep_spec import PORT, Hook, Serve
from harness.procs import Child, free_port, start_child

__all__ = ["STOP_GRACE_S", "ServerDown", "SweepServer", "run_hooks"]

STOP_GRACE_S = 30.0
"""How long a server may take to exit after SIGTERM before its whole group is killed."""
POLL_S = 0.5
LOG_TAIL_LINES = 5


class ServerDown(Exception):
    """The server could not serve a cell: it exited, or was not ready in time (the message says which)."""


def _get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    """GET ``url``: (status, body); (0, b"") when nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read(1 << 20)
    except urllib.error.HTTPError as exc:
        return exc.code, b""
    except (OSError, ValueError):
        return 0, b""


class SweepServer:
    """One launch of ``serve.cmd`` for one set of params; ``info`` is what the run store records."""

    def __init__(self, serve: Serve, params: dict[str, Any], log_path: str) -> None:
        values = {**params, PORT: free_port()} if f"{{{PORT}}}" in serve.cmd + serve.url else dict(params)
        self.serve, self.log_path = serve, log_path
        self.argv = serve.argv(values)
        self.url = serve.url.format(**values).rstrip("/")
        self.child: Child | None = None
        self.info: dict[str, Any] = {"cmd": self.argv, "url": self.url}

    def start(self, stop: threading.Event) -> None:
        """Start it and wait until ``serve.ready`` answers 2xx; ``ServerDown`` if it exits or times out first,
        or ``stop`` is set (an interrupt)."""
        try:
            self.child = start_child("server", self.argv, self.log_path, stdin=subprocess.DEVNULL)
        except OSError as exc:
            raise ServerDown(f"cannot start {self.argv[0]}: {exc.strerror or exc}") from None
        deadline = time.monotonic() + self.serve.timeout_s
        while True:
            code = self.child.poll()
            if code is not None:
                raise ServerDown(f"the server exited with code {code} before it was ready{self._tail()}")
            if _get(self.url + self.serve.ready, timeout=2.0)[0] // 100 == 2:
                break
            if stop.is_set():
                raise ServerDown("interrupted while waiting for the server")
            if time.monotonic() > deadline:
                raise ServerDown(f"the server was not ready at {self.serve.ready} within {self.serve.timeout_s:g} s"
                                 f"{self._tail()}")
            stop.wait(POLL_S)
        self.info.update(self._identity())

    def exited(self) -> str | None:
        """Why it is no longer serving, when its process has exited since it was ready; None while it runs."""
        code = self.child.poll() if self.child is not None else None
        return None if code is None else f"the server exited with code {code} during the sweep{self._tail()}"

    def _identity(self) -> dict[str, Any]:
        """What the server says it is: vLLM's ``/version``, the OpenAI ``/v1/models`` ids (None when it does not)."""
        out: dict[str, Any] = {"version": None, "models": None}
        status, body = _get(self.url + "/version")
        with contextlib.suppress(ValueError, AttributeError):
            if status == 200:
                out["version"] = json.loads(body).get("version")
        status, body = _get(self.url + "/v1/models")
        with contextlib.suppress(ValueError, AttributeError, TypeError):
            if status == 200:
                out["models"] = [m["id"] for m in json.loads(body)["data"]]
        return out

    def _tail(self) -> str:
        """The last lines of its log, for a message saying why it is not serving."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(0, os.path.getsize(self.log_path) - 4096))
                lines = f.read().decode("utf-8", "replace").strip().splitlines()[-LOG_TAIL_LINES:]
        except OSError:
            return ""
        return (f"; last lines of {self.log_path}:\n    " + "\n    ".join(lines)) if lines else ""

    def stop(self) -> None:
        """SIGTERM to its whole process group, SIGKILL to the group after ``STOP_GRACE_S``; always reaped."""
        child = self.child
        if child is None:
            return
        _signal_group(child, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(STOP_GRACE_S)
        _signal_group(child, signal.SIGKILL)  # what the leader left behind, or the leader itself
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(10)


def _signal_group(child: Child, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.proc.pid, sig)  # its own process group: its pid is the group's id


def run_hooks(hooks: tuple[Hook, ...], url: str | None, say: Callable[[str], None]) -> list[str]:
    """Run the ``between`` hooks in order; the problems (one line each), which the cell records and the console
    says. A failed hook does not stop the sweep: the next cell may then inherit state (a warm cache)."""
    problems = []
    for hook in hooks:
        if hook.post is not None:
            problems += _post(url, hook.post)
        elif hook.cmd is not None:
            problems += _command(hook.cmd)
    for p in problems:
        say(f"WARNING: {p}")
    return problems


def _post(url: str | None, path: str) -> list[str]:
    if url is None:
        return [f"POST {path}: no server URL (the built-in simulator restarts for each cell; nothing to reset)"]
    try:
        req = urllib.request.Request(url.rstrip("/") + path, data=b"", method="POST")
        with urllib.request.urlopen(req, timeout=30) as r:
            r.read(1 << 16)
    except urllib.error.HTTPError as exc:
        return [f"POST {path} answered {exc.code}: the cell runs without it"]
    except (OSError, ValueError) as exc:
        return [f"POST {path} failed ({exc}): the cell runs without it"]
    return []


def _command(cmd: str) -> list[str]:
    import shlex

    try:
        done = subprocess.run(shlex.split(cmd), capture_output=True, timeout=300, check=False)
    except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
        return [f"hook {cmd!r} failed: {exc}"]
    if done.returncode != 0:
        err = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
        return [f"hook {cmd!r} exited with {done.returncode}: {err[0][:200]}"]
    return []
