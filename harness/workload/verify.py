"""Is an answer the reference's? Greedy answers compared word by word. Pure.

The OpenAI-compatible APIs stream text, not token ids, so the answers are compared by their whitespace-separated
words: the first position where they differ is a word's index (about a token's, for the short answers compared).
"""

from __future__ import annotations

import json

__all__ = ["EXAMPLE_CHARS", "example", "first_difference"]

EXAMPLE_CHARS = 120
"""Of each text an example keeps, from a little before the first difference."""


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
