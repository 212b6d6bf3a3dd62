"""Long prompts: built once per worker, spliced into request bodies byte-for-byte as json.dumps would, calibrated.

Pure: no sockets. The reference for every body is the old path, ``json.dumps`` of the same request with the prompt's
text as a plain ``str``; the spliced body must parse (as a server does) to the same object, for each API.
"""

from __future__ import annotations

import json
import math
import random

import pytest

from harness.client import anthropic, apis, openai, responses
from harness.endpoint import Endpoint
from harness.workload.prompts import SPLICE_MIN_WORDS, Prompt, PromptBuilder, Spliced, SplicedBody, encode_body


def plain(prompt: Prompt) -> Prompt:
    """The same prompt with every Spliced text as the str it stands for (what the old path sent)."""
    msgs = None if prompt.messages is None else [{**m, "content": str(m["content"])} for m in prompt.messages]
    return Prompt(msgs, None if prompt.text is None else str(prompt.text), prompt.words, prompt.target_tokens)


BUILD = {
    "chat": lambda p, extra: openai.build_body("chat", "m", p, 64, ignore_eos=True, extra=extra, continuous_usage=True),
    "completions": lambda p, extra: openai.build_body("completions", "m", p, 64, ignore_eos=False, extra=extra),
    "responses": lambda p, extra: responses.build_responses_body("m", p, 64, extra=extra),
    "messages": lambda p, extra: anthropic.build_messages_body("m", p, 64, extra=extra),
}


@pytest.mark.parametrize("api", sorted(BUILD))
@pytest.mark.parametrize("shared_prefix", [0, 300])
def test_a_spliced_body_is_what_json_dumps_made(api, shared_prefix):
    b = PromptBuilder(api=api, shared_prefix_tokens=shared_prefix, seed=3)
    extra = {"temperature": 0.5, "metadata": {"note": "ünïcode \"quoted\"\n"}}  # escaping around the splice
    for target in (SPLICE_MIN_WORDS + shared_prefix + 10, 300_000):
        prompt = b.build(target, random.Random(target))
        spliced, reference = BUILD[api](prompt, extra), BUILD[api](plain(prompt), extra)
        assert isinstance(spliced, SplicedBody) and isinstance(reference, bytes)
        assert bytes(spliced) == reference  # byte for byte, so also what a server parses
        assert json.loads(bytes(spliced)) == json.loads(reference) and len(spliced) == len(reference)
        # the long text is sent from the shared corpus, not a copy: one big buffer, a view
        big = [p for p in spliced.parts if len(p) > 10_000]
        assert len(big) == 1 and isinstance(big[0], memoryview)


def test_embeddings_and_a_short_prompt_keep_the_plain_path():
    b = PromptBuilder(api="completions")
    short = b.build(SPLICE_MIN_WORDS // 2, random.Random(1))  # below it: a str
    assert isinstance(short.text, str) and isinstance(BUILD["completions"](short, None), bytes)
    long = b.build(SPLICE_MIN_WORDS * 2, random.Random(2))
    ex = apis.exchange(Endpoint(api="embeddings", model="m"), [long, short], 1)
    assert json.loads(bytes(ex.body))["input"] == [str(long.text), short.text]


@pytest.mark.parametrize("api", ["chat", "completions"])
@pytest.mark.parametrize("unique", [True, False])
def test_a_spliced_prompt_is_the_plain_paths_text(api, unique):
    """Same seed, same rng: the same words at the same corpus offset as the plain path joins (wrapping round the
    65,536-word corpus at 200k words), the same nonce; only the type differs."""
    spliced = PromptBuilder(api=api, unique=unique, shared_prefix_tokens=50, seed=5)
    joined = PromptBuilder(api=api, unique=unique, shared_prefix_tokens=50, seed=5, splice_min_words=1 << 62)
    r1, r2 = random.Random(9), random.Random(9)
    for target in (SPLICE_MIN_WORDS + 60, 200_000, 70_000):
        a, b = spliced.build(target, r1), joined.build(target, r2)
        assert plain(a) == b and a.words == b.words
        long = a.messages[-1]["content"] if api == "chat" else a.text
        assert isinstance(long, Spliced) and isinstance(b.messages[-1]["content"] if api == "chat" else b.text, str)


def test_prompts_share_one_corpus_buffer():
    b = PromptBuilder(api="chat")
    rng = random.Random(0)
    one, two = (b.build(200_000, rng).messages[-1]["content"] for _ in range(2))
    assert one.parts[1].obj is two.parts[1].obj  # the same buffer, viewed twice
    assert one.parts[0] != two.parts[0]  # and a nonce of its own each


def test_the_shared_corpus_grows_by_whole_cycles_and_keeps_old_views_valid():
    b = PromptBuilder(api="completions", unique=False)
    small = b.build(100_000, random.Random(0)).text
    before = small.parts[-1].obj
    big = b.build(1_000_000, random.Random(0)).text
    assert big.parts[-1].obj is not before and len(str(big).split()) == 1_000_000
    assert str(small).split() == str(big).split()[:100_000]  # the old view still reads the old (same) words


def test_a_body_whose_text_holds_the_mark_is_refused():
    from harness.workload import prompts

    text = Spliced((b"x" * 10,))
    with pytest.raises(ValueError, match="splice mark"):
        encode_body({"a": text, "b": prompts._MARK})
    with pytest.raises(TypeError, match="not JSON serializable"):
        encode_body({"a": object()})


@pytest.mark.parametrize("per_word,overhead", [(1.0, 7), (1.3, 12), (0.77, 3)])
def test_calibration_hits_a_1m_token_target_within_1_percent(per_word, overhead):
    """A fake server's count (its own tokens per word, a template's overhead); targets vary around 1M tokens, so
    the calibration must vary the word count per target, from one shared corpus."""
    b = PromptBuilder(api="chat")
    rng = random.Random(7)
    errors = []
    for i in range(12):
        target = int(1_000_000 * (0.9 + 0.2 * rng.random()))
        prompt = b.build(target, rng)
        words = len(str(prompt.messages[-1]["content"]).split())  # what the server's split counts
        assert words == prompt.words
        reported = math.ceil(words * per_word) + overhead
        if i >= 2:  # the first two learn the ratio
            errors.append(abs(reported - target) / target)
        b.observe(prompt, reported)
    assert max(errors) < 0.01, errors


def test_the_long_context_scenario_fits_the_long_preset():
    """scenarios/long-context.yaml validates and runs against ``kneecap sim --preset long``: its prompts and answers
    fit the context window, every user's context fits the KV cache, its body fits the simulator's limit."""
    import os

    from harness.scenario import load_scenario
    from harness.sim.presets import PRESETS
    from harness.sim.server import SimConfig, body_limit

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    s = load_scenario(os.path.join(root, "scenarios", "long-context.yaml"))
    long = PRESETS["long"]
    assert s.endpoint.model == "sim-long" and long.max_model_len >= 1 << 20
    n_in, n_out = s.workload.input_tokens.sample(random.Random(0)), s.workload.output_tokens.sample(random.Random(0))
    assert n_in == 262_144 and n_in + n_out <= long.max_model_len
    assert min(s.load.max, long.max_num_seqs) * (n_in + n_out) <= long.kv_cache_tokens
    floor = [t for t in s.slo if t.metric == "tokens_per_s_per_user"]
    assert [(t.percentile, t.op, t.value) for t in floor] == [(5.0, ">=", 60.0)]
    prompt = PromptBuilder(api="chat").build(long.max_model_len - 1024, random.Random(0))
    assert len(BUILD["chat"](prompt, None)) < body_limit(SimConfig(engine=long)) == 16 << 20
