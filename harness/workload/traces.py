"""Reading production logs (CSV or JSONL) of per-request token counts. Errors name file, line and column.

A log is read whole and decoded once (``decode_text``): a binary or non-UTF-8 file is a ``TraceError``
naming the file and the first bad byte, never a ``UnicodeDecodeError`` halfway through.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone

from harness.checker import decode_text

__all__ = ["INPUT_NAMES", "MAX_TOKENS", "OUTPUT_NAMES", "TraceError", "guess_columns", "read_columns", "read_header",
           "read_timestamps"]

# Common spellings, most specific first: OpenAI usage, vLLM/Azure traces, generic.
INPUT_NAMES = ("prompt_tokens", "ContextTokens", "input_tokens", "input_length", "prompt_len", "num_prompt_tokens",
               "input_len", "context_tokens", "request_tokens")
OUTPUT_NAMES = ("completion_tokens", "GeneratedTokens", "output_tokens", "output_length", "output_len",
                "num_output_tokens", "generated_tokens", "response_tokens")


MAX_TOKENS = 1e9
"""The largest token count a log's cell may hold: no request has a billion tokens, so a larger one is a corrupt cell
(and 1e308 tokens overflowed the fit's moments into a traceback)."""


class TraceError(ValueError):
    """A log that cannot be read as asked; the message says what and where."""


def _is_jsonl(path: str) -> bool:
    return path.lower().endswith((".jsonl", ".ndjson", ".json"))


def _text(path: str) -> str:
    if not os.path.isfile(path):
        raise TraceError(f"{path}: file not found")
    try:
        with open(path, "rb") as f:
            return decode_text(f.read())
    except OSError as exc:
        raise TraceError(f"{path}: cannot read the file: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise TraceError(f"{path} is {exc}") from None


def _header(path: str, text: str) -> list[str]:
    if _is_jsonl(path):
        return list(next(_rows(path, text), (0, {}))[1])
    try:
        return next(csv.reader(io.StringIO(text, newline="")), [])
    except csv.Error as exc:
        raise TraceError(f"{path}:1: not a valid CSV header ({exc})") from None


def read_header(path: str) -> list[str]:
    """Column names: the CSV header, or the keys of the first JSONL object."""
    return _header(path, _text(path))


def guess_columns(header: Sequence[str]) -> tuple[str | None, str | None]:
    """The input and output token columns among ``header`` by common names (case-insensitive)."""
    lower = {h.lower(): h for h in header}

    def pick(names: Sequence[str]) -> str | None:
        return next((lower[n.lower()] for n in names if n.lower() in lower), None)

    return pick(INPUT_NAMES), pick(OUTPUT_NAMES)


def _rows(path: str, text: str, json_lines: bool | None = None) -> Iterator[tuple[int, dict]]:
    """(line, row) of a CSV or JSON-lines log; ``json_lines`` None: decided by the file name."""
    if _is_jsonl(path) if json_lines is None else json_lines:
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    row = json.loads(line)
                except ValueError as exc:
                    raise TraceError(f"{path}:{n}: invalid JSON ({exc})") from None
                except RecursionError:  # json recurses per level: a line of thousands of [ or {
                    raise TraceError(f"{path}:{n}: invalid JSON (nested too deep to be a log's row)") from None
                if not isinstance(row, dict):
                    raise TraceError(f"{path}:{n}: expected a JSON object, got {type(row).__name__}")
                yield n, row
        return
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        for row in reader:
            yield reader.line_num, row
    except csv.Error as exc:  # e.g. a field over csv's 128 KiB limit: a binary file, or one long unquoted blob
        raise TraceError(f"{path}:{reader.reader.line_num}: not valid CSV ({exc})") from None  # DictReader's lags


def read_columns(path: str, columns: Sequence[str]) -> dict[str, list[int]]:
    """Integer token counts of ``columns``, one entry per row; every row must have every column."""
    text = _text(path)
    header = _header(path, text)
    missing = [c for c in columns if c not in header]
    if missing:
        raise TraceError(f"{path}: no column {', '.join(repr(c) for c in missing)}; "
                         f"columns are {', '.join(header) or '(none)'}")
    out: dict[str, list[int]] = {c: [] for c in columns}
    for n, row in _rows(path, text):
        for c in columns:
            value = row.get(c)
            try:
                number = float(value)  # type: ignore[arg-type]  # a non-number raises TypeError, caught below
            except (TypeError, ValueError, OverflowError):  # OverflowError: a JSON integer of 400 digits
                raise TraceError(f"{path}:{n}: column {c!r} is {value!r}, expected a token count") from None
            if not 0 <= number <= MAX_TOKENS:  # NaN fails too
                raise TraceError(f"{path}:{n}: column {c!r} is {value!r}, expected a count >= 0 and <= "
                                 f"{MAX_TOKENS:.0e}")
            out[c].append(round(number))
    if not out[columns[0]]:
        raise TraceError(f"{path}: no rows")
    return out


_ISO = re.compile(r"(\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?)?)(?:[.,](\d+))?(Z|[+-]\d{2}:?\d{2})?",
                  re.IGNORECASE)


def _seconds(value: object) -> float:
    """A timestamp as seconds: a number, or an ISO date-time with any number of fractional digits."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    text = str(value).strip()
    try:
        return float(text)
    except ValueError:
        pass
    # The fraction and the UTC offset apart (fromisoformat before 3.11 takes neither 7+ digits nor "Z");
    # a time without an offset is UTC.
    m = _ISO.fullmatch(text)
    if m is None:
        raise ValueError(f"not a timestamp: {text!r}")
    head, frac, tz = m.groups()
    stamp = datetime.fromisoformat(head.replace(" ", "T")).replace(tzinfo=timezone.utc).timestamp()
    if tz and tz.upper() != "Z":
        digits = tz[1:].replace(":", "")
        stamp -= (1 if tz[0] == "+" else -1) * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
    return stamp + (float(f"0.{frac}") if frac else 0.0)  # int(frac) refuses 4,300 digits and more


def read_timestamps(path: str, column: str) -> list[float]:
    """Arrival times (seconds) of a log's ``column``: numbers or ISO date-times such as 2023-11-16 18:17:03.97996."""
    text = _text(path)
    header = _header(path, text)
    if column not in header:
        raise TraceError(f"{path}: no column {column!r}; columns are {', '.join(header) or '(none)'}")
    out = []
    for n, row in _rows(path, text):
        try:
            out.append(_seconds(row.get(column)))
        except (TypeError, ValueError, OverflowError):
            raise TraceError(f"{path}:{n}: column {column!r} is {row.get(column)!r}, expected a timestamp") from None
    if len(out) < 2:
        raise TraceError(f"{path}: need at least two timestamps")
    return out
