"""Prompts from real text: the reader of prompt files, ``workload.prompts``, the corpora, cut and pad. Pure."""

from __future__ import annotations

import json
import math
import random

import pytest
import yaml

from harness.client import openai
from harness.scenario import ScenarioError, parse_scenario
from harness.workload.corpus import Corpus, builtin
from harness.workload.prompt_file import PromptSource, read_prompts
from harness.workload.prompts import Prompt, PromptBuilder, Spliced, SplicedBody
from harness.workload.traces import TraceError

ROWS = ['Explain "speculative decoding" in two lines.\nThen stop.', "Résumé: naïve café — ok? \U0001f642 back\\slash",
        "One two three four five six seven eight nine ten.", "A tab\there, a bell \x07 and the end."]


def jsonl(tmp_path, rows, name="p.jsonl") -> str:
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n" for r in rows))
    return str(path)


def test_a_jsonl_file_gives_its_prompts_as_written(tmp_path):
    path = jsonl(tmp_path, [{"prompt": f"  {r}\n", "n": i} for i, r in enumerate(ROWS)] + [""])  # a blank line
    assert read_prompts(path).texts == tuple(ROWS)
    assert read_prompts(jsonl(tmp_path, [{"q": "Why?"}]), field="q").texts == ("Why?",)


def test_every_problem_of_a_jsonl_file_with_its_lines(tmp_path):
    rows = [{"prompt": "fine"}, '{"prompt": "cut', {"text": "a"}, [1], {"prompt": 5}, {"prompt": " "}, {"text": "b"},
            "not json either"]
    with pytest.raises(TraceError) as err:
        read_prompts(jsonl(tmp_path, rows))
    msg = str(err.value)
    assert msg.startswith(f"{tmp_path / 'p.jsonl'}: not JSON on line 2 (Unterminated string"), msg
    assert "(and 1 row more: lines 8)" in msg
    assert "field 'prompt' missing in 2 rows (lines 3, 7)" in msg and "not a JSON object in 1 row (line 4)" in msg
    assert "field 'prompt' not a string in 1 row (line 5)" in msg and "field 'prompt' empty in 1 row (line 6)" in msg
    many = [{"x": 1}] * 9
    with pytest.raises(TraceError, match=r"missing in 9 rows \(lines 1, 2, 3, 4, 5 and 4 more\)"):
        read_prompts(jsonl(tmp_path, many))


@pytest.mark.parametrize("content, message", [
    (None, "file not found"),
    (b"", "no prompts"),
    (b"\xff\xfe{}", r"is not UTF-8 text \(byte 0xff at offset 0"),
])
def test_a_file_that_is_no_prompt_file(tmp_path, content, message):
    path = tmp_path / "p.jsonl"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(TraceError, match=message):
        read_prompts(str(path))


def test_sharegpt_takes_each_first_human_turn_and_skips_conversations_without_one(tmp_path):
    data = [{"id": "a", "conversations": [{"from": "human", "value": ROWS[0]}, {"from": "gpt", "value": "ok"},
                                          {"from": "human", "value": "again"}]},
            {"id": "b", "conversations": []},
            {"id": "c", "conversations": [{"from": "gpt", "value": "hello"}, {"from": "user", "value": ROWS[1]}]},
            {"id": "d", "conversations": [{"from": "human", "value": "  "}]}]
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(data))
    read = read_prompts(str(path), fmt="sharegpt")
    assert read.texts == (ROWS[0], ROWS[1]) and read.skipped == 2


@pytest.mark.parametrize("data, message", [
    ("[{", r"not JSON \(Expecting"),
    ('{"conversations": []}', "expected a JSON list of conversations, got dict"),
    ('[{"conversations": []}, 3, {"id": 1}]',
     r"2 items without a 'conversations' list \(items 1, 2, counting from 0\)"),
    ('[{"conversations": [{"from": "gpt", "value": "x"}]}]', "no conversation has a human turn with text"),
])
def test_a_bad_sharegpt_file(tmp_path, data, message):
    path = tmp_path / "sg.json"
    path.write_text(data)
    with pytest.raises(TraceError, match=message):
        read_prompts(str(path), fmt="sharegpt")


def scenario(tmp_path, workload: str):
    return parse_scenario(yaml.safe_load(f"name: t\nworkload: {workload}\n"), base_dir=str(tmp_path))


