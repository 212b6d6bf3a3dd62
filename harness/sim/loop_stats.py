"""The simulator measuring itself (``GET /sim/stats``): how late its engine loops deliver against their schedule,
the share of wall time the schedule was busy, and CPU per token sent, since start or the last reset. No I/O: the
server passes each iteration in; the clocks read are the process's own (``time.monotonic``, ``process_time``).

With several served models each engine runs its own loop; lateness, iterations, busy time and tokens are summed
over them (so ``busy_s`` may exceed ``wall_s``), ``running`` and ``waiting`` too, and ``models`` has each model's
own ``running`` and ``waiting``.
"""

from __future__ import annotations

import time
from collections import deque

from harness.sim.engine import Engine

__all__ = ["LoopStats"]


class LoopStats:
    """Counters since ``reset()``; ``snapshot(engines)`` is the ``/sim/stats`` body."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.reset()

    def reset(self) -> None:
        self.lateness: deque[float] = deque(maxlen=100_000)
        self.iterations = 0
        self.tokens_sent = 0
        self.busy_s = 0.0
        self._since = time.monotonic()
        self._cpu0 = time.process_time()

    def iteration(self, late_s: float, duration_s: float) -> None:
        """One engine iteration delivered ``late_s`` after its planned end; it was planned to last ``duration_s``."""
        self.lateness.append(late_s)
        self.iterations += 1
        self.busy_s += duration_s

    def snapshot(self, engines: dict[str, Engine]) -> dict:
        late = sorted(self.lateness)

        def q(p: float) -> float:
            return round(late[min(len(late) - 1, int(p * len(late)))] * 1000, 3) if late else 0.0

        cpu = time.process_time() - self._cpu0
        wall = time.monotonic() - self._since
        return {"iterations": self.iterations, "tokens_sent": self.tokens_sent, "wall_s": round(wall, 3),
                "busy_s": round(self.busy_s, 3), "tokens_per_s": round(self.tokens_sent / wall, 1) if wall else 0.0,
                "uptime_s": round(time.monotonic() - self.started, 3), "cpu_s": round(cpu, 3),
                "cpu_us_per_token": round(cpu / self.tokens_sent * 1e6, 2) if self.tokens_sent else None,
                "lateness_ms": {"p50": q(0.5), "p99": q(0.99), "max": q(1.0) if late else 0.0, "count": len(late)},
                "running": sum(len(e.running) for e in engines.values()),
                "waiting": sum(len(e.waiting) for e in engines.values()),
                "models": {name: {"running": len(e.running), "waiting": len(e.waiting)} for name, e in engines.items()}}
