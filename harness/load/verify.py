"""One worker's answer checks (``verify:``): its reference answers, then a share of requests that re-asks them.

The first requests a worker sends ask each reference prompt once, greedily (at the first step's load, in the order
users ask); a reference that fails is asked again, and a prompt file's ``answer`` is a reference already. Then each
request re-asks one with probability ``share`` and its answer is compared with the reference (``workload.verify``):
``RequestRecord.answer_check`` says which it was. Every answer asked so, references too, is checked when the
scenario says how (``verify.check``, a line's ``contains``): ``RequestRecord.answer_failed``.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from dataclasses import dataclass

from harness.metrics.record import RequestRecord
from harness.scenario import Endpoint
from harness.spec.verify import VerifyPrompt, VerifySpec
from harness.workload.prompts import CHAT_APIS, Prompt
from harness.workload.sampler import PlannedRequest
from harness.workload.verify import check_example, example, failed_check, first_difference, reference_line

__all__ = ["Ask", "Verifier"]


@dataclass(frozen=True)
class Ask:
    index: int
    """The reference prompt's index on this worker (a prompt file's line, among its prompts)."""
    prompt: Prompt
    max_tokens: int
    reference: bool
    """Asked for its reference answer (else: re-asked, to compare)."""
    extra: dict
    cls: int | None = None
    """The class of a mix it was drawn from: asked with that class's endpoint, counted in it."""

    def endpoint(self, ep: Endpoint) -> Endpoint:
        """``ep`` asked greedily: ``temperature`` 0 and the spec's ``seed`` over its ``extra_body``; with LoRA
        adapters, one adapter for a prompt every time it is asked (by its index), so its answers compare."""
        model = ep.model if ep.adapters is None else ep.adapters.names[self.index % len(ep.adapters.names)]
        return dataclasses.replace(ep, extra_body={**ep.extra_body, **self.extra}, model=model, adapters=None)


class Verifier:
    def __init__(self, spec: VerifySpec, seed: int, worker: int, api: str) -> None:
        self.spec = spec
        self.api = api
        self.prompts: list[tuple[Prompt, int, int | None]] = []
        """Each reference prompt with its answer length (the file's, ``spec.max_tokens``, else the one drawn) and
        the mix's class it was drawn from (None: a file's, or no mix)."""
        self.references: dict[int, str] = {i: p.answer for i, p in enumerate(spec.file) if p.answer is not None}
        self.asking: set[int] = set()
        self.rng = random.Random(f"{seed}/verify/{worker}")
        self.extra = {"temperature": 0, "seed": spec.seed}

    def pick(self, draw: Callable[[], PlannedRequest]) -> Ask | None:
        """What the next request asks: a reference still missing, else (with probability ``share``, once every
        reference is in) a re-ask; None: an ordinary request. ``draw``: a prompt of the workload's and its output
        length."""
        spec = self.spec
        if not self.prompts:
            self.prompts = [self._prompt(draw, line) for line in spec.file] if spec.file else \
                [(p.prompt, spec.max_tokens or p.max_tokens, p.class_index)
                 for p in (draw() for _ in range(spec.prompts))]
        missing = next((i for i in range(spec.prompts) if i not in self.references and i not in self.asking), None)
        if missing is not None:
            self.asking.add(missing)
            prompt, tokens, cls = self.prompts[missing]
            return Ask(missing, prompt, tokens, True, self.extra, cls)
        if len(self.references) < spec.prompts or self.rng.random() >= spec.share:
            return None
        i = self.rng.randrange(spec.prompts)
        prompt, tokens, cls = self.prompts[i]
        return Ask(i, prompt, tokens, False, self.extra, cls)

    def _prompt(self, draw: Callable[[], PlannedRequest], line: VerifyPrompt) -> tuple[Prompt, int, None]:
        """A file's prompt as the API sends it (one user message, or the completions prompt), and its length: the
        line's, the spec's, else one drawn from the workload's."""
        text = line.prompt or "\n\n".join(m["content"] for m in line.messages)
        words = len(text.split())
        if self.api not in CHAT_APIS:
            prompt = Prompt(None, text, words, 0)
        else:
            prompt = Prompt([dict(m) for m in line.messages] or [{"role": "user", "content": text}], None, words, 0)
        return prompt, line.max_tokens or self.spec.max_tokens or draw().max_tokens, None

    def judge(self, ask: Ask, rec: RequestRecord) -> None:
        """Takes ``rec``'s answer as the reference, or compares it with it (a failed request compares nothing); then
        checks it."""
        answer = rec.content
        if ask.reference:
            self.asking.discard(ask.index)
            if rec.ok and answer:
                self.references[ask.index] = answer
                rec.answer_check = "reference"
                rec.answer_reference = reference_line(ask.prompt, ask.max_tokens, answer)
        elif rec.ok and answer is not None:
            ref = self.references[ask.index]
            at = first_difference(ref, answer)
            rec.answer_check = "same" if at is None else "changed"
            if at is not None:
                rec.answer_changed_at, rec.answer_example = at, example(ask.index, at, ref, answer)
        if rec.ok and answer is not None and self.spec.checks:
            line = self.spec.file[ask.index] if self.spec.file else None
            rec.answer_checked = True
            rec.answer_failed = failed_check(answer, self.spec.check, line.contains if line else None)
            if rec.answer_failed is not None:
                rec.answer_failed_example = check_example(ask.index, rec.answer_failed, answer)
