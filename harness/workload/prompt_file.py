"""Where prompt text comes from (``workload.prompts``): a built-in corpus, or a user's file of real prompts. Pure.

::

    prompts: {corpus: prose}                            # the default: public-domain prose (corpus.py)
    prompts: {corpus: words}                            # common one-token English words (kneecap's first corpus)
    prompts: {file: data.jsonl, field: prompt}          # JSON lines, one prompt a line in a string field
    prompts: {file: sharegpt.json, format: sharegpt}    # ShareGPT: each conversation's first human turn

A file's path is relative to the scenario file; it is read when the scenario is (every process reads it: a fleet
needs it on every host, as the scenario). Every problem of a file is found in one pass and reported together, each
with where it is: ``data.jsonl: not JSON on line 3 (...); field 'prompt' missing in 2 rows (lines 4, 9)`` — as a
``TraceError`` (``traces.py``), which the scenario reports at the key path ``workload.prompts.file`` (exit 2).

ShareGPT files as published hold conversations without a human turn (empty ones, or one the assistant opens): they
are skipped and counted (``PromptFile.skipped``), not refused; a file with no usable conversation is. A prompt is
taken as written (stripped of surrounding whitespace); an empty one is a problem in a JSON-lines file and skipped in
a ShareGPT one.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

from harness.checker import Checker
from harness.workload.corpus import CORPORA, Corpus, builtin
from harness.workload.traces import TraceError, _text

__all__ = ["FORMATS", "HUMAN", "PromptFile", "PromptSource", "listed", "prompts_from_spec", "read_prompts",
           "sharegpt_conversations"]

FORMATS = ("jsonl", "sharegpt")
HUMAN = ("human", "user")
"""ShareGPT's name for the user's turns (``from``), and the name some exports use instead."""
_SHOWN = 5
"""Lines (or items) named per kind of problem; the rest are counted."""


@dataclass(frozen=True)
class PromptFile:
    texts: tuple[str, ...]
    skipped: int = 0
    """ShareGPT conversations without a usable first human turn."""


@dataclass(frozen=True)
class PromptSource:
    """``workload.prompts`` parsed: a built-in ``corpus``, or the prompts of ``file`` (then ``texts`` holds them)."""

    corpus: str = "prose"
    file: str | None = None
    """The file as the scenario names it (None: the built-in corpus)."""
    texts: tuple[str, ...] = ()

    def text(self, seed: int) -> tuple[Corpus, tuple[int, ...]]:
        """The corpus prompts are cut from, and (a file) the index of each prompt's first word in it: the file's
        prompts one after another, so padding a prompt continues into the next ones."""
        return (builtin(self.corpus, seed), ()) if self.file is None else _joined(self.texts)


@functools.lru_cache(maxsize=4)
def _joined(texts: tuple[str, ...]) -> tuple[Corpus, tuple[int, ...]]:
    corpus = Corpus("\n\n".join(texts))  # texts are stripped and not empty: each starts a word
    firsts, pos = [], 0
    for t in texts:
        firsts.append(corpus.word_at(pos))
        pos += len(t) + 2
    return corpus, tuple(firsts)


def listed(items: list[int]) -> str:
    shown = ", ".join(str(n) for n in items[:_SHOWN])
    return shown + (f" and {len(items) - _SHOWN} more" if len(items) > _SHOWN else "")


def _rows(n: int) -> str:
    return f"{n} row{'s' if n != 1 else ''}"


def _read_jsonl(path: str, text: str, field: str) -> PromptFile:
    texts: list[str] = []
    bad_json: list[tuple[int, str]] = []
    problems: dict[str, list[int]] = {"not an object": [], "missing": [], "not a string": [], "empty": []}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (ValueError, RecursionError) as exc:
            bad_json.append((n, str(exc) if isinstance(exc, ValueError) else "nested too deep"))
            continue
        if not isinstance(row, dict):
            problems["not an object"].append(n)
        elif field not in row:
            problems["missing"].append(n)
        elif not isinstance(row[field], str):
            problems["not a string"].append(n)
        elif not row[field].strip():
            problems["empty"].append(n)
        else:
            texts.append(row[field].strip())
    found = []
    if bad_json:
        first, why = bad_json[0]
        more = f" (and {_rows(len(bad_json) - 1)} more: lines {listed([n for n, _ in bad_json[1:]])})" \
            if len(bad_json) > 1 else ""
        found.append(f"not JSON on line {first} ({why}){more}")
    kinds = {"not an object": "not a JSON object", "missing": f"field {field!r} missing",
             "not a string": f"field {field!r} not a string", "empty": f"field {field!r} empty"}
    for kind, lines in problems.items():
        if lines:
            found.append(f"{kinds[kind]} in {_rows(len(lines))} (line{'s' if len(lines) > 1 else ''} {listed(lines)})")
    if found:
        raise TraceError(f"{path}: {'; '.join(found)}")
    if not texts:
        raise TraceError(f"{path}: no prompts (the file has no rows)")
    return PromptFile(tuple(texts))


def _first_human(conversation: list) -> str | None:
    for turn in conversation:
        if isinstance(turn, dict) and turn.get("from") in HUMAN:
            value = turn.get("value")
            return value.strip() or None if isinstance(value, str) else None
    return None


def sharegpt_items(path: str, text: str) -> list:
    """A ShareGPT file's items (a JSON list); a ``TraceError`` if the file is not JSON or not a list."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise TraceError(f"{path}: not JSON ({exc}); a ShareGPT file is one JSON list of "
                         '{"conversations": [{"from": "human", "value": ...}, ...]}') from None
    except RecursionError:
        raise TraceError(f"{path}: not JSON (nested too deep)") from None
    if not isinstance(data, list):
        raise TraceError(f"{path}: expected a JSON list of conversations, got {type(data).__name__} (ShareGPT: "
                         '[{"conversations": [{"from": "human", "value": ...}, ...]}, ...])')
    return data


