"""Answers under load (``verify:``): per step, how many re-asked reference prompts got another answer than at the
start, where they first differed, and a few examples. Pure."""

from __future__ import annotations

import json

from harness.metrics.aggregate import ANSWER_AT_KEY, ANSWER_KEY, Bucket

__all__ = ["changed_answers", "failure_samples"]


def changed_answers(bucket: Bucket) -> dict | None:
    """``{"verified", "changed", "changed_share", "first_difference_median", "examples"}``; None when no answer was
    compared in the step (no ``verify:``, or only the references were asked)."""
    x = bucket.extra
    verified = x.get("answers_verified", 0)
    if not verified:
        return None
    changed = x.get("answers_changed", 0)
    at = sorted((int(k[len(ANSWER_AT_KEY):]), n) for k, n in x.items() if k.startswith(ANSWER_AT_KEY))
    examples = []
    for k, v in sorted(bucket.failure_samples.items()):
        if k.startswith(ANSWER_KEY):
            try:
                examples.append(json.loads(v))
            except ValueError:  # a worker of another kneecap: its example is left out, its counts are not
                continue
    return {"verified": verified, "changed": changed, "changed_share": round(changed / verified, 4),
            "first_difference_median": _lower_median(at), "examples": examples}


def failure_samples(bucket: Bucket) -> dict[str, str]:
    """The bucket's failure details by class, without the changed answers' examples kept beside them."""
    return {k: v for k, v in sorted(bucket.failure_samples.items()) if not k.startswith(ANSWER_KEY)}


def _lower_median(counts: list[tuple[int, int]]) -> int | None:
    """The lower median of values given as sorted (value, count) pairs."""
    total = sum(n for _, n in counts)
    seen = 0
    for value, n in counts:
        seen += n
        if 2 * seen >= total:
            return value
    return None
