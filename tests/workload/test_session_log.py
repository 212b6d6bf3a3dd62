"""Session logs (``harness.workload.session_log``): every accepted layout, turn order, think time, new-token
derivation, input-mode detection, compaction, and malformed files refused with file:line and a fix."""

from __future__ import annotations

import json
import random

import pytest

from harness.checker import Checker
from harness.workload.prompts import PromptBuilder
from harness.workload.session_log import ScriptedTurn, load_session_log, read_session_log
from harness.workload.sessions import Session, SessionSpec, sessions_from_spec
from harness.workload.traces import TraceError


def write(tmp_path, name: str, content: str | bytes | list[dict]) -> str:
    path = tmp_path / name
    if isinstance(content, list):
        content = "".join(json.dumps(r) + "\n" for r in content)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return str(path)


def shape(scripts) -> list[list[tuple[int, int, float]]]:
    return [[(t.input_tokens, t.output_tokens, round(t.think_s, 6)) for t in s] for s in scripts]


# -- layouts --------------------------------------------------------------------------------------------------

def test_the_original_jsonl_layout_still_reads(tmp_path):
    path = write(tmp_path, "s.jsonl", [
        {"session_id": "a1", "turn": 1, "input_tokens": 2100, "output_tokens": 180, "delay": 0},
        {"session_id": "a1", "turn": 2, "input_tokens": 2700, "output_tokens": 95, "delay": 1.8},
    ])
    assert read_session_log(path) == [(ScriptedTurn(2100, 180, 0.0), ScriptedTurn(420, 95, 1.8))]


@pytest.mark.parametrize("sid,inp,out,delay", [
    ("session_id", "input_tokens", "output_tokens", "delay"),
    ("conversation_id", "prompt_tokens", "completion_tokens", "delay_s"),
    ("session", "ContextTokens", "GeneratedTokens", "think_time_s"),
    ("Session_ID", "num_prompt_tokens", "num_output_tokens", "think_s"),  # names match case-insensitively
])
def test_accepted_column_names_in_jsonl_and_csv(tmp_path, sid, inp, out, delay):
    turns = ((1, 100, 10, 0), (2, 150, 20, 1.5), (3, 260, 5, 0.25))
    csv = f"{sid},turn,{inp},{out},{delay}\n" + "".join(f"x,{t},{i},{o},{d}\n" for t, i, o, d in turns)
    jsonl = [{sid: "x", "turn": t, inp: i, out: o, delay: d} for t, i, o, d in turns]
    want = [[(100, 10, 0.0), (40, 20, 1.5), (90, 5, 0.25)]]
    assert shape(read_session_log(write(tmp_path, "s.csv", csv))) == want
    assert shape(read_session_log(write(tmp_path, "s.jsonl", jsonl))) == want


def test_json_lines_are_recognised_by_content_whatever_the_extension(tmp_path):
    path = write(tmp_path, "requests.log", [{"session": 7, "prompt_tokens": 50, "completion_tokens": 5}])
    assert shape(read_session_log(path)) == [[(50, 5, 0.0)]]


def test_csv_cells_may_be_blank_where_optional_and_counts_may_be_floats(tmp_path):
    path = write(tmp_path, "s.csv", "session_id,prompt_tokens,completion_tokens,delay\n"
                                    "a,100.0,10,\n" "a,130,10.4,2\n")
    assert shape(read_session_log(path)) == [[(100, 10, 0.0), (20, 10, 2.0)]]


def test_sessions_keep_the_order_they_first_appear_in(tmp_path):
    rows = [{"session_id": s, "input_tokens": 10 * (i + 1), "output_tokens": 1} for i, s in enumerate("bab")]
    log = load_session_log(write(tmp_path, "s.jsonl", rows))
    assert log.ids == ("b", "a") and [len(s) for s in log.scripts] == [2, 1]


# -- order ----------------------------------------------------------------------------------------------------

def test_turn_numbers_order_interleaved_lines(tmp_path):
    rows = [{"session_id": "a", "turn": 3, "input_tokens": 400, "output_tokens": 10, "delay": 3},
            {"session_id": "b", "turn": 1, "input_tokens": 50, "output_tokens": 5},
            {"session_id": "a", "turn": 1, "input_tokens": 100, "output_tokens": 10},
            {"session_id": "a", "turn": 2, "input_tokens": 200, "output_tokens": 10, "delay": 2}]
    assert shape(read_session_log(write(tmp_path, "s.jsonl", rows))) == [
        [(100, 10, 0.0), (90, 10, 2.0), (190, 10, 3.0)], [(50, 5, 0.0)]]