def sharegpt_conversations(path: str, text: str) -> tuple[list[tuple[int, dict, list]], list[int], int]:
    """A ShareGPT file's conversations: (index, item, messages) of each item with a ``conversations`` list, the
    indices of the items without one, and the number of items."""
    data = sharegpt_items(path, text)
    good, bad = [], []
    for i, item in enumerate(data):
        conversation = item.get("conversations") if isinstance(item, dict) else None
        if isinstance(conversation, list):
            good.append((i, item, conversation))
        else:
            bad.append(i)
    return good, bad, len(data)


def _read_sharegpt(path: str, text: str) -> PromptFile:
    conversations, bad, items = sharegpt_conversations(path, text)
    texts, skipped = [], 0
    for _, _, conversation in conversations:
        prompt = _first_human(conversation)
        if prompt is None:
            skipped += 1
        else:
            texts.append(prompt)
    if bad:
        raise TraceError(f"{path}: {len(bad)} item{'s' if len(bad) > 1 else ''} without a 'conversations' list "
                         f"(items {listed(bad)}, counting from 0)")
    if not texts:
        raise TraceError(f"{path}: no conversation has a human turn with text ({items} conversations)")
    return PromptFile(tuple(texts), skipped)


def read_prompts(path: str, *, fmt: str = "jsonl", field: str = "prompt") -> PromptFile:
    """The prompts of ``path`` (``fmt``: ``FORMATS``); a ``TraceError`` names every problem and where it is."""
    text = _text(path)
    return _read_sharegpt(path, text) if fmt == "sharegpt" else _read_jsonl(path, text, field)


def prompts_from_spec(node: Any, path: str, check: Checker) -> PromptSource:
    """``workload.prompts`` (or a class's); problems go to ``check``, the default corpus stands in for a bad one."""
    if check.mapping(node, path, ("corpus", "file", "format", "field")) is None:
        return PromptSource()
    if "corpus" in node:
        for key in ("file", "format", "field"):
            if key in node:
                check.fail(f"{path}.{key}", "give either a corpus or a file, not both")
        return PromptSource(corpus=check.string(node, "corpus", path, "prose", choices=CORPORA) or "prose")
    if "file" not in node:
        check.fail(path, f"give file (a prompt file: JSON lines or ShareGPT) or corpus ({', '.join(CORPORA)})")
        return PromptSource()
    fmt = check.string(node, "format", path, "jsonl", choices=FORMATS)
    if fmt == "sharegpt" and "field" in node:
        check.fail(f"{path}.field", "a ShareGPT file's prompt is each conversation's first human turn: remove field")
    field = check.string(node, "field", path, "prompt")
    full = check.file(node, "file", path)
    if full is None or fmt is None or field is None:
        return PromptSource()
    try:
        read = read_prompts(full, fmt=fmt, field=field)
    except TraceError as exc:
        check.fail(f"{path}.file", str(exc))
        return PromptSource()
    return PromptSource(file=node["file"], texts=read.texts)
