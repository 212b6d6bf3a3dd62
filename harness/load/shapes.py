"""The knee-seeking load shape (master side). Thin: the steps are ``load/control.py``'s, the plan, the judging
and the knee pure code in analysis/.

``KneecapShape`` follows the scenario's ``load`` section: each tick (~1 s) asks the master's step control for
the users to run now (it advances the step when the plan says the step has enough data, judges steps whose
data is complete, and stops once the knee is confirmed, on an error storm / abort_on_fail threshold, or after
the last level).
"""

from __future__ import annotations

import time

from locust import LoadTestShape

__all__ = ["KneecapShape"]


class KneecapShape(LoadTestShape):
    """Scenario-driven staircase / constant / open-loop plan. Use with ``kneecap run``, or
    ``-f locustfile.py,harness/load/shape_file.py``."""

    def tick(self) -> tuple[int, float] | None:
        step = self.runner.environment.kneecap.master.control.tick(time.perf_counter())
        return None if step is None else (step.users, step.spawn_rate)
