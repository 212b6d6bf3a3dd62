"""Every benchmark script imports: a rename in one (``client_accuracy._busy`` -> ``common.busy_jiffies``) left
``peers`` and ``worker_cost`` unable to start, and nothing ran them until a closing note needed their figures.

In a process of their own: a benchmark may set up its process at import (``fleet_merge`` sets
``LOCUST_SKIP_MONKEY_PATCH``), and a test process that inherited that hands it to every Locust worker it starts
later, which then never connects to its master."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

BENCHMARKS = sorted(p.stem for p in (pathlib.Path(__file__).parents[1] / "benchmarks").glob("*.py")
                    if p.stem not in ("__init__", "common"))  # common: their shared helpers
_CHECK = """
import importlib, sys
bad = [n for n in sys.argv[1:] if not callable(getattr(importlib.import_module("benchmarks." + n), "main", None))]
print(" ".join(bad))
"""


@pytest.mark.integration
def test_every_benchmark_imports_and_has_a_main():
    done = subprocess.run([sys.executable, "-c", _CHECK, *BENCHMARKS], capture_output=True, text=True, timeout=120,
                          cwd=pathlib.Path(__file__).parents[1])
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == [], f"no main() in benchmarks/{done.stdout.strip()}"
    assert len(BENCHMARKS) > 20
