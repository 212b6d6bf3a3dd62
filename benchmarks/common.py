"""What the benchmarks share: the git revision they ran at, and CPU pinning of their processes."""

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
