"""ShareGPT conversations as sessions (``harness.workload.session_sharegpt``): the turns a good file gives, the
conversations skipped and counted, every malformed item named, the scenario keys, and a session sending the texts."""

from __future__ import annotations

import json
import random

import pytest
import yaml

from harness.scenario import ScenarioError, parse_scenario
from harness.workload.prompts import PromptBuilder
from harness.workload.session_log import ScriptedTurn
from harness.workload.session_sharegpt import load_sharegpt_sessions, word_tokens
from harness.workload.sessions import Session, SessionSpec
from harness.workload.traces import TraceError

GOOD = [
    {"id": "c1", "conversations": [
        {"from": "human", "value": "  Explain \"KV cache\" briefly.\n"},
        {"from": "gpt", "value": "It stores keys and values of past tokens."},
        {"from": "human", "value": "Résumé — in one line? \U0001f642"},
        {"from": "gpt", "value": "Reuse attention state."}]},
    {"conversations": [{"from": "user", "value": "Hi"}, {"from": "assistant", "value": "Hello there friend"}]},
]


def write(tmp_path, data, name="sg.json") -> str:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return str(path)


def test_each_conversation_is_a_session_of_its_user_texts_and_answer_lengths(tmp_path):
    log = load_sharegpt_sessions(write(tmp_path, GOOD))
    assert log.scripts == (
        (ScriptedTurn(4, 8, text='Explain "KV cache" briefly.'),
         ScriptedTurn(6, 3, text="Résumé — in one line? \U0001f642")),
        (ScriptedTurn(1, 3, text="Hi"),))
    assert log.ids == ("c1", "1") and log.input_mode == "new" and log.max_context_tokens == 4 + 8 + 6 + 3
    assert log.notes == ("lengths are word estimates (1 token a word); no think time is logged",)
    assert word_tokens("") == 1 and word_tokens(" a\tb\nc ") == 3


def test_conversations_that_cannot_be_replayed_are_skipped_and_counted(tmp_path):
    h, g = ({"from": "human", "value": "q"}, {"from": "gpt", "value": "a"})
    data = [*GOOD,
            {"conversations": []},  # empty
            {"conversations": [g, h, g]},  # opened by the model
            {"conversations": [g]},
            {"conversations": [{"from": "system", "value": "be nice"}, h, g]},  # another role
            {"conversations": [h, h, g]},  # one side twice
            {"conversations": [{"from": "human", "value": "  "}, g]},  # empty user message
            {"conversations": [h]},  # nothing answered
            {"conversations": [h, g, h]},  # the last question unanswered: left out
            {"conversations": [h, {"from": "gpt", "value": ""}]}]  # an empty answer: 1 token
    log = load_sharegpt_sessions(write(tmp_path, data))
    assert [len(s) for s in log.scripts] == [2, 1, 1, 1]
    assert log.scripts[3] == (ScriptedTurn(1, 1, text="q"),)
    assert log.notes == (
        "1 conversation empty: skipped", "2 conversations opened by the model: skipped",
        "1 conversation with another role than human/user and gpt/assistant: skipped",
        "1 conversation with one side twice in a row: skipped", "1 conversation with an empty user message: skipped",
        "1 conversation with no answered user message: skipped",
        "1 last user message without an answer: left out", "1 empty model message: an answer of 1 token",
        "lengths are word estimates (1 token a word); no think time is logged")


def test_every_malformed_item_is_named(tmp_path):
    data = [GOOD[0], {"conversation": []}, "text",
            {"conversations": [{"from": "human", "value": "q"}, {"from": "gpt"}]},
            {"conversations": [7, {"from": 1, "value": "a"}]}, {"conversations": {"from": "human"}}]
    with pytest.raises(TraceError) as err:
        load_sharegpt_sessions(write(tmp_path, data))
    assert str(err.value) == (
        f"{tmp_path}/sg.json: 3 items without a 'conversations' list (items 1, 2, 5); 3 messages not an object with "
        "text 'from' and 'value' (item 3 message 1, item 4 message 0, item 4 message 1), counting from 0; a ShareGPT "
        'file is one JSON list of {"conversations": [{"from": "human", "value": "..."}, {"from": "gpt", ...}, ...]}')


