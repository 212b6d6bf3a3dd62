"""Writes ``weka_sample/session_NN.json``: 6 agent sessions in the Weka trace format (one JSON object a session:
``id``, ``block_size`` 64, ``hash_id_scope`` local, ``tool_tokens``, ``system_tokens``, ``requests``; a request's
``t``, ``type``, ``in``, ``out``, ``hash_ids`` of whole blocks, ``think_time``, ``api_time``; ``type: "subagent"``
entries with ``agent_id``, ``status``, ``duration_ms`` and requests of their own) with the structure coding-agent
sessions have: a tool and system prefix, a context that grows by each answer and tool result, sub-agents (one
launched without waiting), one a fork that starts with its parent's context. Small enough for a 4,096-token model.
Deterministic: ``python scenarios/traces/make_weka_sample.py``."""

from __future__ import annotations

import json
import pathlib
import random

BLOCK = 64
TOOLS, SYSTEM = 384, 256  # the root's prefix: 10 blocks
SUB_TOOLS, SUB_SYSTEM = 256, 128  # a sub-agent's: 6 blocks


def _requests(rng: random.Random, ids: list[int], next_id, length: int, turns: int, t: float,
              limit: int) -> tuple[list[dict], float]:
    """``turns`` requests of one agent from a context of ``length`` tokens (``ids`` its whole blocks)."""
    out = []
    for k in range(turns):
        ids += [next(next_id) for _ in range(length // BLOCK - len(ids))]
        answer, api = rng.randint(16, 96), round(rng.uniform(0.3, 1.5), 2)
        think = 0.0 if k == 0 else round(rng.uniform(0.05, 0.6), 2)
        t += think
        out.append({"t": round(t, 3), "type": "s", "model": "sample-model", "in": length, "out": answer,
                    "hash_ids": list(ids), "input_types": ["text" if k == 0 else "tool_result"],
                    "output_types": ["text", "tool_use"], "stop": "tool_use", "api_time": api, "think_time": think})
        t += api
        length = min(limit, length + answer + rng.randint(40, 260))
    return out, t


def session(n: int, rng: random.Random) -> dict:
    next_id = iter(range(1, 10**9))
    prefix = [next(next_id) for _ in range((TOOLS + SYSTEM) // BLOCK)]
    sub_prefix = [next(next_id) for _ in range((SUB_TOOLS + SUB_SYSTEM) // BLOCK)]
    root: list[dict] = []
    ids, length, t = list(prefix), TOOLS + SYSTEM + rng.randint(60, 300), 0.0
    for part in range(3):  # root turns, a group of sub-agents between the parts
        reqs, t = _requests(rng, ids, next_id, length, rng.randint(3, 5), t, 2600)
        root += reqs
        last = reqs[-1]
        ids, length = list(last["hash_ids"]), min(2600, last["in"] + last["out"] + rng.randint(40, 200))
        if part == 2:
            break
        group, longest = [], 0.0
        for a in range(rng.randint(1, 3)):
            fork = part == 1 and a == 0 and n % 2 == 0  # a fork: the parent's context, then its own task
            start_ids = list(ids) if fork else list(sub_prefix)
            start = length if fork else SUB_TOOLS + SUB_SYSTEM + rng.randint(60, 200)
            reqs, end = _requests(rng, start_ids, next_id, start, rng.randint(2, 4), 0.0, 2600)
            status = "async_launched" if part == 0 and a == 1 else "completed"
            group.append({"t": round(t, 3), "type": "subagent", "agent_id": f"agent_{n}{part}{a}",
                          "subagent_type": "Explore", "duration_ms": round(end * 1000), "status": status,
                          "tool_tokens": 0 if fork else SUB_TOOLS, "system_tokens": 0 if fork else SUB_SYSTEM,
                          "requests": reqs})
            if status == "completed":
                longest = max(longest, end)
        root += group
        t += longest
        # the parent's next think time includes its wait for the sub-agents
        wait = round(longest + rng.uniform(0.05, 0.3), 2)
        reqs, t = _requests(rng, ids, next_id, length, 1, t, 2600)
        reqs[0]["think_time"] = wait
        root += reqs
        ids, length = list(reqs[0]["hash_ids"]), min(2600, reqs[0]["in"] + reqs[0]["out"] + rng.randint(40, 200))
    return {"id": f"session_{n:02d}", "models": ["sample-model"], "block_size": BLOCK, "hash_id_scope": "local",
            "tool_tokens": TOOLS, "system_tokens": SYSTEM, "requests": root}


def main() -> None:
    rng = random.Random(47)
    folder = pathlib.Path(__file__).with_name("weka_sample")
    folder.mkdir(exist_ok=True)
    for n in range(1, 7):
        (folder / f"session_{n:02d}.json").write_text(json.dumps(session(n, rng), indent=1) + "\n")


if __name__ == "__main__":
    main()
