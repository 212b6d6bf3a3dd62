"""Answers compared with their references (``workload.verify``) and one worker's references and re-asks
(``load.verify.Verifier``), without a server."""

from __future__ import annotations

import json

import pytest

from harness.load.verify import Verifier
from harness.metrics.record import RequestRecord
from harness.sim.text import plain_text, token_text
from harness.spec.verify import VerifySpec
from harness.workload.prompts import Prompt
from harness.workload.sampler import PlannedRequest
from harness.workload.verify import example, first_difference


@pytest.mark.parametrize(("reference", "answer", "at"), [
    (" the of and", " the of and", None),
    ("the  of\nand", " the of and ", None),  # the same words, however the chunks spaced them
    (" the of and", " the of to", 2),
    (" the of and", " the of", 2),  # ended early: it differs where it ended
    (" the of", " the of and", 2),
    ("", " the", 0),
])
def test_the_first_word_that_differs(reference, answer, at):
    assert first_difference(reference, answer) == at


def test_an_example_keeps_both_texts_from_just_before_the_difference():
    e = json.loads(example(3, 4, plain_text(30), plain_text(30, 0, 4)))
    assert e["prompt"] == 3 and e["at"] == 4
    assert e["reference"].split()[:3] == ["and", "to", "in"] and e["answer"].split()[:3] == ["and", "to", "a"]
    assert len(e["reference"]) <= 120


def test_the_simulators_changed_answer_differs_from_its_5th_word_on_and_streams_as_its_whole():
    same, changed = plain_text(12), plain_text(12, 0, 4)
    assert first_difference(same, changed) == 4
    streamed = "".join(json.loads(token_text(i, 3, 4)) for i in range(0, 12, 3))
    assert streamed == changed and "".join(json.loads(token_text(i, 1)) for i in range(12)) == same


def prompt(i: int) -> PlannedRequest:
    return PlannedRequest(Prompt(None, f"prompt {i}", 2, 0), 10 + i)


def answered(content: str | None, ok: bool = True) -> RequestRecord:
    return RequestRecord(start=0.0, error=None if ok else "http_500", content=content)


def test_references_first_then_a_share_of_re_asks_compared():
    v = Verifier(VerifySpec(share=0.5, prompts=3), seed=1, worker=0)
    drawn = iter(range(100))
    asks = [v.pick(lambda: prompt(next(drawn))) for _ in range(4)]
    assert [a.index for a in asks[:3]] == [0, 1, 2] and all(a.reference for a in asks[:3])
    assert [a.max_tokens for a in asks[:3]] == [10, 11, 12]  # the lengths the workload drew with them
    assert asks[3] is None  # the references are in flight: an ordinary request meanwhile
    v.judge(asks[0], answered(" a b c"))
    v.judge(asks[1], answered(None, ok=False))  # failed: asked again
    v.judge(asks[2], answered(" x y z"))
    again = v.pick(lambda: prompt(next(drawn)))
    assert again.index == 1 and again.reference and again.extra == {"temperature": 0, "seed": 1234}
    v.judge(again, answered(" p q"))
    re_asks = [a for a in (v.pick(lambda: prompt(next(drawn))) for _ in range(400)) if a is not None]
    assert 150 < len(re_asks) < 250 and not any(a.reference for a in re_asks)  # share 0.5
    rec = answered(" x y w")
    v.judge(next(a for a in re_asks if a.index == 2), rec)
    assert rec.answer_check == "changed" and rec.answer_changed_at == 2 and rec.verified and rec.answer_changed
    same = answered(" a b c")
    v.judge(next(a for a in re_asks if a.index == 0), same)
    assert same.answer_check == "same" and same.verified and not same.answer_changed