def test_the_workload_block(tmp_path):
    jsonl(tmp_path, [{"prompt": r} for r in ROWS])
    w = scenario(tmp_path, "{prompts: {file: p.jsonl}, output_tokens: 8}").workload
    assert w.prompts == PromptSource(file="p.jsonl", texts=tuple(ROWS)) and w.input_tokens is None  # own lengths
    assert scenario(tmp_path, "{input_tokens: 9, output_tokens: 8}").workload.prompts == PromptSource()  # prose
    w = scenario(tmp_path, "{prompts: {corpus: words}, input_tokens: 9, output_tokens: 8}").workload
    assert w.prompts.corpus == "words"
    mix = scenario(tmp_path, "{mix: [{name: a, weight: 1, prompts: {file: p.jsonl}, output_tokens: 4}, "
                             "{name: b, weight: 1, input_tokens: 9, output_tokens: 4}]}").workload.mix
    assert mix[0].workload.prompts.texts == tuple(ROWS) and mix[1].workload.prompts.file is None


@pytest.mark.parametrize("workload, problem", [
    ("{prompts: {file: nope.jsonl}, output_tokens: 8}", "workload.prompts.file: file not found: nope.jsonl"),
    ("{prompts: {file: bad.jsonl}, output_tokens: 8}", "workload.prompts.file: {dir}/bad.jsonl: not JSON on line 1"),
    ("{prompts: {file: p.jsonl, field: text}, output_tokens: 8}", "field 'text' missing in 4 rows (lines 1, 2, 3, 4)"),
    ("{prompts: {file: p.jsonl}, input_tokens: 9}", "workload: missing required key 'output_tokens'"),
    ("{prompts: {corpus: words}, output_tokens: 8}", "workload: missing required key 'input_tokens'"),
    ("{prompts: {corpus: poems}, input_tokens: 9, output_tokens: 8}",
     "workload.prompts.corpus: must be one of prose, words; got 'poems'"),
    ("{prompts: {corpus: words, file: p.jsonl}, input_tokens: 9, output_tokens: 8}",
     "workload.prompts.file: give either a corpus or a file, not both"),
    ("{prompts: {field: text}, input_tokens: 9, output_tokens: 8}", "workload.prompts: give file (a prompt file"),
    ("{prompts: {file: p.jsonl, format: sharegpt, field: q}, output_tokens: 8}",
     "workload.prompts.field: a ShareGPT file's prompt is each conversation's first human turn"),
    ("{prompts: {file: p.jsonl, format: csv}, output_tokens: 8}",
     "workload.prompts.format: must be one of jsonl, sharegpt; got 'csv'"),
    ("{prompts: {fil: p.jsonl}, input_tokens: 9, output_tokens: 8}", "unknown key 'fil'; did you mean 'file'?"),
    ("{prompts: {file: p.jsonl}, sessions: {first_input_tokens: 9, turn_input_tokens: 9, output_tokens: 8, "
     "turns: 2}}", "workload.prompts.file: a prompt file within sessions is not supported yet"),
    ("{mix: [{name: a, weight: 1, prompts: {file: nope.jsonl}, output_tokens: 4}]}",
     "workload.mix.a.prompts.file: file not found"),
])
def test_a_bad_prompts_block_is_named_by_its_key_path(tmp_path, workload, problem):
    jsonl(tmp_path, [{"prompt": r} for r in ROWS])
    (tmp_path / "bad.jsonl").write_text("{\n")
    with pytest.raises(ScenarioError) as err:
        scenario(tmp_path, workload)
    problem = problem.replace("{dir}", str(tmp_path))
    assert any(problem in p for p in err.value.problems), err.value.problems


def file_builder(api="chat", rows=ROWS, **kw) -> PromptBuilder:
    return PromptBuilder(api=api, source=PromptSource(file="p.jsonl", texts=tuple(rows)), **kw)


def user_text(p: Prompt) -> str:
    return str(p.messages[-1]["content"]) if p.messages is not None else str(p.text)


