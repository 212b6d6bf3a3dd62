"""The load generator's own health, measured on the worker: loop lag, garbage-collector pauses, CPU by step.

A loop-lag monitor measures how late a 20 ms sleep wakes up: the validity signal for the generator
(Locust's 90% CPU warning comes too late). 20 ms, not 100: the step's p99 must be a p99 of the loop's lag over
the step, not its maximum (a 3 s step held 30 samples at 100 ms, so one 12 ms scheduler hiccup unjudged it; at
20 ms it takes ~1% of the step's moments lagging, what a p99 means). 50 wake-ups a second cost 1–2% of a core
(0.25% at 100 ms; ``python -m benchmarks.lag_monitor_cost``, an otherwise idle process: 0.08%).
Each report also carries the process's CPU seconds by step (for the client's cost per streamed token), its
garbage-collector pauses, and by step how long its loop thread was runnable but not running (the kernel's
run-queue wait, ``/proc/thread-self/schedstat``): a lagging loop that waited longer than it ran was held off the
CPU by other processes, not slowed by its own work (docs/real-engines.md).

GC: at test start the worker collects once and freezes what it has (``gc.freeze``): the modules, Locust, the
scenario — ~53 k tracked objects that every full collection would otherwise walk, a 10-15 ms pause of every
stream at once (measured 2026-12-01; ~0 ms frozen). Streaming itself leaves little for the collector: the young
collections seen in runs stay under 1 ms (``generator.gc_pause_max_ms``; ``benchmarks/client_accuracy.py
--gc-freeze``).
"""

from __future__ import annotations

import gc
import time

import gevent

from harness.client.inflight import SO_TIMESTAMPNS
from harness.metrics.protocol import GeneratorSample
from harness.metrics.sketch import Sketch

__all__ = ["LAG_PERIOD_S", "GcPauses", "GeneratorMonitor"]

LAG_PERIOD_S = 0.02


def runqueue_wait_s() -> float | None:
    """Seconds the calling thread has waited on a run queue since it started (Linux's schedstat), or None."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


class GcPauses:
    """A ``gc.callbacks`` hook: the longest and total pause and the collections since the last ``take``."""

    def __init__(self) -> None:
        self._t0 = 0.0
        self.longest = self.total = 0.0
        self.collections = 0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
            return
        pause = time.perf_counter() - self._t0
        self.longest = max(self.longest, pause)
        self.total += pause
        self.collections += 1

    def take(self) -> tuple[float, float, int]:
        out = (self.longest, self.total, self.collections)
        self.longest = self.total = 0.0
        self.collections = 0
        return out


class GeneratorMonitor:
    """Usage: ``start()`` at test start; ``charge(step)`` when the step changes; ``sample(cpu_pct, step)`` at each
    report (everything since the last one); ``stop()`` at the end."""

    def __init__(self) -> None:
        self.lag = Sketch()
        self.last_lag_s: float | None = None
        """The latest sample: how late the loop is now (each request records it at its send)."""
        self.gc = GcPauses()
        self._frozen = False
        self._monitor: gevent.Greenlet | None = None
        self._cpu_mark = time.process_time()
        self._cpu_steps: dict[int, float] = {}
        """CPU seconds since the last report by the step they were spent in (charged at step changes)."""
        self._wait_mark = runqueue_wait_s()
        self._wait_steps: dict[int, float] = {}
        """Run-queue wait of the loop thread since the last report, by step (charged with the CPU)."""

    def start(self) -> None:
        if not self._frozen:  # once per process: what exists now lives until the end
            self._frozen = True
            gc.collect()
            gc.freeze()
            gc.callbacks.append(self.gc)
        self._cpu_mark, self._cpu_steps = time.process_time(), {}  # the cost counts from the test's start
        self._wait_mark, self._wait_steps = runqueue_wait_s(), {}
        self.gc.take()
        if self._monitor is None:
            self._monitor = gevent.spawn(self._lag_monitor)

    def stop(self) -> None:
        if self._monitor is not None:
            self._monitor.kill(block=False)
        if self.gc in gc.callbacks:
            gc.callbacks.remove(self.gc)

    def charge(self, step: int) -> None:
        """The CPU spent since the last charge goes to ``step``, the step the worker was in."""
        now = time.process_time()
        self._cpu_steps[step] = self._cpu_steps.get(step, 0.0) + now - self._cpu_mark
        self._cpu_mark = now
        wait = runqueue_wait_s()  # read on the loop's thread: charge() and sample() run there
        if wait is not None and self._wait_mark is not None:
            self._wait_steps[step] = self._wait_steps.get(step, 0.0) + wait - self._wait_mark
        self._wait_mark = wait

    def sample(self, cpu_pct: float, step: int) -> GeneratorSample:
        """Everything since the last sample; the monitor starts empty again."""
        self.charge(step)
        out = GeneratorSample(self.lag, cpu_pct, cpu_s=self._cpu_steps, gc=self.gc.take(),
                              kernel_stamps=SO_TIMESTAMPNS is not None, wait_s=self._wait_steps)
        self.lag, self._cpu_steps, self._wait_steps = Sketch(), {}, {}
        return out

    def _lag_monitor(self) -> None:
        while True:
            t = time.perf_counter()
            gevent.sleep(LAG_PERIOD_S)
            self.last_lag_s = lag = max(0.0, time.perf_counter() - t - LAG_PERIOD_S)
            self.lag.add(lag)
