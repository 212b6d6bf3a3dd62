"""Prefix-structured traces (``workload.prefix_trace``): the Mooncake format read with every problem named, block text
the same wherever an id recurs, and the ideal prefix-cache ceiling of a hand-made trace equal to its hand count."""

from __future__ import annotations

import json
import pathlib

import pytest

from harness.workload.prefix_trace import TraceRequest, ideal_cached, read_trace
from harness.workload.token_blocks import BlockText, approximate
from harness.workload.traces import TraceError

ROOT = pathlib.Path(__file__).resolve().parents[2]
WORDS = approximate([f"w{i}" for i in range(500)], "a test")


def test_the_shipped_sample_reads_and_its_ceiling_is_its_documented_share():
    reqs = read_trace(str(ROOT / "scenarios" / "traces" / "mooncake_sample.jsonl"), 64)
    assert len(reqs) == 300 and reqs[0].hash_ids[:3] == (0, 1, 2)
    share = sum(ideal_cached(reqs, 64, 16)) / sum(r.input_tokens for r in reqs)
    assert share == pytest.approx(0.66, abs=0.005)  # scenarios/traces/README.md says 66%


def test_a_bailian_trace_reads_in_ms_with_its_session_fields_checked(tmp_path):
    reqs = read_trace(str(ROOT / "scenarios" / "traces" / "bailian_sample.jsonl"), 16, "bailian")
    assert len(reqs) == 300 and reqs[0].t_ms == 28.0  # seconds in the file, ms here
    share = sum(ideal_cached(reqs, 16, 16)) / sum(r.input_tokens for r in reqs)
    assert share == pytest.approx(0.67, abs=0.005)  # scenarios/traces/README.md says 67%
    good = {"chat_id": 3, "parent_chat_id": -1, "timestamp": 1.5, "input_length": 20, "output_length": 8,
            "type": "text", "turn": 1, "hash_ids": [1, 2]}
    path = tmp_path / "b.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in (good, {**good, "parent_chat_id": -2}, {**good, "turn": "2"},
                                                      {**good, "timestamp": -1})) + "\n")
    with pytest.raises(TraceError) as err:
        read_trace(str(path), 16, "bailian")
    for expected in ("line 2: parent_chat_id must be an integer (-1: no parent), got -2",
                     "line 3: turn must be an integer >= 0, got '2'", "line 4: timestamp must be a number of s >= 0"):
        assert expected in str(err.value), str(err.value)


