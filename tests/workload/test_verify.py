"""Answers compared with their references and checked (``workload.verify``), and one worker's references, re-asks
and checks (``load.verify.Verifier``), without a server."""

from __future__ import annotations

import json

import pytest

from harness.checker import Checker
from harness.endpoint import Endpoint
from harness.load.verify import Verifier
from harness.metrics.record import RequestRecord
from harness.sim.text import json_answer, plain_text, token_text
from harness.spec.adapters import AdapterSpec
from harness.spec.verify import AnswerCheck, VerifyPrompt, VerifySpec, verify_from_spec
from harness.workload.prompts import Prompt, Spliced
from harness.workload.sampler import PlannedRequest
from harness.workload.verify import example, failed_check, first_difference, reference_line


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
    v = Verifier(VerifySpec(share=0.5, prompts=3), seed=1, worker=0, api="completions")
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


SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}


@pytest.mark.parametrize(("answer", "check", "contains", "failed"), [
    (' {"answer": "yes"} ', AnswerCheck(schema=SCHEMA), None, None),
    ('{"answer": "yes"', AnswerCheck(schema=SCHEMA), None, "json"),  # cut short: it never closes
    ('{"answer": 3}', AnswerCheck(schema=SCHEMA), None, "schema"),
    ('[1, 2]', AnswerCheck(json=True), None, None),
    ('```json\n{}\n```', AnswerCheck(json=True), None, "json"),  # strict: a fenced block is not JSON
    ("The answer is 42.", AnswerCheck(regex=r"\b42\b"), None, None),
    ("The answer is 421.", AnswerCheck(regex=r"\b42\b"), None, "regex"),
    ("Paris is the capital", AnswerCheck(), "Paris", None),
    ("Lyon is a city", AnswerCheck(), "Paris", "contains"),
    ("no json", AnswerCheck(regex="json", json=True), None, "json"),  # the first that fails is the reason
])
def test_an_answer_fails_the_first_check_it_does_not_pass(answer, check, contains, failed):
    assert failed_check(answer, check, contains) == failed


def test_the_simulators_json_answer_parses_unless_it_is_cut_and_streams_as_its_whole():
    whole, cut = json_answer(0, 12, 12), json_answer(0, 12, 12, cut=True)
    assert json.loads(whole) == {"answer": plain_text(10, 1)} and failed_check(cut, AnswerCheck(json=True)) == "json"
    assert "".join(json_answer(i, 4, 12) for i in range(0, 12, 4)) == whole
    assert json.loads(json_answer(0, 1, 1)) == {}


def test_a_prompt_files_answers_are_references_and_its_contains_a_check():
    spec = VerifySpec(share=1.0, prompts=2, file=(VerifyPrompt("capital of France?", 8, answer=" Paris is it"),
                                                  VerifyPrompt("two plus two?", contains="4")))
    v = Verifier(spec, seed=1, worker=0, api="chat")
    first = v.pick(lambda: prompt(0))
    assert first.index == 1 and first.reference  # line 0 has its reference: only line 1 is asked for one
    assert first.prompt.messages == [{"role": "user", "content": "two plus two?"}] and first.max_tokens == 10
    ref = answered(" it is 5")
    v.judge(first, ref)
    assert ref.answer_check == "reference" and ref.answer_checked and ref.answer_failed == "contains"
    asks = [a for a in (v.pick(lambda: prompt(0)) for _ in range(20)) if a is not None]
    paris = next(a for a in asks if a.index == 0)
    assert paris.max_tokens == 8 and not paris.reference
    rec = answered(" Paris is it")
    v.judge(paris, rec)
    assert rec.answer_check == "same" and rec.answer_checked and rec.answer_failed is None


def test_a_reference_line_reads_back_as_the_prompt_file_line_it_stands_for(tmp_path):
    chat = Prompt([{"role": "system", "content": "be brief"}, {"role": "user", "content": Spliced((b"caf\\u00e9",))}],
                  None, 3, 0)
    (tmp_path / "answers.jsonl").write_text(reference_line(chat, 8, " it is") + "\n"
                                            + reference_line(Prompt(None, "two plus", 2, 0), 4, " four") + "\n")
    check = Checker(str(tmp_path))
    spec = verify_from_spec({"file": "answers.jsonl"}, "verify", check)
    assert not check.problems and spec is not None
    assert spec.file == (VerifyPrompt("", 8, " it is", None, ({"role": "system", "content": "be brief"},
                                                              {"role": "user", "content": "café"})),
                         VerifyPrompt("two plus", 4, " four"))


def test_a_reference_keeps_its_class_and_one_adapter_every_time_it_is_asked():
    v = Verifier(VerifySpec(share=1.0, prompts=3), seed=1, worker=0, api="chat")
    classes = iter([1, 0, 1])
    asks = [v.pick(lambda: PlannedRequest(Prompt(None, "p", 1, 0), 5, class_index=next(classes))) for _ in range(3)]
    assert [a.cls for a in asks] == [1, 0, 1]
    ep = Endpoint(model="base", adapters=AdapterSpec(("lora-a", "lora-b")), extra_body={"top_k": 5})
    asked = [a.endpoint(ep) for a in asks]
    assert [e.model for e in asked] == ["lora-a", "lora-b", "lora-a"] and all(e.adapters is None for e in asked)
    assert asked[0].extra_body == {"top_k": 5, "temperature": 0, "seed": 1234}
