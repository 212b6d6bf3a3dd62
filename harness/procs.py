"""The processes ``kneecap run`` starts, owned: they die with it, and their output goes to files, not to pipes.

- Each child gets its own process group in the caller's session (Ctrl-C reaches only ``kneecap run``, which
  stops them in order; stdin is /dev/null unless given, so no child waits on the terminal) and, on Linux, a
  parent-death signal (``prctl(PR_SET_PDEATHSIG, SIGTERM)``): when ``kneecap run`` is killed,
  even by SIGKILL, every child gets SIGTERM at once — the master ends the plan and writes its partial
  summary, the workers stop their users. No load goes on after the run's process is gone.
  Not a session of its own: with ``sched_autogroup`` (on in most distributions' kernels) every session is a
  scheduling group, and a worker alone in its group, on a machine a co-located engine saturates, waited ~5 s of
  every 10 s for a CPU while using 0.25 s (loop lag p99 275-420 ms beside vLLM; 2.3 ms in the caller's group:
  docs/real-engines.md).
- Output goes to ``NAME.log`` in the results folder. A pipe nobody reads fills up and blocks its writer
  (a worker logging one error per request froze that way); a file never does. ``LogRelay`` tails the
  files and shows their warnings and errors on the console as they happen, a few lines per process per
  10 s at most, each prefixed with the process's name.
- Each child is reaped with ``os.wait4`` (``Child.poll``/``wait``), which keeps its resource usage: the CPU
  seconds of every role of the run (``processes.json``, ``analysis/cost/client_cpu.py``).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Any

__all__ = ["MMAP_THRESHOLD", "Child", "LogRelay", "free_port", "large_blocks_mapped", "start_child", "stop_child"]

PR_SET_PDEATHSIG = 1
RELAY_LINES = 5
RELAY_WINDOW_S = 10.0
_IMPORTANT = ("WARNING", "ERROR", "CRITICAL", "Traceback", "Error:")


def _die_with(parent: int) -> Callable[[], None]:
    """``preexec_fn`` for a child: SIGTERM when ``parent`` dies (Linux), and exit if it died already."""

    def setup() -> None:
        if sys.platform.startswith("linux"):
            # without prctl the child would outlive a SIGKILLed parent; ``stop_child`` still covers the rest
            with contextlib.suppress(OSError, AttributeError):
                ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the parent died between fork and prctl
            os._exit(1)
        os.setpgid(0, 0)  # its own process group (signals, ``killpg``), in the caller's session (module docstring)

    return setup


class Child:
    """A started process, its name and its log file (None when its stdout is a pipe)."""

    def __init__(self, name: str, proc: subprocess.Popen, log: str | None) -> None:
        self.name, self.proc, self.log = name, proc, log
        self.rusage: resource.struct_rusage | None = None
        """Its resource usage (CPU seconds, peak RSS), once reaped by ``poll``/``wait``; None before, or when
        something else reaped it."""

    def poll(self) -> int | None:
        """The exit code once it ended (reaping it with ``os.wait4``, so its rusage is kept), else None."""
        if self.proc.returncode is None:
            try:
                pid, status, usage = os.wait4(self.proc.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere
                return self.proc.poll()
            if pid == 0:
                return None
            self.proc.returncode = os.waitstatus_to_exitcode(status)  # Popen must not wait for it again
            self.rusage = usage
        return self.proc.returncode

    def wait(self, timeout: float) -> int:
        """``poll`` until it ends; ``subprocess.TimeoutExpired`` after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while (code := self.poll()) is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.proc.args, timeout)
            time.sleep(0.02)
        return code


