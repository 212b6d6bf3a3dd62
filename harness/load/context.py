"""The scenario one Locust process runs, named by its options and loaded once (``ScenarioSource``).

The process's role objects (``environment.kneecap``, a ``wiring.Kneecap``) hold it; they import this
module, never the other way round.
"""

from __future__ import annotations

import json
from typing import Any

from harness.scenario import Scenario, ScenarioError, default_scenario, load_scenario

__all__ = ["ScenarioSource"]


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
        return self.scenario.load.open_loop
