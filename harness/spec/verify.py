"""The scenario's ``verify:`` block as typed values: does the endpoint still give the same answers under load, and
do they pass the scenario's checks? Pure.

A few prompts (drawn from the workload, or a prompt file's) are asked greedily (``temperature`` 0, a fixed ``seed``)
once each at the start of the run, and those answers become the references (a file's ``answer`` is one already);
afterwards a ``share`` of requests re-asks one of them and its answer is compared with the reference. Every answer
asked so is checked too when ``check`` or the file's ``contains`` says how (``workload/verify.py``; docs/verify.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from harness.checker import Checker, json_lines

__all__ = ["AnswerCheck", "VerifyPrompt", "VerifySpec", "schema_problem", "verify_from_spec"]

_KEYS = ("share", "prompts", "max_tokens", "seed", "file", "check")
_LINE_KEYS = ("prompt", "messages", "max_tokens", "answer", "contains")


@dataclass(frozen=True)
class AnswerCheck:
    """``verify.check``: every answer ``verify:`` asks must pass all that are set."""

    regex: str | None = None
    """``re.search`` must find it in the answer."""
    json: bool = False
    """The answer (surrounding whitespace aside) parses as JSON."""
    schema: dict[str, Any] | None = field(default=None, hash=False)
    """A JSON Schema the parsed answer must be valid against (implies ``json``)."""

    @property
    def any(self) -> bool:
        return self.regex is not None or self.json or self.schema is not None


@dataclass(frozen=True)
class VerifyPrompt:
    """One line of ``verify.file``."""

    prompt: str
    """The user's message (chat), the prompt (completions); "" with ``messages``."""
    max_tokens: int | None = None
    answer: str | None = None
    """The reference answer (the run asks none for this prompt): a file kneecap wrote (``answers.jsonl``) or the
    expected answer."""
    contains: str | None = None
    """A text every answer to it must contain (a check)."""
    messages: tuple[dict[str, str], ...] = ()
    """A chat prompt's messages (``role``, ``content``), as kneecap's ``answers.jsonl`` keeps a workload's."""


@dataclass(frozen=True, kw_only=True)
class VerifySpec:
    share: float = 0.05
    """Of the requests after the references, the share that re-asks a reference prompt (their timing counts like any
    request's)."""
    prompts: int = 8
    """Distinct reference prompts, drawn from the workload's lengths (a file: its lines)."""
    max_tokens: int | None = None
    """The answer length asked and compared; None: the one the workload drew with each prompt, so the re-asks have
    the workload's shape (exact where the endpoint asks for exact lengths: ``ignore_eos``)."""
    seed: int = 1234
    """The API's ``seed`` field, beside ``temperature: 0``."""
    file: tuple[VerifyPrompt, ...] = ()
    """``verify.file``: the prompts, read when the scenario is; empty: drawn from the workload."""
    check: AnswerCheck = field(default_factory=AnswerCheck)

    @property
    def checks(self) -> bool:
        """Answers are checked beyond identity (``check``, or a line's ``contains``)."""
        return self.check.any or any(p.contains is not None for p in self.file)


def verify_from_spec(node: Any, path: str, check: Checker) -> VerifySpec | None:
    """The ``verify:`` mapping (``{}`` for every default) as a ``VerifySpec``; problems go to ``check`` (None then)."""
    before = len(check.problems)
    if check.mapping(node, path, _KEYS) is None:
        return None
    share = check.number(node, "share", path, VerifySpec.share, above=0, maximum=1)
    prompts = check.number(node, "prompts", path, VerifySpec.prompts, integer=True, minimum=1, maximum=1000)
    max_tokens = check.number(node, "max_tokens", path, None, integer=True, minimum=1)
    seed = check.number(node, "seed", path, VerifySpec.seed, integer=True)
    lines: tuple[VerifyPrompt, ...] = ()
    if "file" in node:
        if "prompts" in node:
            check.fail(f"{path}.prompts", "the file's lines are the prompts: remove prompts (or file)")
        full = check.file(node, "file", path)
        lines = _read(full, f"{path}.file", check) if full is not None else ()
    answers = _check(node["check"], f"{path}.check", check) if "check" in node else AnswerCheck()
    if len(check.problems) > before:
        return None
    return VerifySpec(share=share, prompts=len(lines) or prompts, max_tokens=max_tokens, seed=seed, file=lines,
                      check=answers)


