"""Answers under load (``verify:``): per step, how many re-asked reference prompts got another answer than at the
start, where they first differed, how many answers failed the scenario's checks and which, with a few examples of
each; written as a dict (``answers``), read as ``harness.summary.Verify`` (summary.json's ``steps[].verify``). Pure."""

from __future__ import annotations

import json
from collections.abc import Iterable

from harness.metrics.aggregate import (
    ANSWER_AT_KEY,
    ANSWER_CHECK_KEY,
    ANSWER_FAILED_KEY,
    ANSWER_KEY,
    REFERENCE_KEY,
    Bucket,
)

__all__ = ["answers", "failure_samples", "reference_lines"]


def answers(bucket: Bucket) -> dict | None:
    """``{"verified", "changed", "changed_share", "first_difference_median", "examples"}``, and with checks
    ``{"checked", "failed", "failed_share", "failed_by", "check_examples"}``; None when no answer was compared nor
    checked in the step (no ``verify:``, or only the references were asked, unchecked)."""
    x = bucket.extra
    verified, checked = x.get("answers_verified", 0), x.get("answers_checked", 0)
    if not verified and not checked:
        return None
    changed = x.get("answers_changed", 0)
    at = sorted((int(k[len(ANSWER_AT_KEY):]), n) for k, n in x.items() if k.startswith(ANSWER_AT_KEY))
    out: dict = {"verified": verified, "changed": changed,
                 "changed_share": round(changed / verified, 4) if verified else None,
                 "first_difference_median": _lower_median(at), "examples": _examples(bucket, ANSWER_KEY)}
    if checked:
        failed = x.get("answers_failed", 0)
        out |= {"checked": checked, "failed": failed, "failed_share": round(failed / checked, 4),
                "failed_by": {k[len(ANSWER_FAILED_KEY):]: n for k, n in sorted(x.items())
                              if k.startswith(ANSWER_FAILED_KEY)},
                "check_examples": _examples(bucket, ANSWER_CHECK_KEY)}
    return out


def _examples(bucket: Bucket, prefix: str) -> list[dict]:
    out = []
    for k, v in sorted(bucket.failure_samples.items()):
        if k.startswith(prefix) and k[len(prefix):].isdigit():
            try:
                out.append(json.loads(v))
            except ValueError:  # a worker of another kneecap: its example is left out, its counts are not
                continue
    return out


def failure_samples(bucket: Bucket) -> dict[str, str]:
    """The bucket's failure details by class, without the answers' examples and references kept beside them."""
    return {k: v for k, v in sorted(bucket.failure_samples.items())
            if not k.startswith(ANSWER_KEY) and not k.startswith(REFERENCE_KEY)}


def reference_lines(buckets: Iterable[Bucket]) -> list[str]:
    """Every reference answer the run took (``answers.jsonl``'s lines: ``workload.verify.reference_line``), once each,
    in a stable order."""
    return sorted({v for b in buckets for k, v in b.failure_samples.items() if k.startswith(REFERENCE_KEY)})


def _lower_median(counts: list[tuple[int, int]]) -> int | None:
    """The lower median of values given as sorted (value, count) pairs."""
    total = sum(n for _, n in counts)
    seen = 0
    for value, n in counts:
        seen += n
        if 2 * seen >= total:
            return value
    return None
