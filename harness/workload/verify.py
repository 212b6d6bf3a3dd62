"""Is an answer the reference's, and does it pass the scenario's checks? Greedy answers compared word by word;
answers checked against a regex, as JSON, against a JSON Schema, or for an expected text. Pure.

The OpenAI-compatible APIs stream text, not token ids, so the answers are compared by their whitespace-separated
words: the first position where they differ is a word's index (about a token's, for the short answers compared).
"""

from __future__ import annotations

import json
import re
from typing import Any

from harness.spec.verify import AnswerCheck
from harness.workload.prompts import Prompt

__all__ = ["CHECK_REASONS", "EXAMPLE_CHARS", "check_example", "example", "failed_check", "first_difference",
           "reference_line"]

EXAMPLE_CHARS = 120
"""Of each text an example keeps, from a little before the first difference."""
CHECK_REASONS = ("regex", "json", "schema", "contains")
"""Why an answer failed its checks, in the order they are tried: the first that fails is its reason."""


def failed_check(answer: str, check: AnswerCheck, contains: str | None = None) -> str | None:
    """The first of ``CHECK_REASONS`` that ``answer`` fails (``contains``: a text it must hold, from the prompt
    file); None when it passes them all."""
    if check.regex is not None and _regex(check.regex).search(answer) is None:
        return "regex"
    if check.json or check.schema is not None:
        try:
            parsed = json.loads(answer)
        except ValueError:
            return "json"
        if check.schema is not None and not _validator(json.dumps(check.schema, sort_keys=True)).is_valid(parsed):
            return "schema"
    if contains is not None and contains not in answer:
        return "contains"
    return None


_REGEXES: dict[str, re.Pattern] = {}
_VALIDATORS: dict[str, Any] = {}


def _regex(pattern: str) -> re.Pattern:
    found = _REGEXES.get(pattern)
    if found is None:
        found = _REGEXES[pattern] = re.compile(pattern)
    return found


def _validator(schema_json: str) -> Any:
    """The schema's validator, built once per schema (its JSON as the key: a dict does not hash)."""
    found = _VALIDATORS.get(schema_json)
    if found is None:
        import jsonschema

        schema = json.loads(schema_json)
        found = _VALIDATORS[schema_json] = jsonschema.validators.validator_for(schema)(schema)
    return found


def first_difference(reference: str, answer: str) -> int | None:
    """The index of the first word where ``answer`` differs from ``reference`` (one ending first differs where it
    ended); None when they are the same words."""
    ref, got = reference.split(), answer.split()
    for i, (a, b) in enumerate(zip(ref, got, strict=False)):
        if a != b:
            return i
    return None if len(ref) == len(got) else min(len(ref), len(got))


def example(prompt: int, at: int, reference: str, answer: str) -> str:
    """One changed answer for the summary: JSON ``{"prompt", "at", "reference", "answer"}``, each text from two words
    before the difference, cut to ``EXAMPLE_CHARS``."""
    def near(text: str) -> str:
        words = text.split()
        return " ".join(words[max(0, at - 2):])[:EXAMPLE_CHARS]
    return json.dumps({"prompt": prompt, "at": at, "reference": near(reference), "answer": near(answer)})


def reference_line(prompt: Prompt, max_tokens: int, answer: str) -> str:
    """A reference as a line of ``answers.jsonl`` (``verify.file``'s format): the prompt (a chat's messages), its
    answer length and the answer, so a later run can compare another deployment's answers with these."""
    if prompt.messages is not None:
        asked: dict = {"messages": [{"role": m["role"], "content": str(m["content"])} for m in prompt.messages]}
    else:
        asked = {"prompt": str(prompt.text)}
    return json.dumps({**asked, "max_tokens": max_tokens, "answer": answer}, ensure_ascii=False)


def check_example(prompt: int, reason: str, answer: str) -> str:
    """One answer that failed a check, for the summary: JSON ``{"prompt", "failed", "answer"}``, the answer's last
    ``EXAMPLE_CHARS`` characters (where a cut JSON answer shows it)."""
    return json.dumps({"prompt": prompt, "failed": reason, "answer": answer[-EXAMPLE_CHARS:]})
