"""Every benchmark script imports: a rename in one (``client_accuracy._busy`` -> ``common.busy_jiffies``) left
``peers`` and ``worker_cost`` unable to start, and nothing ran them until a closing note needed their figures."""

from __future__ import annotations

import importlib
import pathlib

import pytest

BENCHMARKS = sorted(p.stem for p in (pathlib.Path(__file__).parents[1] / "benchmarks").glob("*.py")
                    if p.stem not in ("__init__", "common"))  # common: their shared helpers


@pytest.mark.parametrize("name", BENCHMARKS)
def test_benchmark_imports(name):
    module = importlib.import_module(f"benchmarks.{name}")
    assert callable(getattr(module, "main", None)), f"benchmarks/{name}.py has no main()"
