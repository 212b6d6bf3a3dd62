"""The scenario's ``verify:`` block as typed values: does the endpoint still give the same answers under load? Pure.

A few prompts drawn from the workload are asked greedily (``temperature`` 0, a fixed ``seed``) once each at the start
of the run, and those answers become the references; afterwards a ``share`` of requests re-asks one of them and its
answer is compared with the reference (``workload/verify.py``; docs/verify.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.checker import Checker

__all__ = ["VerifySpec", "verify_from_spec"]

_KEYS = ("share", "prompts", "max_tokens", "seed")


@dataclass(frozen=True, kw_only=True)
class VerifySpec:
    share: float = 0.05
    """Of the requests after the references, the share that re-asks a reference prompt (their timing counts like any
    request's)."""
    prompts: int = 8
    """Distinct reference prompts, drawn from the workload's lengths."""
    max_tokens: int | None = None
    """The answer length asked and compared; None: the one the workload drew with each prompt, so the re-asks have
    the workload's shape (exact where the endpoint asks for exact lengths: ``ignore_eos``)."""
    seed: int = 1234
    """The API's ``seed`` field, beside ``temperature: 0``."""


def verify_from_spec(node: Any, path: str, check: Checker) -> VerifySpec | None:
    """The ``verify:`` mapping (``{}`` for every default) as a ``VerifySpec``; problems go to ``check`` (None then)."""
    before = len(check.problems)
    if check.mapping(node, path, _KEYS) is None:
        return None
    share = check.number(node, "share", path, VerifySpec.share, above=0, maximum=1)
    prompts = check.number(node, "prompts", path, VerifySpec.prompts, integer=True, minimum=1, maximum=1000)
    max_tokens = check.number(node, "max_tokens", path, None, integer=True, minimum=1)
    seed = check.number(node, "seed", path, VerifySpec.seed, integer=True)
    if len(check.problems) > before:
        return None
    return VerifySpec(share=share, prompts=prompts, max_tokens=max_tokens, seed=seed)