def test_a_file_prompt_as_it_is_behind_its_nonce():
    b, rng = file_builder(), random.Random(1)
    seen = set()
    for _ in range(40):
        p = b.build(None, rng)
        nonce, text = user_text(p).split(" ", 1)
        assert len(nonce) >= 9 and int(nonce, 16) >= 0 and text in ROWS  # the whole prompt, whitespace kept
        assert p.words == len(user_text(p).split()) and p.target_tokens == 0
        seen.add(text)
    assert seen == set(ROWS)
    same = file_builder(unique=False).build(None, random.Random(2))
    assert user_text(same) in ROWS
    with pytest.raises(ValueError, match="needs a prompt file"):
        PromptBuilder(api="chat").build(None, rng)


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_a_file_prompt_is_cut_or_padded_to_the_calibrated_length(api):
    """A fake server's count (1.3 tokens a word, 11 of template): after a few requests every prompt is within 1%
    of its target, cut at a whole word or padded with the file's next prompts."""
    rows = [" ".join(f"w{i}.{j}" for j in range(20 + 60 * i)) for i in range(8)]  # 20 to 440 words, each its own
    b, rng = file_builder(api, rows=rows, shared_prefix_tokens=10), random.Random(3)
    cut = padded = 0
    for i in range(60):
        target = rng.randint(150, 700)
        p = b.build(target, rng)
        text = user_text(p)
        words = text.split()
        assert p.words == len(words) + (10 if api == "chat" else 0)
        if api == "chat":
            assert p.messages[0] == {"role": "system", "content": b.shared_prefix} and len(p.messages) == 2
        else:
            assert text.startswith(b.shared_prefix + " ") and p.messages is None
            words = words[10:]
        own = words[1:]  # after the nonce: one prompt's start, then (padded) the next prompts in file order
        start = next(k for k, r in enumerate(rows) if r.split()[0] == own[0])
        whole = " ".join(rows[start:] + rows * 3).split()
        assert own == whole[:len(own)]
        cut += len(own) < len(rows[start].split())
        padded += len(own) > len(rows[start].split())
        reported = math.ceil(p.words * 1.3) + 11
        if i >= 5:
            assert abs(reported - target) / target < 0.01, (i, reported, target)
        b.observe(p, reported)
    assert cut > 5 and padded > 5, (cut, padded)


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_a_long_padded_file_prompt_is_spliced_and_escaped_once(api):
    """Padded past ``splice_min_words``: a view of the file's escaped text, whose body is what json.dumps makes."""
    b = file_builder(api, splice_min_words=200, shared_prefix_tokens=5)
    plain = file_builder(api, splice_min_words=1 << 62, shared_prefix_tokens=5)
    p, q = b.build(5_000, random.Random(4)), plain.build(5_000, random.Random(4))
    long = p.messages[-1]["content"] if api == "chat" else p.text
    assert isinstance(long, Spliced) and str(long) == user_text(q) and p.words == q.words
    body = openai.build_body(api, "m", p, 16, ignore_eos=True)
    flat = Prompt(q.messages, q.text, q.words, q.target_tokens)
    assert isinstance(body, SplicedBody) and bytes(body) == openai.build_body(api, "m", flat, 16, ignore_eos=True)


def test_a_corpus_view_is_json_string_content_of_its_words():
    c = Corpus(" ".join(ROWS))
    for first, n in ((0, 3), (2, c.n), (c.n - 2, 5), (5, 3 * c.n + 1)):
        text = c.words(first, n)
        assert len(text.split()) == n
        assert bytes(c.view(first, n)) == json.dumps(text)[1:-1].encode()
    assert c.view(0, 2).obj is c.view(3, 4).obj  # one buffer (until a longer prompt grows it)


def test_the_default_corpus_is_prose_and_the_word_list_is_what_it_was():
    prose = builtin("prose", 0)
    assert prose.n > 100_000 and '"' in prose.text and "\n" in prose.text and prose.text.isascii()
    assert builtin("prose", 0) is prose and builtin("prose", 1).text != prose.text  # the seed picks where it starts
    assert sorted(builtin("prose", 1).text.split()) == sorted(prose.text.split())  # the same book, turned round
    b = PromptBuilder(api="chat")
    assert b.corpus is prose
    # the word list as PromptBuilder drew it before prose became the default (same seed, same words)
    from harness.workload.corpus import _WORDS
    rng = random.Random("kneecap-corpus:3")
    assert builtin("words", 3).text == " ".join(rng.choice(_WORDS) for _ in range(1 << 16))
