"""A Locust fleet started by hand (a master, workers), as the fleet tests do without ``kneecap run``: the command
line, the staircase's shape file, and the exact quantile the merged numbers are checked against."""

from __future__ import annotations

import sys

from tests.kit.run import ROOT

__all__ = ["LOCUST", "SHAPE", "exact"]

LOCUST = [sys.executable, "-m", "locust", "-f", str(ROOT / "locustfile.py")]
"""``locust -f locustfile.py``; a master with a shape appends it to the last item (``-f a.py,shape.py``)."""
SHAPE = str(ROOT / "harness" / "load" / "shape_file.py")


def exact(values: list[float], q: float) -> float:
    v = sorted(values)
    return v[int(q * (len(v) - 1))]
