"""Token-exact blocks for prefix traces: words the endpoint's tokenizer reads as one token each after a space, so a
block of N words is N tokens wherever it stands, and the template tokens around a prompt, found by asking the
tokenizer. Pure: the tokenizer is a function handed in (the server's ``/tokenize``: ``client/tokenize.py``).

``calibrate`` tokenizes the corpus's words (a space before each, as they stand in a block), keeps those that are one
token, finds how many template tokens come before and after a prompt's text, and checks a sample prompt of those
words counts as planned: ``exact`` only when it does. Without a tokenizer (``approximate``), the corpus's words are
used as they are, about a token each on an English tokenizer. ``BlockText`` turns a block id into its words: a
marker (the id and the salt, in words of the vocabulary: different ids or salts, different blocks) and then filler
from an offset the id picks.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

__all__ = ["CANDIDATES", "BlockText", "BlockWords", "Tokenize", "approximate", "calibrate", "single_token_words"]

Tokenize = Callable[[str | list[dict], bool], tuple[list[int], list[str] | None]]
"""``(text or chat messages, special tokens?) -> (token ids, their pieces or None)``; raises ``OSError`` or
``ValueError`` when the tokenizer cannot answer."""
CANDIDATES = 3000
"""Corpus words offered to the tokenizer (their distinct ones, in chunks): enough for varied filler."""
_CHUNK = 400
_SAMPLE = 200
_SPACES = ("Ġ", "▁", " ")  # a piece's leading space: byte-level BPE, SentencePiece, plain text
_SALT_BITS = 40


@dataclass(frozen=True)
class BlockWords:
    """The words blocks are made of, and what a prompt costs beyond them."""

    text: tuple[str, ...]
    """Filler, in the corpus's order."""
    digits: tuple[str, ...]
    """The marker's alphabet: the distinct words, sorted."""
    before: int = 0
    """Template tokens before a prompt's text (chat roles, BOS): shared by every request."""
    after: int = 0
    """Template tokens after it."""
    exact: bool = False
    note: str = ""
    """How the words were chosen, for the console: "token-exact: ..." or "approximate: ..."."""


def approximate(corpus_words: Sequence[str], why: str) -> BlockWords:
    """The corpus's words as they are (``why``: the reason no tokenizer said which are one token)."""
    text = tuple(corpus_words[:CANDIDATES])
    return BlockWords(text, tuple(sorted(set(text))), note=f"approximate: {why}; a word is about a token")


def single_token_words(words: Sequence[str], pieces: Sequence[str]) -> list[str]:
    """Of ``words`` (tokenized as one text, a space before each), those whose only piece is the word itself: a piece
    starting with a space starts a word (``_SPACES``). A tokenizer whose pieces do not show this gives none."""
    groups: list[list[str]] = []
    for piece in pieces:
        if piece[:1] in _SPACES or not groups:
            groups.append([])
        groups[-1].append(piece)
    if len(groups) != len(words):
        return []
    return [w for w, g in zip(words, groups, strict=True) if len(g) == 1 and g[0][1:] == w]


def calibrate(tokenize: Tokenize, corpus_words: Sequence[str], chat: bool) -> BlockWords:
    """The corpus's one-token words and the template's tokens, by ``tokenize``; approximate (with the reason) when it
    cannot answer or its pieces do not show words."""
    text = list(corpus_words[:CANDIDATES])
    distinct = list(dict.fromkeys(text))
    try:
        single: set[str] = set()
        for i in range(0, len(distinct), _CHUNK):
            chunk = distinct[i:i + _CHUNK]
            _, pieces = tokenize(" " + " ".join(chunk), False)
            if pieces is None:
                return approximate(text, "the tokenizer gives no pieces")
            single.update(single_token_words(chunk, pieces))
        if len(single) < 16:
            return approximate(text, f"only {len(single)} of {len(distinct)} words are one token")
        filler = tuple(w for w in text if w in single)
        first = filler[0]
        ids, _ = tokenize(" " + first, False)
        whole, _ = tokenize(_prompt(" " + first, chat), True)
        if len(ids) != 1 or ids[0] not in whole:
            return approximate(text, f"{first!r} is not where the template puts a prompt's text")
        before = whole.index(ids[0])
        after = len(whole) - before - 1
        sample = filler[:_SAMPLE]
        counted = len(tokenize(_prompt(" " + " ".join(sample), chat), True)[0]) - before - after
    except (OSError, ValueError) as exc:
        return approximate(text, f"the tokenizer did not answer ({exc})")
    words = BlockWords(filler, tuple(sorted(single)), before, after, exact=counted == len(sample))
    how = f"{len(single)} one-token words, template {before} + {after} tokens"
    if words.exact:
        return replace(words, note=f"token-exact: {how}")
    return replace(words, note=f"approximate: {how}, but {len(sample)} of them counted {counted} tokens")


def _prompt(text: str, chat: bool) -> str | list[dict]:
    return [{"role": "user", "content": text}] if chat else text


class BlockText:
    """A trace's blocks in ``words``: ``block(id, salt)`` is ``block_tokens`` words, the same for the same id and
    salt. The marker is the id in a fixed number of digits (enough for ``max_id``) and then the salt's hash in
    ``_SALT_BITS`` bits, so two ids or two salts never give the same block; a block too short for that marker is
    the hash of both (different with high probability)."""

    def __init__(self, words: BlockWords, block_tokens: int, max_id: int) -> None:
        self.words, self.block_tokens = words, block_tokens
        base = len(words.digits)
        self.width = _digits_for(max_id, base)
        self.salt_width = _digits_for((1 << _SALT_BITS) - 1, base)

    def block(self, block: int, salt: str) -> list[str]:
        w, n = self.words, self.block_tokens
        digest = int.from_bytes(hashlib.blake2b(f"{salt}/{block}".encode(), digest_size=8).digest(), "big")
        if self.width + self.salt_width <= n:
            salted = int.from_bytes(hashlib.blake2b(salt.encode(), digest_size=5).digest(), "big")
            marker = _spell(block, self.width, w.digits) + _spell(salted, self.salt_width, w.digits)
        else:
            marker = _spell(digest, n, w.digits)
        first = digest % len(w.text)
        filler = [w.text[(first + k) % len(w.text)] for k in range(n - len(marker))]
        return marker + filler

    def prompt(self, hash_ids: Sequence[int], tokens: int, salt: str) -> str:
        """A request's text: its blocks in order, cut to ``tokens`` words, a space before each (as calibrated)."""
        return self.text([(block, salt) for block in hash_ids], tokens, f"{salt}/tail")

    def text(self, blocks: Sequence[tuple[int, str]], tokens: int, tail: str) -> str:
        """``tokens`` words: the ``(id, salt)`` blocks in order, then (a trace that lists whole blocks only) blocks
        of the ``tail`` salt, the request's own."""
        out: list[str] = []
        for block, salt in blocks:
            out += self.block(block, salt)
        k = 0
        while len(out) < tokens:
            out += self.block(k, tail)
            k += 1
        return " " + " ".join(out[:tokens])


def _digits_for(value: int, base: int) -> int:
    return max(1, math.ceil(math.log(value + 1, base))) if base > 1 else 1


def _spell(value: int, width: int, digits: Sequence[str]) -> list[str]:
    """``value`` in ``width`` digits of base ``len(digits)``, least significant first (overflow wraps)."""
    out = []
    for _ in range(width):
        value, d = divmod(value, len(digits))
        out.append(digits[d])
    return out