def test_without_turn_numbers_timestamps_order_the_turns(tmp_path):
    rows = [{"session_id": "a", "timestamp": 20.0, "input_tokens": 300, "output_tokens": 10},
            {"session_id": "a", "timestamp": 10.0, "input_tokens": 100, "output_tokens": 10},
            {"session_id": "a", "timestamp": 14.0, "input_tokens": 200, "output_tokens": 10}]
    assert shape(read_session_log(write(tmp_path, "s.jsonl", rows))) == [[(100, 10, 0.0), (90, 10, 4.0),
                                                                          (90, 10, 6.0)]]


def test_without_turns_or_timestamps_file_order_is_turn_order(tmp_path):
    rows = [{"session_id": "a", "input_tokens": n, "output_tokens": 1} for n in (10, 30, 60)]
    log = load_session_log(write(tmp_path, "s.jsonl", rows))
    assert shape(log.scripts) == [[(10, 1, 0.0), (19, 1, 0.0), (29, 1, 0.0)]]
    assert any("no delay or timestamp column" in n for n in log.notes)  # think time 0 is said, not silent


# -- think time -----------------------------------------------------------------------------------------------

def test_think_time_is_the_gap_after_the_previous_call_ended(tmp_path):
    path = write(tmp_path, "s.csv", "session_id,turn,prompt_tokens,completion_tokens,timestamp,e2e_s\n"
                                    "a,1,100,10,1000.0,2.5\n" "a,2,200,10,1004.0,1.0\n" "a,3,300,10,1005.5,9\n")
    log = load_session_log(path)
    assert [t.think_s for t in log.scripts[0]] == [0.0, 1.5, 0.5]
    assert log.columns["duration"] == "e2e_s" and not any("over-estimate" in n for n in log.notes)


def test_durations_in_ms_and_overlapping_calls(tmp_path):
    path = write(tmp_path, "s.jsonl", [
        {"session_id": "a", "turn": 1, "input_tokens": 100, "output_tokens": 10, "start_time": 0, "latency_ms": 1500},
        {"session_id": "a", "turn": 2, "input_tokens": 200, "output_tokens": 10, "start_time": 1, "latency_ms": 100},
        {"session_id": "a", "turn": 3, "input_tokens": 300, "output_tokens": 10, "start_time": 3.1}])
    log = load_session_log(path)
    assert [round(t.think_s, 6) for t in log.scripts[0]] == [0.0, 0.0, 2.0]  # turn 2 began before turn 1 ended
    assert any("1 turns started before the previous call ended" in n for n in log.notes)


def test_without_durations_think_time_is_the_start_gap_and_that_is_noted(tmp_path):
    path = write(tmp_path, "s.jsonl", [
        {"session_id": "a", "input_tokens": 100, "output_tokens": 10, "timestamp": "2024-05-01T10:00:00Z"},
        {"session_id": "a", "input_tokens": 200, "output_tokens": 10, "timestamp": "2024-05-01T10:00:04.25Z"}])
    log = load_session_log(path)
    assert log.scripts[0][1].think_s == pytest.approx(4.25)
    assert any("over-estimates" in n for n in log.notes)


@pytest.mark.parametrize("a,b,gap", [
    ("2024-05-01 10:00:00.97996", "2024-05-01 10:00:02.47996", 1.5),  # space, 5 fractional digits (Azure traces)
    ("2024-05-01T12:00:00.123456789+02:00", "2024-05-01T10:00:01.5Z", 1.376543211),  # offsets, 9 digits
    ("2024-05-01T10:00:00-0130", "2024-05-01T11:30:02Z", 2.0),
    (1714557600.0, "1714557601.75", 1.75),
    (1714557600000, 1714557603000, 3.0),  # epoch milliseconds
])
def test_timestamp_spellings(tmp_path, a, b, gap):
    rows = [{"session_id": "a", "turn": k, "input_tokens": 10 * k, "output_tokens": 1, "timestamp": t}
            for k, t in ((1, a), (2, b))]
    assert read_session_log(write(tmp_path, "s.jsonl", rows))[0][1].think_s == pytest.approx(gap, abs=1e-6)


def test_an_explicit_delay_wins_over_timestamps(tmp_path):
    rows = [{"session_id": "a", "turn": k, "input_tokens": 10 * k, "output_tokens": 1, "timestamp": 100 * k,
             "delay_s": 0.5 * k} for k in (1, 2)]
    assert read_session_log(write(tmp_path, "s.jsonl", rows))[0][1].think_s == 1.0


# -- new tokens, input mode, compaction -----------------------------------------------------------------------

def whole_prompt_log(rng: random.Random, sessions: int, turns: int) -> tuple[list[dict], list[list[int]]]:
    rows, news = [], []
    for s in range(sessions):
        whole, out, new = rng.randint(500, 3000), 0, []
        for k in range(turns):
            if k:
                new.append(rng.randint(1, 400))
                whole += out + new[-1]
            else:
                new.append(whole)
            out = rng.randint(1, 300)
            rows.append({"session_id": f"s{s}", "prompt_tokens": whole, "completion_tokens": out})
        news.append(new)
    return rows, news


