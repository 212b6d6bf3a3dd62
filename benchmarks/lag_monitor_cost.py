"""What the worker's loop-lag monitor costs: CPU share of an otherwise idle gevent process, per sampling period.

    python -m benchmarks.lag_monitor_cost [--seconds 10]

Runs the monitor's loop (``harness/load/generator.py``: sleep, measure the overshoot, add it to a sketch) alone for
each period and prints one JSON line each: the process's CPU as a share of one core, against the same process
idle for the same time (the reference measured in the same run), and the samples a 3 s step would hold.
"""

from __future__ import annotations

import argparse
import json
import time

import gevent

from harness.metrics.sketch import Sketch


def _monitor(period: float, sketch: Sketch) -> None:
    while True:
        t = time.perf_counter()
        gevent.sleep(period)
        sketch.add(max(0.0, time.perf_counter() - t - period))


def _cpu_share(period: float | None, seconds: float) -> float:
    sketch = Sketch()
    g = gevent.spawn(_monitor, period, sketch) if period else None
    c0, w0 = time.process_time(), time.perf_counter()
    gevent.sleep(seconds)
    share = (time.process_time() - c0) / (time.perf_counter() - w0)
    if g is not None:
        g.kill()
    return share


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    args = ap.parse_args()
    idle = _cpu_share(None, args.seconds)
    for period in (0.1, 0.05, 0.02):
        share = _cpu_share(period, args.seconds)
        print(json.dumps({"name": "lag_monitor_cost", "period_s": period, "cpu_pct_of_a_core": round(100 * share, 3),
                          "idle_pct": round(100 * idle, 3), "samples_in_3s_step": round(3 / period)}))


if __name__ == "__main__":
    main()
