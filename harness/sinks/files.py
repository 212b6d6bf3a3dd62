"""Result files: atomic JSON and text (no half-written summary after a crash or Ctrl-C) and JSON lines."""

from __future__ import annotations

import json
import os
import tempfile
from typing import IO, Any

from msgspec import Struct, to_builtins

__all__ = ["ANSWERS", "CHECKPOINT", "JsonLinesWriter", "write_json_atomic", "write_text_atomic"]

ANSWERS = "answers.jsonl"
"""``verify:``'s reference answers, one ``verify.file`` line each: a later run's ``verify: {file: ...}``."""

CHECKPOINT = "checkpoint.json"
"""The master's summary as it stands, rewritten during the run, removed once ``summary.json`` is written."""


def _plain(obj: object) -> object:
    """What JSON cannot say by itself: a summary block (a msgspec Struct) as its fields, anything else as text."""
    return to_builtins(obj) if isinstance(obj, Struct) else str(obj)


def write_json_atomic(path: str, obj: Any) -> None:
    """Write to a temporary file in the same folder, fsync, then rename over ``path``."""
    write_text_atomic(path, json.dumps(obj, indent=1, allow_nan=False, default=_plain) + "\n", ".json")


def write_text_atomic(path: str, text: str, suffix: str = "") -> None:
    """``write_json_atomic`` for text."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=suffix, dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes it private; results are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


class JsonLinesWriter:
    """Appends one JSON object per line; flushed per batch by the caller's rhythm (``write`` is buffered)."""

    def __init__(self, path: str) -> None:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self.path = path
        self._f: IO[str] | None = open(path, "w", encoding="utf-8")  # noqa: SIM115 - closed by close()
        self.count = 0

    def write(self, obj: dict) -> None:
        if self._f is not None:
            self._f.write(json.dumps(obj, default=_plain) + "\n")
            self.count += 1

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None