def test_whole_prompt_logs_are_detected_and_new_tokens_recovered(tmp_path):
    rows, news = whole_prompt_log(random.Random(1), 10, 6)
    log = load_session_log(write(tmp_path, "s.jsonl", rows))
    assert log.input_mode == "whole" and log.mode_detected and log.grow_share == 1.0
    assert [[t.input_tokens for t in s] for s in log.scripts] == news
    assert log.max_context_tokens == max(r["prompt_tokens"] + r["completion_tokens"] for r in rows)


def test_new_token_logs_are_detected_and_taken_as_they_are(tmp_path):
    rng = random.Random(2)
    rows = [{"session_id": f"s{s}", "input_tokens": rng.randint(1, 2000), "output_tokens": rng.randint(1, 200)}
            for s in range(10) for _ in range(6)]
    log = load_session_log(write(tmp_path, "s.jsonl", rows))
    assert log.input_mode == "new" and log.grow_share < 0.75
    assert [t.input_tokens for s in log.scripts for t in s] == [r["input_tokens"] for r in rows]
    contexts = []  # whole prompt + answer, rebuilt turn by turn
    for s in range(10):
        ctx = 0
        for r in rows[6 * s:6 * s + 6]:
            ctx += r["input_tokens"] + r["output_tokens"]
            contexts.append(ctx)
    assert log.max_context_tokens == max(contexts)


def test_the_caller_can_override_the_detected_mode(tmp_path):
    rows, _ = whole_prompt_log(random.Random(3), 3, 4)
    path = write(tmp_path, "s.jsonl", rows)
    log = load_session_log(path, input_mode="new")
    assert log.input_mode == "new" and not log.mode_detected
    assert [t.input_tokens for s in log.scripts for t in s] == [r["prompt_tokens"] for r in rows]
    with pytest.raises(ValueError, match="input_mode must be one of auto, whole, new"):
        load_session_log(path, input_mode="delta")


def test_a_shrinking_prompt_is_a_compaction_that_adds_up_to_the_logged_prompt(tmp_path):
    prompts = [1000, 1300, 1600, 1900, 2200, 2500, 400, 700]  # new tokens 200 each, compacted at turn 7
    rows = [{"session_id": "a", "prompt_tokens": p, "completion_tokens": 100} for p in prompts]
    log = load_session_log(write(tmp_path, "s.jsonl", rows))
    assert log.input_mode == "whole" and log.compactions == 1
    t = log.scripts[0][6]
    assert t.reset_tokens > 0 and t.reset_tokens + t.input_tokens == 400
    assert t.input_tokens == 200  # the message gets the log's median new tokens (at most half the prompt)
    assert [x.input_tokens for x in log.scripts[0][1:6]] == [200] * 5 and log.scripts[0][7].input_tokens == 200
    assert all(x.reset_tokens == 0 for i, x in enumerate(log.scripts[0]) if i != 6)


def test_a_prompt_that_grew_less_than_the_answer_gets_one_new_token_and_a_note(tmp_path):
    rows = [{"session_id": "a", "prompt_tokens": p, "completion_tokens": 500} for p in (1000, 1200, 1900)]
    log = load_session_log(write(tmp_path, "s.jsonl", rows), input_mode="whole")
    assert [t.input_tokens for t in log.scripts[0]] == [1000, 1, 200]
    assert any("less than the previous answer" in n for n in log.notes)


def test_zero_output_becomes_one_and_is_noted(tmp_path):
    log = load_session_log(write(tmp_path, "s.jsonl", [{"session_id": "a", "prompt_tokens": 9,
                                                        "completion_tokens": 0}]))
    assert log.scripts[0][0].output_tokens == 1 and any("0 output tokens" in n for n in log.notes)


def test_scripts_drive_a_session_with_the_existing_interface(tmp_path):
    rows, _ = whole_prompt_log(random.Random(4), 1, 4)
    script = read_session_log(write(tmp_path, "s.jsonl", rows))[0]
    session = Session(1, SessionSpec(), PromptBuilder(api="chat", seed=1), random.Random(1), script)
    maxes = []
    while (calls := session.next_turn()) is not None:
        maxes.append(calls[0].max_tokens)
        session.answer("ok", None, None)
    assert maxes == [r["completion_tokens"] for r in rows]


# -- malformed files ------------------------------------------------------------------------------------------

GOOD = "session_id,turn,prompt_tokens,completion_tokens,delay\n"


