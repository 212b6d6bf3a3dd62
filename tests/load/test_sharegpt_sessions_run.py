"""A ShareGPT file replayed as sessions, end to end: ``kneecap run`` against the simulator, its trace as the truth.

Each turn the simulator served carries the conversation so far: the file's user texts character for character (quotes,
line breaks, non-ASCII; ``unique_prompts: false``, so turn 1 has no nonce and its hash is the text's), each followed by
the answer the simulator streamed, of the file's answer's length in words; a session is one conversation, turn by
turn, and goes no further than its last answered user message. The conversations opened by the model, or empty, are
never sent.
"""

from __future__ import annotations

import json

import pytest

from harness.sim.openai import plain_text
from harness.sim.prefix import message_hash
from harness.workload.corpus import builtin
from tests.kit.run import kneecap_run, write_scenario
from tests.kit.sim import start_sim

pytestmark = pytest.mark.integration

SCENARIO = """
    name: sharegpt-sessions
    endpoint: {api: chat, model: sim-tiny}
    workload:
      seed: 4
      unique_prompts: false
      sessions: {log: sharegpt.json, format: sharegpt, think_time_s: 0.05}
    load: {mode: constant, users: 3, duration_s: 6, step: {warmup_s: 1}}
"""


def _conversations() -> list[list[tuple[str, int]]]:
    """Six conversations of 1 to 4 turns: (the user's text, the answer's words) per turn, each text its own."""
    paragraphs = [p.strip() for p in builtin("prose", 0).text.split("\n") if 10 <= len(p.split()) <= 80]
    out, k = [], 0
    for i, turns in enumerate((3, 1, 4, 2, 3, 2)):
        conversation = []
        for j in range(turns):
            conversation.append((f'{paragraphs[k]}\n\t"Résumé" — «{i}.{j}»', 4 + 5 * ((i + j) % 4)))
            k += 1
        out.append(conversation)
    return out


def _file(conversations: list[list[tuple[str, int]]]) -> list[dict]:
    items = [{"id": f"c{i}", "conversations": [m for text, words in c for m in (
        {"from": "human", "value": text}, {"from": "gpt", "value": " ".join(["word"] * words)})]}
        for i, c in enumerate(conversations)]
    return [*items, {"id": "empty", "conversations": []},
            {"id": "model-first", "conversations": [{"from": "gpt", "value": "Hi!"},
                                                    {"from": "human", "value": "never sent"}]}]


def test_a_sharegpt_file_replayed_as_sessions(tmp_path):
    conversations = _conversations()
    (tmp_path / "sharegpt.json").write_text(json.dumps(_file(conversations), ensure_ascii=False), encoding="utf-8")
    trace = tmp_path / "trace.jsonl"
    with start_sim("--preset", "tiny", "--iter-per-seq-ms", "0", "--trace-file", str(trace)) as sim:
        r = kneecap_run(write_scenario(tmp_path, SCENARIO), "--save-requests", host=sim.url, out=tmp_path / "out")
    assert r.code == 0, r.output
    served = {row["id"]: row for row in map(json.loads, trace.read_text().splitlines())}
    assert all(rec["ok"] for rec in r.records)
    sessions: dict[int, list[dict]] = {}
    for rec in r.records:
        sessions.setdefault(rec["session"], []).append(rec)
    first = {message_hash("user", c[0][0]): c for c in conversations}
    never = message_hash("user", "never sent")
    assert all(never not in row["message_hashes"] for row in served.values())
    complete = set()
    for recs in sessions.values():
        recs.sort(key=lambda rec: rec["turn"])
        rows = [served[rec["response_id"]] for rec in recs]
        conversation = first[rows[0]["message_hashes"][0]]  # turn 1 opens one of the file's conversations
        assert [rec["turn"] for rec in recs] == list(range(1, len(recs) + 1)) and len(recs) <= len(conversation)
        for k, row in enumerate(rows):
            # the conversation so far: the file's user texts, each answered by what the simulator streamed
            want = []
            for j in range(k + 1):
                want.append(message_hash("user", conversation[j][0]))
                if j < k:
                    want.append(message_hash("assistant", plain_text(rows[j]["output_tokens"])))
            assert row["message_hashes"] == want, (k, conversation[k][0][:40])
            assert row["output_tokens"] == recs[k]["max_tokens"] == conversation[k][1]  # the answer's words
        if len(recs) == len(conversation):
            complete.add(conversations.index(conversation))
    assert complete == set(range(len(conversations))), complete  # every conversation replayed to its end
    ended = sum(step["sessions"]["ended"] for step in r.summary["steps"])
    assert ended >= 6 and all(step["sessions"]["failed"] == 0 for step in r.summary["steps"])
