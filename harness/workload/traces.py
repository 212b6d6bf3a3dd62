"""Reading production logs (CSV or JSONL) of per-request token counts. Errors name file, line and column."""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone

__all__ = ["INPUT_NAMES", "OUTPUT_NAMES", "TraceError", "guess_columns", "read_columns", "read_header",
           "read_timestamps"]

# Common spellings, most specific first: OpenAI usage, vLLM/Azure traces, generic.
INPUT_NAMES = ("prompt_tokens", "ContextTokens", "input_tokens", "input_length", "prompt_len", "num_prompt_tokens",
               "input_len", "context_tokens", "request_tokens")
OUTPUT_NAMES = ("completion_tokens", "GeneratedTokens", "output_tokens", "output_length", "output_len",
                "num_output_tokens", "generated_tokens", "response_tokens")


class TraceError(ValueError):
    """A log that cannot be read as asked; the message says what and where."""


def _is_jsonl(path: str) -> bool:
    return path.lower().endswith((".jsonl", ".ndjson", ".json"))


def read_header(path: str) -> list[str]:
    """Column names: the CSV header, or the keys of the first JSONL object."""
    if not os.path.isfile(path):
        raise TraceError(f"{path}: file not found")
    if _is_jsonl(path):
        return list(next(_rows(path), (0, {}))[1])
    with open(path, newline="", encoding="utf-8") as f:
        return next(csv.reader(f), [])


def guess_columns(header: Sequence[str]) -> tuple[str | None, str | None]:
    """The input and output token columns among ``header`` by common names (case-insensitive)."""
    lower = {h.lower(): h for h in header}

    def pick(names: Sequence[str]) -> str | None:
        return next((lower[n.lower()] for n in names if n.lower() in lower), None)

    return pick(INPUT_NAMES), pick(OUTPUT_NAMES)


def _rows(path: str) -> Iterator[tuple[int, dict]]:
    with open(path, newline="", encoding="utf-8") as f:
        if _is_jsonl(path):
            for n, line in enumerate(f, 1):
                if line.strip():
                    try:
                        row = json.loads(line)
                    except ValueError as exc:
                        raise TraceError(f"{path}:{n}: invalid JSON ({exc})") from None
                    if not isinstance(row, dict):
                        raise TraceError(f"{path}:{n}: expected a JSON object, got {type(row).__name__}")
                    yield n, row
        else:
            yield from enumerate(csv.DictReader(f), 2)


def read_columns(path: str, columns: Sequence[str]) -> dict[str, list[int]]:
    """Integer token counts of ``columns``, one entry per row; every row must have every column."""
    header = read_header(path)
    missing = [c for c in columns if c not in header]
    if missing:
        raise TraceError(f"{path}: no column {', '.join(repr(c) for c in missing)}; "
                         f"columns are {', '.join(header) or '(none)'}")
    out: dict[str, list[int]] = {c: [] for c in columns}
    for n, row in _rows(path):
        for c in columns:
            value = row.get(c)
            try:
                number = float(value)  # type: ignore[arg-type]
            except (TypeError, ValueError):
                raise TraceError(f"{path}:{n}: column {c!r} is {value!r}, expected a token count") from None
            if number < 0 or number != number or number == float("inf"):
                raise TraceError(f"{path}:{n}: column {c!r} is {value!r}, expected a count >= 0")
            out[c].append(round(number))
    if not out[columns[0]]:
        raise TraceError(f"{path}: no rows")
    return out


def _seconds(value: object) -> float:
    """A timestamp as seconds: a number, or an ISO date-time with any number of fractional digits."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    text = str(value).strip()
    try:
        return float(text)
    except ValueError:
        pass
    head, _, frac = text.partition(".")
    stamp = datetime.fromisoformat(head.replace("Z", "")).replace(tzinfo=timezone.utc).timestamp()
    digits = "".join(ch for ch in frac if ch.isdigit())
    return stamp + (int(digits) / 10 ** len(digits) if digits else 0.0)


def read_timestamps(path: str, column: str) -> list[float]:
    """Arrival times (seconds) of a log's ``column``: numbers or ISO date-times such as 2023-11-16 18:17:03.97996."""
    header = read_header(path)
    if column not in header:
        raise TraceError(f"{path}: no column {column!r}; columns are {', '.join(header) or '(none)'}")
    out = []
    for n, row in _rows(path):
        try:
            out.append(_seconds(row.get(column)))
        except (TypeError, ValueError):
            raise TraceError(f"{path}:{n}: column {column!r} is {row.get(column)!r}, expected a timestamp") from None
    if len(out) < 2:
        raise TraceError(f"{path}: need at least two timestamps")
    return out
