"""Token-exact trace blocks (``workload.token_blocks``): calibrated against a real byte-level BPE tokenizer trained
here on the prose corpus (Hugging Face's ``tokenizers``, the same library vLLM's tokenizers run on), every trace
prompt counts exactly its planned tokens; a tokenizer that cannot answer leaves the blocks approximate, saying why."""

from __future__ import annotations

import pathlib

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers

from harness.client.tokenize import file_tokenizer
from harness.workload.prefix_trace import read_trace
from harness.workload.prompts import PromptBuilder
from harness.workload.token_blocks import CANDIDATES, BlockText, calibrate, single_token_words

ROOT = pathlib.Path(__file__).resolve().parents[2]
WORDS = PromptBuilder(api="completions", seed=1).corpus.words(0, CANDIDATES).split()


@pytest.fixture(scope="module")
def tokenizer_file(tmp_path_factory) -> str:
    """A 2,000-token byte-level BPE (GPT-2's scheme) with a BOS, trained on the corpus: ~0.3 s."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    corpus = PromptBuilder(api="completions", seed=1).corpus
    tok.train_from_iterator([corpus.words(i, 500) for i in range(0, 40_000, 500)], trainers.BpeTrainer(
        vocab_size=2000, special_tokens=["<s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(path))
    return str(path)


def test_every_trace_prompt_counts_its_planned_tokens_on_the_tokenizer(tokenizer_file):
    tokenize = file_tokenizer(tokenizer_file)
    words = calibrate(tokenize, WORDS, chat=False)
    assert words.exact and (words.before, words.after) == (1, 0), words.note  # the BOS
    assert words.note.startswith("token-exact: ") and 100 < len(words.digits) < len(set(WORDS))
    reqs = read_trace(str(ROOT / "scenarios" / "traces" / "mooncake_sample.jsonl"), 64)
    blocks = BlockText(words, 64, max(max(r.hash_ids) for r in reqs))
    for req in reqs[:60]:
        ids, _ = tokenize(blocks.prompt(req.hash_ids, req.input_tokens, "s1"), True)
        assert len(ids) == 1 + req.input_tokens
    # equal ids: equal tokens, block for block
    a, b = (tokenize(blocks.prompt((5, i), 128, "s1"), False)[0] for i in (6, 7))
    assert a[:64] == b[:64] and a[64:] != b[64:]


def test_words_are_read_from_pieces_of_either_kind():
    assert single_token_words(["the", "cache", "a"], ["Ġthe", "Ġca", "che", "Ġa"]) == ["the", "a"]
    assert single_token_words(["the", "cache"], ["▁the", "▁cache"]) == ["the", "cache"]
    assert single_token_words(["the", "cache"], ["the", "cache"]) == []  # no word starts shown: none


def test_a_tokenizer_that_cannot_answer_leaves_the_blocks_approximate_saying_why():
    def down(what, special):
        raise OSError("http://127.0.0.1:9/tokenize answered HTTP 404")

    words = calibrate(down, WORDS, chat=True)
    assert not words.exact and words.text == tuple(WORDS)
    assert words.note == ("approximate: the tokenizer did not answer (http://127.0.0.1:9/tokenize answered HTTP "
                          "404); a word is about a token")
    no_pieces = calibrate(lambda what, special: ([1] * len(str(what).split()), None), WORDS, chat=False)
    assert no_pieces.note.startswith("approximate: the tokenizer gives no pieces")


def test_a_file_that_is_not_a_tokenizer_is_named(tmp_path):
    from harness.scenario import ScenarioError, load_scenario

    (tmp_path / "t.jsonl").write_text('{"timestamp": 0, "input_length": 70, "output_length": 8, "hash_ids": [1, 2]}\n')
    (tmp_path / "tok.json").write_text('["not", "a", "tokenizer"]')
    path = tmp_path / "s.yaml"
    path.write_text("name: t\nworkload:\n  trace: {file: t.jsonl, block_tokens: 64, tokenizer: tok.json}\n")
    with pytest.raises(ScenarioError, match=r"workload.trace.tokenizer: tok.json is not a tokenizer.json"):
        load_scenario(str(path))
