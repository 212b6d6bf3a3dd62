"""What the benchmarks share: the git revision they ran at, CPU pinning of their processes, the machine's busy time,
stopping what they started, a nearest-rank quantile."""

from __future__ import annotations

import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def git_rev() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=False).stdout.strip()
    except OSError:
        return "unknown"


def pin(core: int) -> list[str]:
    """A ``taskset`` prefix that pins a command to ``core`` (nothing on a single-core machine)."""
    return ["taskset", "-c", str(core)] if (os.cpu_count() or 1) > 1 else []


def busy_jiffies() -> tuple[int, int]:
    """Busy and total jiffies of the whole machine (/proc/stat): two readings give the busy cores between them."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    return sum(v) - v[3] - v[4], sum(v)


def stop_procs(*procs: subprocess.Popen | None) -> None:
    """SIGTERM each that still runs (the simulator flushes its trace on it), SIGKILL after 10 s."""
    for proc in procs:
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def nearest_rank(xs: list[float], p: float) -> float | None:
    """The ``p`` quantile of sorted ``xs`` by nearest rank; None when empty."""
    return xs[min(len(xs) - 1, int(p * len(xs)))] if xs else None
