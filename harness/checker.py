"""Strict, friendly validation of YAML-shaped data: every problem at once, each with its key path.

Used by ``scenario.py`` and the workload spec. A problem reads
``workload.input_tokens.sigma: must be >= 0, got -1``; unknown keys suggest the nearest known one.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterable
from typing import Any

__all__ = ["MISSING", "Checker"]

MISSING: Any = object()
"""Default meaning "required"."""

_NAME = re.compile(r"^[0-9A-Za-z_-]+$")


def _kind(value: object) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "empty"}.get(type(value), type(value).__name__)


class Checker:
    """Collects problems while reading; the caller raises one error listing them all."""

    def __init__(self, base_dir: str = ".") -> None:
        self.base_dir = base_dir
        self.problems: list[str] = []

    def fail(self, path: str, message: str) -> None:
        self.problems.append(f"{path or '(top level)'}: {message}")

    def mapping(self, node: object, path: str, allowed: Iterable[str], required: Iterable[str] = ()) -> dict | None:
        """``node`` as a dict whose keys are all ``allowed`` and include ``required``; None if not a mapping."""
        if not isinstance(node, dict):
            self.fail(path, f"expected a mapping, got {_kind(node)}")
            return None
        allowed = list(allowed)
        for key in node:
            if key not in allowed:
                close = difflib.get_close_matches(str(key), allowed, n=1)
                hint = f"; did you mean '{close[0]}'?" if close else f"; known keys: {', '.join(allowed)}"
                self.fail(path, f"unknown key '{key}'{hint}")
        for key in required:
            if key not in node:
                self.fail(path, f"missing required key '{key}'")
        return node

    def _absent(self, key: str, path: str, default: Any) -> Any:
        if default is MISSING:
            self.fail(path, f"missing required key '{key}'")
            return None
        return default

    def number(self, node: dict, key: str, path: str, default: Any = MISSING, *, integer: bool = False,
               minimum: float | None = None, maximum: float | None = None, above: float | None = None) -> Any:
        """A number (an integer when ``integer``) within the bounds; ``default`` when absent."""
        where = f"{path}.{key}" if path else key
        if key not in node:
            return self._absent(key, path, default)
        value = node[key]
        ok = isinstance(value, int) if integer else isinstance(value, (int, float))
        if isinstance(value, bool) or not ok:
            self.fail(where, f"expected {'an integer' if integer else 'a number'}, got {_kind(value)} {value!r}")
            return None
        if value != value or value in (float("inf"), float("-inf")):
            self.fail(where, f"expected a finite number, got {value!r}")
            return None
        if minimum is not None and value < minimum:
            self.fail(where, f"must be >= {minimum:g}, got {value!r}")
            return None
        if above is not None and value <= above:
            self.fail(where, f"must be > {above:g}, got {value!r}")
            return None
        if maximum is not None and value > maximum:
            self.fail(where, f"must be <= {maximum:g}, got {value!r}")
            return None
        return value

    def string(self, node: dict, key: str, path: str, default: Any = MISSING, *,
               choices: Iterable[str] | None = None, name: bool = False) -> Any:
        where = f"{path}.{key}" if path else key
        if key not in node:
            return self._absent(key, path, default)
        value = node[key]
        if not isinstance(value, str) or not value:
            self.fail(where, f"expected a non-empty string, got {_kind(value)} {value!r}")
            return None
        if choices is not None and value not in (choices := list(choices)):
            self.fail(where, f"must be one of {', '.join(choices)}; got '{value}'")
            return None
        if name and not _NAME.match(value):
            self.fail(where, f"names use letters, digits, '_' and '-' only; got '{value}'")
            return None
        return value

    def boolean(self, node: dict, key: str, path: str, default: bool) -> bool:
        value = node.get(key, default)
        if not isinstance(value, bool):
            self.fail(f"{path}.{key}" if path else key, f"expected true or false, got {_kind(value)} {value!r}")
            return default
        return value

    def file(self, node: dict, key: str, path: str) -> str | None:
        """A path relative to the scenario file's folder that must exist."""
        value = self.string(node, key, path)
        if value is None:
            return None
        full = value if os.path.isabs(value) else os.path.join(self.base_dir, value)
        if not os.path.isfile(full):
            self.fail(f"{path}.{key}", f"file not found: {value} (looked in {os.path.abspath(full)})")
            return None
        return full