@pytest.mark.parametrize("name,content,expect", [
    ("s.csv", "", ["s.csv: the file is empty"]),
    ("s.csv", GOOD, ["s.csv: no requests after the header"]),
    ("s.csv", "turn,prompt_tokens,completion_tokens\n1,5,5\n", ["s.csv: no session id column (session_id, "
                                                                "conversation_id, session)", "columns are turn,"]),
    ("s.csv", "session_id,tokens,completion_tokens\na,5,5\n", ["no input-token column", "kneecap fit --input"]),
    ("s.jsonl", '{"session_id": "a", "prompt_tokens": 5}\n', ["no output-token column"]),
    ("s.csv", GOOD + "a,1,fifty,3,0\n", ["s.csv:2: column 'prompt_tokens' is 'fifty', expected a token count"]),
    ("s.csv", GOOD + "a,1,5,-3,0\n", ["s.csv:2: column 'completion_tokens' is '-3'", ">= 0"]),
    ("s.csv", GOOD + "a,1,5,3,0\na,1.5,9,3,0\n", ["s.csv:3: column 'turn' is 1.5, expected a whole turn number"]),
    ("s.csv", GOOD + "a,1,5,3,0\na,1,9,3,0\n", ["s.csv:3: session 'a' has turn 1 twice (also line 2)"]),
    ("s.csv", GOOD + "a,1,5,3,0\na,2,9,3,\n", ["s.csv:3: no 'delay' for a later turn of session 'a'", "0 if none"]),
    ("s.csv", GOOD + "a,1,5,3,0\n,2,9,3,1\n", ["s.csv:3: no 'session_id' on this line"]),
    ("s.csv", GOOD + "a,1,5,3,0\na,2,,3,1\n", ["s.csv:3: no 'prompt_tokens' on this line"]),
    ("s.csv", GOOD + "a,1,5,3,soon\n", ["s.csv:2: column 'delay' is 'soon', expected seconds before this turn"]),
    ("s.jsonl", '{"session_id": "a", "turn": 1, "prompt_tokens": 5, "completion_tokens": true}\n',
     ["s.jsonl:1: column 'completion_tokens' is True, expected a token count"]),
    ("s.jsonl", '{"session_id": "a", "prompt_tokens": 5, "completion_tokens": 1}\n{"session_id": \n',
     ["s.jsonl:2: invalid JSON"]),
    ("s.jsonl", '["a", 1, 2]\n', ["s.jsonl:1: expected a JSON object, got list"]),
    ("s.jsonl", '{"session_id": "a", "prompt_tokens": 5, "completion_tokens": 1, "timestamp": "yesterday"}\n',
     ["s.jsonl:1: column 'timestamp' is 'yesterday', expected the request's start time", "ISO 8601"]),
    ("s.jsonl", '{"session_id": "a", "prompt_tokens": 5, "completion_tokens": 1, "timestamp": "2024-13-45 10:00"}\n',
     ["s.jsonl:1: column 'timestamp' is '2024-13-45 10:00'"]),
    ("s.csv", "session_id,turn,prompt_tokens,completion_tokens,timestamp\na,1,5,1,20\na,2,9,1,10\n",
     ["s.csv:3: session 'a' turn 2 starts 10 s before the turn before it (line 2)"]),
    ("s.csv", "session_id,prompt_tokens,completion_tokens,timestamp\na,5,1,20\na,9,1,\n",
     ["s.csv:3: no 'timestamp' on this line; every turn needs its start time"]),
    ("s.csv", b"session_id,prompt_tokens,completion_tokens\na,5,1\n\x00\x01", ["s.csv is not text (a NUL byte"]),
    ("s.jsonl", b"\x1f\x8b\x08\x00binary", ["s.jsonl is not UTF-8 text (byte 0x8b"]),
    ("s.csv", 'session_id,prompt_tokens,completion_tokens\n"' + "1" * 200_000 + '"\n', ["s.csv:2: not valid CSV"]),
])
def test_malformed_logs_are_refused_with_file_line_and_fix(tmp_path, name, content, expect):
    with pytest.raises(TraceError) as err:
        read_session_log(write(tmp_path, name, content))
    for part in expect:
        assert part in str(err.value)
    assert str(tmp_path) in str(err.value)


def test_a_missing_file_is_a_trace_error(tmp_path):
    with pytest.raises(TraceError, match="file not found"):
        read_session_log(str(tmp_path / "nope.jsonl"))


def test_the_scenario_key_reports_a_bad_log_under_its_path(tmp_path):
    write(tmp_path, "s.csv", GOOD + "a,1,fifty,3,0\n")
    check = Checker(str(tmp_path))
    assert sessions_from_spec({"log": "s.csv"}, "workload.sessions", check) is None
    assert len(check.problems) == 1
    assert check.problems[0].startswith("workload.sessions.log: ") and "s.csv:2: column 'prompt_tokens'" in \
        check.problems[0]
