"""Sessions (harness/workload/sessions.py): the history each turn sends, compaction, fan-out, seeding, the spec."""

from __future__ import annotations

import itertools
import random

import pytest

from harness.checker import Checker
from harness.workload.lengths import Fixed
from harness.workload.prompts import PromptBuilder
from harness.workload.session_log import ScriptedTurn
from harness.workload.sessions import SessionSampler, SessionSpec, sessions_from_spec, turn_bucket, turn_labels


def _spec(**kw) -> SessionSpec:
    base = dict(turns=Fixed(5), first_input_tokens=Fixed(300), turn_input_tokens=Fixed(50), output_tokens=Fixed(20))
    return SessionSpec(**{**base, **kw})


def _run(session, answer=lambda c: f" answer to turn {c.turn}"):
    """Drive a session as LLMUser does, the server reporting usage = words + chat overhead."""
    sent = []
    while (turn := session.next_turn()) is not None:
        sent.append(turn)
        c = turn[0]
        prompt = sum(len(m["content"].split()) + 4 for m in c.messages) + 3
        session.answer(answer(c), prompt, c.max_tokens)
    return sent


def test_each_turn_sends_the_exact_conversation_so_far():
    b = PromptBuilder(api="chat", shared_prefix_tokens=40, seed=1)
    s = SessionSampler(_spec(), b, seed=1, stream=1).new_session()
    sent = _run(s)
    assert [t[0].turn for t in sent] == [1, 2, 3, 4, 5]
    for prev, cur in itertools.pairwise(sent):
        p, c = prev[0].messages, cur[0].messages
        assert c[:len(p)] == p  # the previous prompt, unchanged
        assert c[len(p)] == {"role": "assistant", "content": f" answer to turn {prev[0].turn}"}  # as streamed
        assert c[len(p) + 1]["role"] == "user" and len(c) == len(p) + 2
    first_user = sent[0][0].messages[1]["content"]
    assert sent[0][0].messages[0]["role"] == "system"
    nonce = first_user.split()[0]
    assert all(nonce not in m["content"] for t in sent[1:] for m in t[0].messages[2:])  # only message 1 is unique


def test_sessions_are_distinct_and_seeded():
    def texts(seed):
        b = PromptBuilder(api="chat", seed=seed)
        sampler = SessionSampler(_spec(turns=Fixed(2)), b, seed=seed, stream=7)
        return [[m["content"] for t in _run(sampler.new_session()) for m in t[0].messages] for _ in range(3)]

    a = texts(3)
    assert a == texts(3)
    assert a != texts(4)
    assert len({s[0] for s in a}) == 3  # each session's first message differs


def test_compaction_replaces_the_history_with_a_fresh_summary():
    b = PromptBuilder(api="chat", shared_prefix_tokens=40, seed=1)
    spec = _spec(turns=Fixed(8), max_context_tokens=600, compaction_keep_tokens=200)
    s = SessionSampler(spec, b, seed=1, stream=1).new_session()
    sent = _run(s)
    compacted = [t[0] for t in sent if t[0].compacted]
    assert compacted and s.compactions == len(compacted)
    c = compacted[0]
    before = sent[c.turn - 2][0].messages
    assert c.messages[0] == before[0]  # the shared system prompt survives
    assert c.messages[1] != before[1]  # a new summary: not the old first message (a cache miss)
    words = sum(len(m["content"].split()) for m in c.messages[:-1])
    assert words == pytest.approx(200, abs=2)  # keep_tokens long (the builder's calibration is 1 word ~ 1 token)
    for t in sent:
        prompt = sum(len(m["content"].split()) + 4 for m in t[0].messages) + 3
        assert prompt + t[0].max_tokens <= 600 + 60  # within the context window, give or take the template


def test_a_full_context_without_compaction_ends_the_session():
    b = PromptBuilder(api="chat", seed=1)
    s = SessionSampler(_spec(turns=Fixed(50), max_context_tokens=500), b, seed=1, stream=1).new_session()
    sent = _run(s)
    assert s.ended_full and 1 < len(sent) < 50 and s.turns == len(sent) and s.done


def test_parallel_calls_share_the_history_and_only_the_first_answer_joins_it():
    b = PromptBuilder(api="chat", seed=1)
    s = SessionSampler(_spec(turns=Fixed(3), parallel_calls=Fixed(3)), b, seed=1, stream=1).new_session()
    sent = _run(s)
    assert [len(t) for t in sent] == [1, 3, 3]
    for turn in sent[1:]:
        hist = turn[0].messages[:-1]
        assert all(c.messages[:-1] == hist for c in turn)
        assert len({c.messages[-1]["content"] for c in turn}) == 3  # each sub-call has its own message
        assert [c.call for c in turn] == [0, 1, 2] and turn[0].think_s >= 0 and turn[1].think_s == 0
    assert sent[2][0].messages[len(sent[1][0].messages)]["content"] == " answer to turn 2"