def _check(node: Any, path: str, check: Checker) -> AnswerCheck:
    if check.mapping(node, path, ("regex", "json", "schema")) is None:
        return AnswerCheck()
    regex = check.string(node, "regex", path, None)
    if regex is not None:
        import re

        try:
            re.compile(regex)
        except re.error as exc:
            check.fail(f"{path}.regex", f"not a regular expression: {exc} (Python's re syntax)")
    schema = node.get("schema")
    if isinstance(schema, str):  # a file beside the scenario
        full = check.file(node, "schema", path)
        schema = None
        if full is not None:
            try:
                with open(full, encoding="utf-8") as f:
                    schema = json.load(f)
            except (ValueError, UnicodeDecodeError) as exc:
                check.fail(f"{path}.schema", f"{node['schema']} is not JSON: {exc}")
    if schema is not None or ("schema" in node and not isinstance(node["schema"], str)):
        problem = schema_problem(schema) if isinstance(schema, (dict, bool)) else \
            f"expected a JSON Schema (a mapping, or the name of a JSON file), got {type(schema).__name__}"
        if problem is not None:
            check.fail(f"{path}.schema", problem)
            schema = None
    return AnswerCheck(regex=regex, json=check.boolean(node, "json", path, False),
                       schema=schema if isinstance(schema, dict) else None)


def _read(full: str, path: str, check: Checker) -> tuple[VerifyPrompt, ...]:
    """The prompt file's lines (JSON objects: ``prompt`` or ``messages``, and optionally ``max_tokens``, ``answer``,
    ``contains``); every malformed line named (``checker.json_lines``)."""
    try:
        lines = json_lines(full, _line_problem)
    except ValueError as exc:
        check.fail(path, f"{exc}. Each line: {{\"prompt\": \"...\"}} (or \"messages\") with optional \"max_tokens\" "
                   "(an integer >= 1), \"answer\" (the reference) and \"contains\" (a text)")
        return ()
    if not lines:
        check.fail(path, "the file has no prompt: one JSON object a line, {\"prompt\": \"...\"}")
    return tuple(VerifyPrompt(obj.get("prompt", ""), obj.get("max_tokens"), obj.get("answer"), obj.get("contains"),
                              tuple(obj.get("messages", ()))) for obj in lines)


def _line_problem(obj: Any) -> str | None:
    if not isinstance(obj, dict):
        return f"expected an object, got {type(obj).__name__}"
    unknown = sorted(set(obj) - set(_LINE_KEYS))
    if unknown:
        return f"unknown key {unknown[0]!r} (known: {', '.join(_LINE_KEYS)})"
    if ("prompt" in obj) == ("messages" in obj):
        return "give \"prompt\" (a text) or \"messages\" (a chat's), one of them"
    if "prompt" in obj and (not isinstance(obj["prompt"], str) or not obj["prompt"]):
        return "\"prompt\" must be a non-empty string"
    messages = obj.get("messages", [{"role": "user", "content": "x"}])
    if not isinstance(messages, list) or not messages or not all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in messages):
        return "\"messages\" must be a non-empty list of {\"role\": ..., \"content\": ...} with text content"
    tokens = obj.get("max_tokens")
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1):
        return f"\"max_tokens\" must be an integer >= 1, got {tokens!r}"
    for key in ("answer", "contains"):
        if key in obj and not isinstance(obj[key], str):
            return f"\"{key}\" must be a string, got {type(obj[key]).__name__}"
    return None


def schema_problem(schema: Any) -> str | None:
    """Why ``schema`` is not a usable JSON Schema (the scenario check's words); None when it is."""
    import jsonschema  # here: only a scenario with a schema pays for its import

    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        return f"not a valid JSON Schema: {exc.message}"
    return None
