"""Agent session traces (``workload.agent_trace``, ``agent_tree``): the Weka format read with every problem named,
and a session played as a tree — the root's requests in order with their think times, sub-agents beside each other
and joined (an ``async_launched`` one beside the parent's next request), a fork's prompt starting with its parent's
text, a salt per play after the shared prefix, a lane's first play from a random request."""

from __future__ import annotations

import json
import pathlib
import random

import pytest

from harness.workload.agent_trace import AgentTrace, TreePlan, read_weka
from harness.workload.agent_tree import TreeSampler, TreeSession
from harness.workload.prefix_trace import PrefixTrie
from harness.workload.prompts import PromptBuilder
from harness.workload.token_blocks import BlockText, approximate
from harness.workload.traces import TraceError

ROOT = pathlib.Path(__file__).resolve().parents[2]
WORDS = approximate([f"w{i}" for i in range(500)], "a test")
B = 4  # tokens a block


def req(ids: list[int], n: int, think: float = 0.0, out: int = 5) -> dict:
    return {"t": 0, "type": "s", "in": n, "out": out, "hash_ids": ids, "think_time": think}


SESSION = {"id": "s1", "block_size": B, "hash_id_scope": "local", "tool_tokens": 4, "system_tokens": 4, "requests": [
    req([1, 2, 3], 13),
    req([1, 2, 3, 4], 17, think=0.5),
    {"type": "subagent", "agent_id": "fork", "status": "completed", "duration_ms": 1500, "requests": [
        req([1, 2, 3, 4, 9], 21), req([1, 2, 3, 4, 9, 10], 25, think=0.25)]},
    {"type": "subagent", "agent_id": "fresh", "status": "completed", "duration_ms": 800, "tool_tokens": 8,
     "requests": [req([50, 51], 9)]},
    req([1, 2, 3, 4, 5], 21, think=2.0),  # 2.0 s includes the 1.5 s wait for the sub-agents
    {"type": "subagent", "agent_id": "bg", "status": "async_launched", "duration_ms": 300,
     "requests": [req([60], 5)]},
    req([1, 2, 3, 4, 5, 6], 25, think=30.0),
]}


def load(tmp_path, obj=SESSION) -> AgentTrace:
    (tmp_path / "s.json").write_text(json.dumps(obj))
    return read_weka(str(tmp_path / "s.json"))[0]


PLAN = TreePlan(think_cap_s=10.0)


def play(trace: AgentTrace, sid: int = 1, start: int = 0, plan: TreePlan = PLAN) -> list:
    session = TreeSession(sid, trace, start, plan, "run", BlockText(WORDS, B, 100), PrefixTrie(B, B), chat=True)
    turns = []
    while (turn := session.next_turn()) is not None:
        turns.append(turn)
    return turns


def text(call) -> str:
    return call.messages[0]["content"]


def test_the_shipped_sample_reads_with_its_sub_agents():
    traces = read_weka(str(ROOT / "scenarios" / "traces" / "weka_sample"))
    assert [t.id for t in traces] == [f"session_{n:02d}" for n in range(1, 7)]
    assert all(t.block_tokens == 64 and t.scope == "local" and t.root.prefix_tokens == 640 for t in traces)
    groups = [g for t in traces for g in t.root.steps if isinstance(g, tuple)]
    assert len(groups) == 12 and any(not a.joined for g in groups for a in g)


def test_a_session_plays_as_a_tree_with_its_think_times(tmp_path):
    turns = play(load(tmp_path))
    shapes = [[(c.call, len(c.chain)) for c in turn] for turn in turns]
    # root, root, the two sub-agents at once (the fork with its second request chained), root, root beside "bg"
    assert shapes == [[(0, 0)], [(0, 0)], [(1, 1), (2, 0)], [(0, 0)], [(0, 0), (1, 0)]]
    thinks = [turn[0].think_s for turn in turns]
    assert thinks == [0.0, 0.5, 0.0, 0.5, 10.0]  # 2.0 less the 1.5 s waited for; 30 s capped at 10
    assert turns[2][0].chain[0].think_s == 0.25
    assert [c.max_tokens for c in turns[0]] == [5] and turns[0][0].target_tokens == 13


def test_a_forks_prompt_starts_with_its_parents_and_a_fresh_one_shares_nothing(tmp_path):
    turns = play(load(tmp_path))
    parent, fork, fresh = text(turns[1][0]), text(turns[2][0]), text(turns[2][1])
    # its blocks 1-4 are the parent's first 16 tokens (the parent's 17th is its own tail), then block 9 and a tail
    assert fork.split()[:16] == parent.split()[:16] and fork.split()[16] != parent.split()[16]
    assert fresh.split()[0] != parent.split()[0]
    # the ceiling: the fork could be served its parent's 16 whole-block tokens (4-token server blocks)
    assert turns[2][0].ideal_cached == 16 and turns[0][0].ideal_cached == 0


def test_each_play_has_its_own_blocks_after_the_shared_prefix(tmp_path):
    trace = load(tmp_path)
    one, two = (text(play(trace, sid)[1][0]).split() for sid in (1, 2))
    assert one[:8] == two[:8] and one[8:] != two[8:]  # tool + system: 8 tokens, 2 blocks
    same = [text(play(trace, sid, plan=TreePlan(bust=False))[1][0]) for sid in (1, 2)]
    assert same[0] == same[1]
    control = [text(t[0]) for t in play(trace, plan=TreePlan(per_request=True))[:2]]
    assert control[0].split()[0] != control[1].split()[0]


def test_a_lanes_first_play_starts_at_a_random_request_and_later_ones_at_the_first(tmp_path):
    trace = load(tmp_path)
    starts = set()
    for seed in range(20):
        lane = TreeSampler((trace,), TreePlan(), "run", PromptBuilder(api="chat", seed=1),
                           lambda n: BlockText(WORDS, n, 100), lambda n: PrefixTrie(n, n), random.Random(seed), seed)
        first, second = lane.new_session(), lane.new_session()
        starts.add(first.start)
        assert second.start == 0
    assert starts == {0, 1, 2, 3}  # one of the root's four requests
    skipped = play(trace, start=2)  # from the third root request: the sub-agents before it are not played
    assert [[c.call for c in t] for t in skipped] == [[0], [0, 1]] and skipped[0][0].think_s == 0


def test_every_problem_of_a_session_is_named(tmp_path):
    bad = {**SESSION, "requests": [req([1, 2, 3, 4, 5], 13), {"type": "s", "in": 5}, req([1], 4, think=-1),
                                   {"type": "subagent", "agent_id": "x"}]}
    with pytest.raises(TraceError) as err:
        load(tmp_path, bad)
    text = str(err.value)
    for expected in ("requests[0]: 5 hash_ids for in 13: at most 4 blocks of 4 tokens (is block_size the trace's?)",
                     "requests[1]: missing out, hash_ids", "requests[2].think_time must be seconds >= 0, got -1",
                     "requests[3]: a subagent needs a list of requests"):
        assert expected in text, text
    (tmp_path / "x.json").write_text("{oops")
    with pytest.raises(TraceError, match=r"x.json: not a JSON file"):
        read_weka(str(tmp_path / "x.json"))
