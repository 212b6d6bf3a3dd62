"""One worker's answer checks (``verify:``): its reference answers, then a share of requests that re-asks them.

The first requests a worker sends ask each reference prompt once, greedily (at the first step's load, in the order
users ask); a reference that fails is asked again. Then each request re-asks one with probability ``share`` and its
answer is compared with the reference (``workload.verify``): ``RequestRecord.answer_check`` says which it was.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from dataclasses import dataclass

from harness.metrics.record import RequestRecord
from harness.scenario import Endpoint
from harness.spec.verify import VerifySpec
from harness.workload.prompts import Prompt
from harness.workload.sampler import PlannedRequest
from harness.workload.verify import example, first_difference

__all__ = ["Ask", "Verifier"]


@dataclass(frozen=True)
class Ask:
    index: int
    """The reference prompt's index on this worker."""
    prompt: Prompt
    max_tokens: int
    reference: bool
    """Asked for its reference answer (else: re-asked, to compare)."""
    extra: dict

    def endpoint(self, ep: Endpoint) -> Endpoint:
        """``ep`` asked greedily: ``temperature`` 0 and the spec's ``seed`` over its ``extra_body``."""
        return dataclasses.replace(ep, extra_body={**ep.extra_body, **self.extra})


class Verifier:
    def __init__(self, spec: VerifySpec, seed: int, worker: int) -> None:
        self.spec = spec
        self.prompts: list[tuple[Prompt, int]] = []
        """Each reference prompt with its answer length (``spec.max_tokens``, else the one drawn with it)."""
        self.references: dict[int, str] = {}
        self.asking: set[int] = set()
        self.rng = random.Random(f"{seed}/verify/{worker}")
        self.extra = {"temperature": 0, "seed": spec.seed}

    def pick(self, draw: Callable[[], PlannedRequest]) -> Ask | None:
        """What the next request asks: a reference still missing, else (with probability ``share``, once every
        reference is in) a re-ask; None: an ordinary request. ``draw``: a prompt of the workload's and its output
        length."""
        spec = self.spec
        if not self.prompts:
            self.prompts = [(p.prompt, spec.max_tokens or p.max_tokens) for p in (draw() for _ in range(spec.prompts))]
        missing = next((i for i in range(spec.prompts) if i not in self.references and i not in self.asking), None)
        if missing is not None:
            self.asking.add(missing)
            return Ask(missing, *self.prompts[missing], True, self.extra)
        if len(self.references) < spec.prompts or self.rng.random() >= spec.share:
            return None
        i = self.rng.randrange(spec.prompts)
        return Ask(i, *self.prompts[i], False, self.extra)

    def judge(self, ask: Ask, rec: RequestRecord) -> None:
        """Takes ``rec``'s answer as the reference, or compares it with it (a failed request compares nothing)."""
        answer = rec.content
        if ask.reference:
            self.asking.discard(ask.index)
            if rec.ok and answer:
                self.references[ask.index] = answer
                rec.answer_check = "reference"
            return
        if not rec.ok or answer is None:
            return
        ref = self.references[ask.index]
        at = first_difference(ref, answer)
        rec.answer_check = "same" if at is None else "changed"
        if at is not None:
            rec.answer_changed_at, rec.answer_example = at, example(ask.index, at, ref, answer)
