"""Writes ``mooncake_sample.jsonl``: 300 requests in Mooncake's trace format (JSON lines of ``timestamp`` ms,
``input_length``, ``output_length``, ``hash_ids``) with the structure such traces have: a few shared system prompts,
conversations that grow turn by turn on their own history, and one-off requests. Blocks of 64 tokens (Mooncake's own
traces use 512; the scenario's ``block_tokens`` says which). Deterministic:
``python scenarios/traces/make_mooncake_sample.py``."""

from __future__ import annotations

import json
import pathlib
import random

BLOCK = 64


def main() -> None:
    rng = random.Random(47)
    next_id = iter(range(10**9))
    systems = [[next(next_id) for _ in range(rng.randint(1, 4))] for _ in range(6)]
    chats: list[list[int]] = []  # each conversation's blocks so far
    out, t = [], 0.0
    for _ in range(300):
        t += rng.expovariate(1 / 120.0)  # ~8 requests a second
        kind = rng.random()
        if kind < 0.45 and chats:  # the next turn of a conversation: its history, then new blocks
            chat = rng.choice(chats)
            chat += [next(next_id) for _ in range(rng.randint(1, 3))]
            ids = list(chat)
        elif kind < 0.85:  # a new conversation on a shared system prompt
            chat = [*rng.choice(systems), *(next(next_id) for _ in range(rng.randint(1, 3)))]
            chats.append(chat)
            ids = list(chat)
        else:  # a one-off request
            ids = [next(next_id) for _ in range(rng.randint(1, 6))]
        if len(ids) > 24:  # a context limit: the conversation ends
            chats = [c for c in chats if c is not chat]
            ids = ids[:24]
        length = (len(ids) - 1) * BLOCK + rng.randint(1, BLOCK)
        out.append({"timestamp": round(t), "input_length": length, "output_length": rng.randint(8, 128),
                    "hash_ids": ids})
    path = pathlib.Path(__file__).with_name("mooncake_sample.jsonl")
    path.write_text("".join(json.dumps(r) + "\n" for r in out))


if __name__ == "__main__":
    main()
