"""Writes ``bailian_sample.jsonl``: 300 requests in Alibaba's Qwen-Bailian trace format (JSON lines of ``chat_id``,
``parent_chat_id`` (-1: a first turn), ``timestamp`` (s from the start), ``input_length``, ``output_length``,
``type``, ``turn``, ``hash_ids`` of 16-token blocks) with the structure such traces have: chats on a few shared
system prompts whose every turn resends its history (the parent's full blocks, then new ones: the parent's last,
padded block hashes anew, as the traces' FAQ says), and one-off API calls. Deterministic:
``python scenarios/traces/make_bailian_sample.py``."""

from __future__ import annotations

import json
import pathlib
import random

BLOCK = 16


def main() -> None:
    rng = random.Random(4716)
    next_id = iter(range(10**9))
    systems = [[next(next_id) for _ in range(rng.randint(8, 40))] for _ in range(5)]
    chats: list[tuple[int, int, list[int], int]] = []  # open chats: (chat id, turn, blocks, input length)
    out, t = [], 0.0
    for chat_id in range(300):
        t += rng.expovariate(8.0)  # ~8 requests a second
        kind = rng.random()
        if kind < 0.5 and chats:  # the next turn of a chat: its history, then the new message
            parent, turn, ids, length = chats.pop(rng.randrange(len(chats)))
            full = length // BLOCK  # the parent's whole blocks stay; its padded last one does not
            length += rng.randint(20, 200)
            ids = ids[:full] + [next(next_id) for _ in range(-(-length // BLOCK) - full)]
            parent_id, turn, kind_name = parent, turn + 1, "text"
        elif kind < 0.85:  # a new chat on a shared system prompt
            ids = list(rng.choice(systems))
            length = len(ids) * BLOCK + rng.randint(20, 300)
            ids += [next(next_id) for _ in range(-(-length // BLOCK) - len(ids))]
            parent_id, turn, kind_name = -1, 1, "text"
        else:  # a one-off API call
            length = rng.randint(50, 1500)
            ids = [next(next_id) for _ in range(-(-length // BLOCK))]
            parent_id, turn, kind_name = -1, 1, "api"
        if kind_name == "text" and length < 3000:
            chats.append((chat_id, turn, ids, length))
        out.append({"chat_id": chat_id, "parent_chat_id": parent_id, "timestamp": round(t, 3),
                    "input_length": length, "output_length": rng.randint(8, 128), "type": kind_name, "turn": turn,
                    "hash_ids": ids})
    path = pathlib.Path(__file__).with_name("bailian_sample.jsonl")
    path.write_text("".join(json.dumps(r) + "\n" for r in out))


if __name__ == "__main__":
    main()