def test_completions_sessions_concatenate_text():
    b = PromptBuilder(api="completions", seed=1)
    s = SessionSampler(_spec(turns=Fixed(3)), b, seed=1, stream=1).new_session()
    texts = []
    while (turn := s.next_turn()) is not None:
        texts.append(turn[0].text)
        s.answer(" the answer", None, None)
    assert texts[1].startswith(texts[0] + " the answer ") and texts[2].startswith(texts[1] + " the answer ")


def test_think_time_and_scripted_turns():
    b = PromptBuilder(api="chat", seed=1)
    script = (ScriptedTurn(500, 10), ScriptedTurn(80, 12, 1.5), ScriptedTurn(40, 5, 0.25))
    s = SessionSampler(SessionSpec(scripts=(script,)), b, seed=1, stream=1).new_session()
    sent = _run(s)
    assert [(t[0].max_tokens, t[0].think_s) for t in sent] == [(10, 0.0), (12, 1.5), (5, 0.25)]
    assert len(sent[2][0].messages[-1]["content"].split()) == 40


def test_turn_buckets():
    edges = (1, 2, 5, 17)
    labels = turn_labels(edges)
    assert labels == ["1", "2-4", "5-16", "17+"]
    assert [turn_bucket(t, edges, labels) for t in (1, 2, 4, 5, 16, 17, 300)] == \
        ["1", "2-4", "2-4", "5-16", "5-16", "17+", "17+"]
    assert turn_labels((1, 3)) == ["1-2", "3+"]


@pytest.mark.parametrize("node, words", [
    ({"first_input_tokens": 100, "turn_input_tokens": 10, "output_tokens": 5}, "missing required key 'turns'"),
    ({"turns": 3, "first_input_tokens": 100, "turn_input_tokens": 10, "output_tokens": 5, "think_time_s": -1},
     "think_time_s.value: must be >= 0"),
    ({"turns": 3, "first_input_tokens": 100, "turn_input_tokens": 10, "output_tokens": 5, "think_tim_s": 1},
     "did you mean 'think_time_s'"),
    ({"turns": 3, "first_input_tokens": 100, "turn_input_tokens": 10, "output_tokens": 5,
      "compaction": {"keep_tokens": 10}}, "compaction needs max_context_tokens"),
    ({"turns": 3, "first_input_tokens": 100, "turn_input_tokens": 10, "output_tokens": 5, "turn_buckets": [2, 5]},
     "increasing turn numbers starting at 1"),
    ({"log": "x.jsonl", "turns": 3}, "give either log or distributions"),
])
def test_bad_session_specs_name_the_key(node, words, tmp_path):
    check = Checker(str(tmp_path))
    assert sessions_from_spec(node, "workload.sessions", check) is None
    assert any(words in p for p in check.problems), check.problems


def test_think_time_distribution_in_seconds():
    check = Checker()
    spec = sessions_from_spec({"turns": 3, "first_input_tokens": 100, "turn_input_tokens": 10, "output_tokens": 5,
                               "think_time_s": {"dist": "lognormal", "median": 0.5, "sigma": 0.5, "max": 2.5}},
                              "s", check)
    assert not check.problems
    rng = random.Random(1)
    draws = sorted(spec.think_time_s.sample(rng) for _ in range(2001))
    assert draws[1000] == pytest.approx(0.5, rel=0.1) and max(draws) <= 2.5 and min(draws) > 0


def test_a_logged_compaction_replaces_the_history():
    b = PromptBuilder(api="chat", seed=1)
    script = (ScriptedTurn(500, 10), ScriptedTurn(80, 12, 0.5), ScriptedTurn(40, 5, 0.5, reset_tokens=200))
    s = SessionSampler(SessionSpec(scripts=(script,)), b, seed=1, stream=1).new_session()
    sent = _run(s)
    third = sent[2][0]
    assert third.compacted and not sent[1][0].compacted and s.compactions == 1
    assert third.messages[0] != sent[1][0].messages[0]  # a fresh summary, not the old history
    assert sum(len(m["content"].split()) for m in third.messages) == pytest.approx(200 + 40, abs=3)
