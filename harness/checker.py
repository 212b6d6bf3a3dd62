"""Strict, friendly validation of YAML-shaped data: every problem at once, each with its key path.

Used by ``scenario.py`` and the workload spec. A problem reads
``workload.input_tokens.sigma: must be >= 0, got -1``; unknown keys suggest the nearest known one.
``decode_text`` turns the bytes of any file kneecap reads (scenario, trace, log, summary) into text, or
into a message naming the first bad byte and its offset, never a ``UnicodeDecodeError`` traceback.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["MISSING", "Checker", "decode_text", "did_you_mean", "json_lines"]

MISSING: Any = object()
"""Default meaning "required"."""

_NAME = re.compile(r"^[0-9A-Za-z_-]+$")


def _kind(value: object) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "empty"}.get(type(value), type(value).__name__)


def _limit(value: float) -> str:
    """A bound as people write it: 1,000,000 rather than 1e+06."""
    return f"{int(value):,}" if float(value).is_integer() and abs(value) < 1e15 else f"{value:g}"


def decode_text(data: bytes) -> str:
    """``data`` as UTF-8 text without its BOM; a ValueError says where it is not text (the caller adds the name).

    The message reads "not UTF-8 text (byte 0xff at offset 12, line 2): ..." so that, prefixed with
    "FILE is ", it names the file, the first bad byte, where it is, and what to do.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ValueError(f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}, line {line}): "
                         "a binary file, or text in another encoding? Save it as UTF-8") from None
    if "\0" in text:  # decodes as UTF-8, but no text file has NUL bytes: a binary (or UTF-16) file
        at = text.index("\0")
        raise ValueError(f"not text (a NUL byte at offset {len(text[:at].encode())}): a binary file, or UTF-16? "
                         "Save it as UTF-8") from None
    return text.removeprefix("\ufeff")  # a BOM (Excel's CSV export) would glue onto the first column name


def json_lines(path: str, problem: Callable[[Any], str | None]) -> list[Any]:
    """The objects of a JSON-lines file (blank lines skipped) that ``problem`` finds nothing wrong with; a ValueError
    names every line that is not JSON or has a problem (the first ten: "line 3: ..."; "and N more"), or the file
    that is not text (``decode_text``)."""
    with open(path, "rb") as f:
        text = decode_text(f.read())
    out, bad = [], []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as exc:
            bad.append(f"line {n}: not JSON ({exc})")
            continue
        wrong = problem(obj)
        if wrong:
            bad.append(f"line {n}: {wrong}")
        else:
            out.append(obj)
    if bad:
        raise ValueError("; ".join(bad[:10]) + (f" (and {len(bad) - 10} more)" if len(bad) > 10 else ""))
    return out


def did_you_mean(key: str, known: Iterable[str]) -> str:
    """"; did you mean 'max_tokens'?" for the known key nearest ``key`` (difflib, as click does), or ""."""
    close = difflib.get_close_matches(key, list(known), n=1)
    return f"; did you mean '{close[0]}'?" if close else ""


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
                hint = did_you_mean(str(key), allowed) or f"; known keys: {', '.join(allowed)}"
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
               minimum: float | None = None, maximum: float | None = None, above: float | None = None,
               limit: str = "") -> Any:
        """A number (an integer when ``integer``) within the bounds; ``default`` when absent.

        The bounds are checked before the integer type, so ``1e20`` for a count says it is far too big,
        not that it is a float. ``limit`` says why ``maximum`` is the maximum and what to do instead.
        """
        where = f"{path}.{key}" if path else key
        if key not in node:
            return self._absent(key, path, default)
        value = node[key]
        expected = "an integer" if integer else "a number"
        if isinstance(value, str):  # YAML 1.1 reads 1e20 (an exponent without a dot) and quoted numbers as text
            try:
                as_number = float(value)
            except ValueError:
                as_number = None
            if as_number is not None and maximum is not None and as_number > maximum:
                self.fail(where, f"must be <= {_limit(maximum)}, got {value}{f' ({limit})' if limit else ''}")
            elif as_number is not None:
                self.fail(where, f"expected {expected}, got the string {value!r} (YAML reads quoted numbers and "
                                 "exponents without a dot, such as 1e3, as text): write 1000 or 1.0e+3")
            else:
                self.fail(where, f"expected {expected}, got {_kind(value)} {value!r}")
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.fail(where, f"expected {expected}, got {_kind(value)} {value!r}")
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
            self.fail(where, f"must be <= {_limit(maximum)}, got {value!r}{f' ({limit})' if limit else ''}")
            return None
        if integer and not isinstance(value, int):
            self.fail(where, f"expected an integer, got {_kind(value)} {value!r}")
            return None
        return value

    def string(self, node: dict, key: str, path: str, default: Any = MISSING, *,
               choices: Iterable[str] | None = None, name: bool = False) -> Any:
        where = f"{path}.{key}" if path else key
        if key not in node:
            return self._absent(key, path, default)
        value = node[key]
        if isinstance(value, bool) and choices is not None and {"on", "off"} <= set(choices := list(choices)):
            value = "on" if value else "off"  # YAML 1.1 reads a bare on/off as a boolean
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

    def file(self, node: dict, key: str, path: str, folder: bool = False) -> str | None:
        """A path relative to the scenario file's folder that must exist and be readable (``folder``: or be a
        folder)."""
        value = self.string(node, key, path)
        if value is None:
            return None
        full = value if os.path.isabs(value) else os.path.join(self.base_dir, value)
        if not (os.path.isfile(full) or (folder and os.path.isdir(full))):
            self.fail(f"{path}.{key}", f"file not found: {value} (looked in {os.path.abspath(full)})")
            return None
        if not os.access(full, os.R_OK):
            self.fail(f"{path}.{key}", f"cannot read {value}: permission denied (check its mode and owner)")
            return None
        return full