def free_port() -> int:
    """A loopback port free now, for a child to bind (a master, a sweep's server)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_child(name: str, cmd: list[str], log_path: str | None = None, **kw: Any) -> Child:
    """Start ``cmd`` in its own process group, tied to this process's life. With ``log_path``, what ``kw`` does not
    redirect (stdout, stderr) goes to that file; stdin is /dev/null unless ``kw`` says."""
    log: IO[bytes] | None = None
    if log_path is not None:
        log = open(log_path, "ab")  # noqa: SIM115 - the child holds it; ours is closed right after the fork
        kw.setdefault("stdout", log)
        kw.setdefault("stderr", subprocess.STDOUT if kw["stdout"] is log else log)
    kw.setdefault("stdin", subprocess.DEVNULL)
    try:
        proc = subprocess.Popen(cmd, preexec_fn=_die_with(os.getpid()), **kw)
    finally:
        if log is not None:
            log.close()
    return Child(name, proc, log_path)


def stop_child(child: Child | None, sig: int = signal.SIGTERM, wait: float = 15.0) -> None:
    """Ask the child to stop (``sig``), then kill it after ``wait`` seconds; always reaps it."""
    if child is None or child.poll() is not None:
        return
    child.proc.send_signal(sig)
    try:
        child.wait(wait)
    except subprocess.TimeoutExpired:
        child.proc.kill()
        child.wait(60)


class LogRelay:
    """Tails the children's log files in a thread; passes their warnings and errors to ``say``, rate-limited."""

    def __init__(self, children: list[Child], say: Callable[[str], None], every_s: float = 0.5) -> None:
        self.children = [c for c in children if c.log]
        self.say = say
        self.every_s = every_s
        self._offsets = {c.name: 0 for c in self.children}
        self._sent: dict[str, list[float]] = {c.name: [] for c in self.children}
        self._muted: dict[str, int] = {c.name: 0 for c in self.children}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kneecap-log-relay", daemon=True)

    def start(self) -> LogRelay:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Relay what is left, then stop the thread."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self.poll()
        for c in self.children:
            if self._muted[c.name]:
                self.say(f"{c.name}: {self._muted[c.name]} more warning/error lines in {c.log}")
                self._muted[c.name] = 0

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            self.poll()

    def poll(self) -> None:
        for c in self.children:
            for line in self._new_lines(c):
                if any(word in line for word in _IMPORTANT):
                    self._relay(c, line)

    def _new_lines(self, c: Child) -> list[str]:
        try:
            with open(c.log, "rb") as f:  # type: ignore[arg-type]  # children are those with a log (__init__)
                f.seek(self._offsets[c.name])
                data = f.read()
        except OSError:
            return []
        end = data.rfind(b"\n") + 1  # whole lines only; a partial last line waits for the next poll
        self._offsets[c.name] += end
        return data[:end].decode("utf-8", "replace").splitlines()

    def _relay(self, c: Child, line: str) -> None:
        now = time.monotonic()
        sent = self._sent[c.name] = [t for t in self._sent[c.name] if now - t < RELAY_WINDOW_S]
        if len(sent) >= RELAY_LINES:
            self._muted[c.name] += 1
            return
        if self._muted[c.name]:
            self.say(f"{c.name}: ({self._muted[c.name]} more lines in {c.log})")
            self._muted[c.name] = 0
        sent.append(now)
        self.say(f"{c.name}: {line.strip()[:300]}")


MMAP_THRESHOLD = 128 * 1024
"""From this size a master's allocation is a mapping of its own, returned when freed (``large_blocks_mapped``)."""


def large_blocks_mapped() -> None:
    """Keep this process's large allocations out of glibc's heap (a master's, ``load/master.py``). glibc maps a
    block past its threshold, and after such a block is freed raises the threshold to its size (up to 32 MB): from
    then on a master's short-lived numpy temporaries (sealing a block of rows: ~0.6 MB each, judging a step: several
    MB) come from the heap, the small long-lived allocations made between them pin its top, and the heap's free part
    grew at every sealed block (1.1 -> 2.5 MB in 24 minutes of a soak, ``benchmarks/soak.py``, ``heap_free_mb``). A
    fixed threshold (``mallopt``; it also stops the adjustment) maps them all. Nothing where the C library is not
    glibc."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").mallopt(-3, MMAP_THRESHOLD)  # M_MMAP_THRESHOLD
