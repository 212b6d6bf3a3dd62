"""What one Locust process holds of kneecap: the scenario it runs and its role objects.

``environment.kneecap`` is a ``Kneecap``: a worker process has a ``worker`` side, a master a
``master`` side, and a local (single-process) run both, joined directly instead of through messages
(``load/wiring.py``). Users use only the worker side; the shape and the web UI only the master side.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.scenario import Scenario, ScenarioError, default_scenario, load_scenario

if TYPE_CHECKING:
    from harness.load.master import MasterSide
    from harness.load.worker import WorkerSide

__all__ = ["Kneecap", "ScenarioSource"]


class ScenarioSource:
    """The scenario named by the Locust options (``--scenario``, ``--overrides``), loaded once.

    Workers get the master's options with the first spawn message, so they ``reload()`` at test start."""

    def __init__(self, environment: Any) -> None:
        self.env = environment
        self._scenario: Scenario | None = None

    @property
    def options(self) -> Any:
        return self.env.parsed_options

    def option(self, name: str, default: Any = "") -> Any:
        return getattr(self.options, name, default) if self.options is not None else default

    @property
    def scenario(self) -> Scenario:
        if self._scenario is None:
            path, raw = self.option("scenario"), self.option("overrides")
            try:
                overrides = json.loads(raw) if raw else {}
            except ValueError as exc:
                raise ScenarioError("--overrides", [f"not a JSON object: {exc}"]) from None
            if not isinstance(overrides, dict):
                raise ScenarioError("--overrides", ["expected a JSON object of dotted keys"])
            self._scenario = load_scenario(path, overrides) if path else default_scenario(overrides)
        return self._scenario

    def reload(self) -> None:
        self._scenario = None

    @property
    def open_loop(self) -> bool:
        return self.scenario.load.mode == "open_staircase"


@dataclass
class Kneecap:
    """``environment.kneecap``: this process's scenario and role objects (see the module docstring)."""

    source: ScenarioSource
    worker: WorkerSide | None = None
    master: MasterSide | None = None
