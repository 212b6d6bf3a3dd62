"""Prompt units and block hashes for the simulator's prefix cache. Pure: no I/O.

The simulator has no tokenizer, so the cache hashes *units*, chosen so that what a chat template does
to a multi-turn conversation holds here too:

- chat: each message renders as ``["<|im_start|>", role, "\\n", *content.split(), "<|im_end|>"]`` (the
  4 overhead tokens of openai.py's count), and the prompt ends with the reply primer
  ``["<|im_start|>", "assistant", "\\n"]`` (the 3);
- completions: the prompt's words, or its token ids when it is a list of ids;
- output: the words of ``plain_text(n)``, the answer the simulator generates.

So when a client sends turn k+1 as ``history + {"role": "assistant", "content": <the answer as
streamed>} + {"role": "user", ...}``, the units of prompt_k + answer_k are an exact prefix of
prompt_{k+1}'s units, and turn k+1 hits every block turn k computed.

Hash chain (as vLLM): units are cut into full blocks of ``block_size``; block i's hash covers its
parent's hash and its own units, so equal hashes mean equal prefixes. A partial last block is never
hashed, so never cached. The chain runs over prompt + planned output units (the output length is
decided at admission), so the engine can cache output blocks when the request finishes. Python's
``hash()`` is salted per process (``PYTHONHASHSEED``); the cache lives in one process, so that is
fine. ``message_hash`` uses sha1 instead, so a test can recompute the trace's values.

Units vs tokens: with ``tokens_per_word`` 1 (the default) a unit is a token and unit block j is KV
block j, exactly. Otherwise a prompt of U units counts P tokens (words × tokens_per_word, rounded up,
plus the template overhead): the prompt's units are spread over its tokens proportionally (unit
u ↔ token u·P/U; output units stay one per token), KV block j is keyed by the unit block that covers
its last token, mixed with j. Cached tokens are then the proportional share of the units hit, still
whole KV blocks; a turn whose P/U ratio differs from the last (messages of other sizes round up
differently) may miss a block or two at the boundary. Approximate by design: units are words there.

Cost: one ``hash`` per unit (strings fresh from ``str.split``) and one per block: a 100k-token chat prompt
adds about 2.5 ms to parsing it (CPython 3.11), on top of the split that counting its tokens already does.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

__all__ = ["IM_END", "IM_START", "REPLY_PRIMER", "block_keys", "chain_hashes", "chat_units", "message_hash"]

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
REPLY_PRIMER = (IM_START, "assistant", "\n")


def chat_units(messages: Iterable[tuple[str, list[str]]]) -> list[str]:
    """The units of a chat prompt from (role, content words) per message, reply primer included."""
    units: list[str] = []
    for role, words in messages:
        units += (IM_START, role, "\n")
        units += words
        units.append(IM_END)
    units += REPLY_PRIMER
    return units


def chain_hashes(units: Sequence[object], block_size: int) -> list[int]:
    """Hash of each full block of ``block_size`` units, each covering its parent's hash (a prefix chain)."""
    out: list[int] = []
    append = out.append
    parent = 0
    it = iter(units)
    for block in zip(*[it] * block_size, strict=False):  # full blocks only: the partial tail is dropped
        parent = hash((parent, block))
        append(parent)
    return out


def block_keys(prompt_units: list, prompt_tokens: int, output_units: list, block_size: int) -> list[int]:
    """Cache key of each KV block of a request, in order, as far as full unit blocks reach.

    With one token per unit the keys are the chain hashes of prompt + output units. Otherwise KV block j
    (tokens ``[j·bs, (j+1)·bs)``) takes the hash of the unit block that covers its last token, mixed with j
    (see the module docstring).
    """
    u, p = len(prompt_units), prompt_tokens
    hashes = chain_hashes(prompt_units + output_units, block_size)
    if u == p:
        return hashes
    keys: list[int] = []
    j = 0
    while True:
        end = (j + 1) * block_size  # tokens through the end of KV block j
        unit_end = -(-end * u // p) if end <= p else u + end - p
        k = max(0, -(-unit_end // block_size) - 1)
        if k >= len(hashes):
            return keys
        keys.append(hash((hashes[k], j)))
        j += 1


def message_hash(role: str, text: str) -> str:
    """Short stable hash of one chat message for the trace: the first 16 hex of sha1(role NUL text)."""
    return hashlib.sha1(f"{role}\x00{text}".encode(), usedforsecurity=False).hexdigest()[:16]