def test_every_malformed_line_is_named(tmp_path):
    good = {"timestamp": 0, "input_length": 130, "output_length": 8, "hash_ids": [1, 2, 3]}
    lines = [good, {**good, "hash_ids": [1, 2]}, {**good, "input_length": 0}, ["x"], {"timestamp": 5},
             {**good, "hash_ids": [1, -2, 3]}]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n{oops\n")
    with pytest.raises(TraceError) as err:
        read_trace(str(path), 64)
    text = str(err.value)
    for expected in ("line 2: 2 hash_ids for input_length 130: 3 blocks of 64 tokens expected",
                     "line 3: input_length must be an integer of tokens >= 1, got 0",
                     "line 4: expected an object, got list", "line 5: missing input_length, output_length, hash_ids",
                     "line 6: hash_ids must be a list of integers >= 0", "line 7: not JSON"):
        assert expected in text, text
    assert "line 1:" not in text


def test_equal_ids_give_equal_text_and_different_ids_or_salts_different_text():
    blocks = BlockText(WORDS, 16, 1000)
    a, again, b = (blocks.block(i, "s1") for i in (7, 7, 8))
    assert a == again and a != b and len(a) == 16
    assert blocks.block(7, "s2") != a  # another run's salt: no shared block
    assert len({tuple(blocks.block(i, "s1")) for i in range(1001)}) == 1001
    one = blocks.prompt((7, 8, 9), 40, "s1")
    two = blocks.prompt((7, 8), 20, "s1")
    assert len(one.split()) == 40 and len(two.split()) == 20
    assert one == " " + " ".join(a + b + blocks.block(9, "s1")[:8])  # block 7, 8, then 9 cut at 40 words in all
    assert one.startswith(two)
    short = BlockText(WORDS, 2, 1000)  # too short for the id and the salt: their hash, in 2 words
    assert short.block(7, "s1") != short.block(8, "s1") and len(short.block(7, "s1")) == 2


def test_the_ideal_ceiling_of_a_hand_made_trace_is_its_hand_count():
    reqs = [TraceRequest(0, 12, 1, (1, 2, 3)),   # nothing before: 0
            TraceRequest(0, 10, 1, (1, 2, 4)),   # blocks 1, 2 (8 tokens) shared; 4 is new: 8
            TraceRequest(0, 12, 1, (1, 2, 3)),   # all 12 shared, but never the last token: 11 -> 10 (blocks of 2)
            TraceRequest(0, 3, 1, (5,)),         # new: 0
            TraceRequest(0, 2, 1, (1,)),         # 2 tokens of block 1 shared, the last never: 1 -> 0
            TraceRequest(0, 12, 1, (1, 2, 4))]   # 1, 2 and the 2 tokens of block 4 the second request had: 10
    assert ideal_cached(reqs, 4, 2) == [0, 8, 10, 0, 0, 10]
    assert ideal_cached(reqs, 4, 4) == [0, 8, 8, 0, 0, 8]  # in whole blocks of the server's size
    # 3 template tokens before each prompt (shared by all after the first) and 2 after: 3 + shared, < 3 + n + 2
    assert ideal_cached(reqs, 4, 2, before=3, after=2) == [0, 10, 14, 2, 4, 12]


def test_the_scenario_reads_a_trace_and_refuses_lengths_beside_it(tmp_path):
    from harness.scenario import ScenarioError, load_scenario

    (tmp_path / "t.jsonl").write_text('{"timestamp": 0, "input_length": 70, "output_length": 8, "hash_ids": [1, 2]}\n')
    path = tmp_path / "s.yaml"
    path.write_text("name: t\nworkload:\n  trace: {file: t.jsonl, format: mooncake, block_tokens: 64, salt: off}\n")
    trace = load_scenario(str(path)).workload.trace
    assert trace is not None and trace.salt == "none" and trace.requests[0].hash_ids == (1, 2)
    assert trace.ceiling() == [0]
    path.write_text("name: t\nworkload:\n  input_tokens: 5\n  trace: {file: t.jsonl, block_tokens: 64, salt: per}\n")
    with pytest.raises(ScenarioError) as err:
        load_scenario(str(path))
    assert "workload: a trace gives the prompts and lengths of every request: remove input_tokens" in str(err.value)
    assert "workload.trace.salt: must be one of run, none, request; got 'per'" in str(err.value)
    path.write_text("name: t\nworkload:\n  trace: {file: t.jsonl, block_tokens: 16}\n")
    with pytest.raises(ScenarioError, match=r"workload.trace.file: .*line 1: 2 hash_ids for input_length 70: 5 "
                                            r"blocks of 16 tokens expected \(is block_tokens the trace's\?\)"):
        load_scenario(str(path))


def test_open_loop_arrivals_replay_the_traces_own_timestamps(tmp_path):
    from harness.scenario import ScenarioError, load_scenario

    (tmp_path / "t.jsonl").write_text("".join(
        f'{{"timestamp": {t}, "input_length": 10, "output_length": 4, "hash_ids": [{i}]}}\n'
        for i, t in enumerate((0, 100, 100, 400))))
    path = tmp_path / "s.yaml"
    path.write_text("name: t\nworkload:\n  trace: {file: t.jsonl, block_tokens: 64}\nload:\n  mode: open_staircase\n"
                    "  rate: {start: 1, step: 1, max: 2}\n  arrival: {process: trace}\n")
    assert load_scenario(str(path)).load.trace_gaps == pytest.approx((0.1, 0.0, 0.3))
    path.write_text("name: t\nworkload: {input_tokens: 5, output_tokens: 5}\nload:\n  mode: open_staircase\n"
                    "  rate: {start: 1, step: 1, max: 2}\n  arrival: {process: trace}\n")
    with pytest.raises(ScenarioError, match=r"load\.arrival: process: trace needs a file"):
        load_scenario(str(path))