@pytest.mark.parametrize("data, message", [
    ("[{", "not JSON"),
    ({"conversations": []}, "expected a JSON list of conversations, got dict"),
    ([{"conversations": []}, {"conversations": [{"from": "gpt", "value": "a"}]}],
     "no conversation to replay as a session (2 conversations; each needs a human turn answered by a gpt turn"),
])
def test_a_file_with_nothing_to_replay_is_refused(tmp_path, data, message):
    with pytest.raises(TraceError) as err:
        load_sharegpt_sessions(write(tmp_path, data))
    assert message in str(err.value)


def scenario(tmp_path, workload: str):
    return parse_scenario(yaml.safe_load(f"name: t\nworkload: {workload}\n"), base_dir=str(tmp_path))


def test_the_scenario_keys(tmp_path):
    write(tmp_path, GOOD)
    w = scenario(tmp_path, "{sessions: {log: sg.json, format: sharegpt, max_context_tokens: 4000, "
                           "think_time_s: 2}, unique_prompts: false}").workload
    assert w.sessions.scripts == load_sharegpt_sessions(str(tmp_path / "sg.json")).scripts
    assert w.sessions.think_time_s.sample(random.Random(1)) == 2 and not w.unique_prompts


@pytest.mark.parametrize("sessions, problem", [
    ("{log: sg.json, format: sharegpt, input_mode: new}", "workload.sessions.input_mode: a ShareGPT file's turns are"),
    ("{log: sg.json, format: sharegpt, turns: 3}", "workload.sessions: give either log or distributions, not both "
                                                   "(remove turns)"),
    ("{log: sg.json, think_time_s: 1}", "(remove think_time_s)"),
    ("{log: sg.json, format: xml}", "workload.sessions.format: must be one of requests, sharegpt; got 'xml'"),
    ("{format: sharegpt, turns: 2}", "workload.sessions.format: format says how to read a session log"),
    ("{log: bad.json, format: sharegpt}", "workload.sessions.log: {dir}/bad.json: 1 item without a 'conversations'"),
])
def test_a_bad_sessions_block_is_named_by_its_key_path(tmp_path, sessions, problem):
    write(tmp_path, GOOD)
    write(tmp_path, [{}], "bad.json")
    with pytest.raises(ScenarioError) as err:
        scenario(tmp_path, f"{{sessions: {sessions}}}")
    problem = problem.replace("{dir}", str(tmp_path))
    assert any(problem in p for p in err.value.problems), err.value.problems


@pytest.mark.parametrize("unique", [True, False])
def test_a_session_sends_the_texts_after_the_conversation_so_far(tmp_path, unique):
    script = load_sharegpt_sessions(write(tmp_path, GOOD)).scripts[0]
    builder = PromptBuilder(api="chat", seed=1, unique=unique, shared_prefix_tokens=3)
    session = Session(1, SessionSpec(), builder, random.Random(1), script)
    first = session.next_turn()[0]
    system, user = first.messages
    assert system["role"] == "system" and user["role"] == "user" and first.max_tokens == 8
    if unique:
        nonce, text = user["content"].split(" ", 1)
        assert len(nonce) >= 9 and text == 'Explain "KV cache" briefly.'
    else:
        assert user["content"] == 'Explain "KV cache" briefly.'
    session.answer("served answer", None, None)
    second = session.next_turn()[0]
    assert second.messages == [system, user, {"role": "assistant", "content": "served answer"},
                               {"role": "user", "content": "Résumé — in one line? \U0001f642"}]
    assert second.max_tokens == 3 and second.turn == 2
    session.answer("x", None, None)
    assert session.next_turn() is None and session.done
