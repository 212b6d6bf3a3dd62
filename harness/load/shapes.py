"""The knee-seeking load shape (master side). Thin: the plan, the judging and the knee are pure code in analysis/.

``KneecapShape`` follows the scenario's ``load`` section. Each tick (~1 s) it advances the step when
the plan says the step has enough data, judges steps whose data is complete, and stops once the knee
is confirmed (or on an error storm / abort_on_fail threshold, or after the last level).
"""

from __future__ import annotations

from locust import LoadTestShape

__all__ = ["KneecapShape"]


class KneecapShape(LoadTestShape):
    """Scenario-driven staircase / constant plan. Use with ``kneecap run``, or ``-f locustfile.py,shape.py``."""

    def tick(self) -> tuple[int, float] | None:
        k = self.runner.environment.kneecap
        step = k.shape_tick()
        return None if step is None else (step.users, step.spawn_rate)
