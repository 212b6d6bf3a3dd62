"""Text that prompts are cut from: words by index, as a plain ``str`` or as a view of JSON string content. Pure.

A ``Corpus`` is one text and the start and end of each of its whitespace-separated words. ``words(first, n)`` is the
text of words ``first`` to ``first + n`` as written (the spaces and line breaks between them kept), wrapping round
to the first word after the last (joined by a space): the corpus is endless. ``view(first, n)`` is the same words as
``json.dumps`` would write them inside a JSON string (quotes, backslashes, line breaks and non-ASCII escaped),
sliced from one ASCII buffer of whole cycles of the escaped text: the escaping is done once per corpus, and a long
prompt (``prompts.Spliced``) is a view of that buffer, never a copy.

Three kinds (``workload.prompts``): ``prose`` (the default: *Pride and Prejudice*, public domain, shipped in
``data/``; ``data/README.md`` says where it comes from), ``words`` (kneecap's first corpus: common English words of
one token each, drawn at random; no punctuation, so every word is about one token) and a user's prompt file
(``prompt_file.py``: its prompts joined, one after another). ``prose`` and ``words`` are built once per process and
seed (``builtin``) and shared by every prompt builder of the process.
"""

from __future__ import annotations

import functools
import json
import operator
import random
import re
from array import array
from bisect import bisect_left
from collections.abc import Iterable
from importlib import resources
from itertools import accumulate, repeat

__all__ = ["CORPORA", "Corpus", "builtin"]

CORPORA = ("prose", "words")
"""The built-in corpora (``workload.prompts.corpus``)."""
PROSE_FILE = "pride_and_prejudice.txt"

_WORDS = ("time year people way day man thing woman life child world school state family student group country "
          "problem hand part place case week company system program question work government number night point "
          "home water room mother area money story fact month lot right study book eye job word business issue "
          "side kind head house service friend father power hour game line end member law car city community name "
          "president team minute idea kid body information back parent face others level office door health person "
          "art war history party result change morning reason research girl guy moment air teacher force education "
          "foot boy age policy music market sense nation plan college interest death experience effect use class "
          "control care field development role effort rate heart drug show leader light voice wife police mind "
          "price report decision son view relationship town road arm difference value building action model season "
          "society tax director position player record paper space ground form event official matter center couple "
          "site project activity star table need court oil situation cost industry figure street image phone data "
          "picture practice piece land product doctor wall patient worker news test movie north love support "
          "technology step baby computer type attention film tree source organization hair window evidence "
          "population site truth").split()
_WORD_LIST_WORDS = 1 << 16
_SPACE = re.compile(r"(\s+)")
"""Splits a text into its words and the runs of whitespace between them, alternately (word first and last)."""
_ESCAPE = json.encoder.encode_basestring_ascii  # json.dumps of one str, in C


def _bounds(lengths: Iterable[int]) -> list[int]:
    """Offsets where each part starts, and the end: of words and gaps alternately, a word's start and end."""
    return [0, *accumulate(lengths)]


class Corpus:
    """Words of ``text`` by index (module docstring). ``text`` must hold at least one word."""

    def __init__(self, text: str) -> None:
        text = text.strip()
        if not text:
            raise ValueError("a corpus needs at least one word")
        bounds = _bounds(map(len, _SPACE.split(text)))  # C loops only: ~20 ms for a book of 120k words
        starts, ends = array("q", bounds[0::2]), array("q", bounds[1::2])
        self.text = text
        self.n = len(starts)
        """Words in one cycle."""
        self._starts, self._ends = starts, ends
        self._esc: tuple[bytes, array, array] | None = None
        self._shared = memoryview(b"")
        """Whole cycles of the escaped text, each followed by a space: long prompts are views of its start."""

    def words(self, first: int, n: int) -> str:
        """Words ``first`` to ``first + n`` (``first`` < ``n``), wrapping round: a copy (a short prompt's text)."""
        parts = []
        while n > 0:
            take = min(n, self.n - first)
            parts.append(self.text[self._starts[first]:self._ends[first + take - 1]])
            n -= take
            first = 0
        return " ".join(parts)

    def view(self, first: int, n: int) -> memoryview:
        """``words(first, n)`` as JSON string content (ASCII), a view of the corpus's one escaped buffer."""
        esc, starts, ends = self._escaped()
        cycle = len(esc) + 1
        cycles, rest = divmod(first + n, self.n)
        end = cycles * cycle + ends[rest - 1] if rest else (cycles - 1) * cycle + len(esc)
        if end > len(self._shared):
            # Grow by whole cycles, a quarter more than asked: calibration nudges the length up by a little at a
            # time, and each growth copies the whole string once (views of the old one stay valid).
            need = -(-(end + 1) // cycle)
            self._shared = memoryview((esc + b" ") * max(need, need * 5 // 4))
        return self._shared[starts[first]:end]

    def word_at(self, offset: int) -> int:
        """The index of the first word starting at or after character ``offset`` of ``text``."""
        return bisect_left(self._starts, offset)

    @property
    def shared_bytes(self) -> int:
        """Size of the escaped buffer long prompts are views of (grown to the longest asked for)."""
        return len(self._shared)

    def _escaped(self) -> tuple[bytes, array, array]:
        """The text as JSON string content, and each word's start and end in it: built on the first long prompt."""
        if self._esc is None:
            esc = json.dumps(self.text)[1:-1].encode("ascii")
            if len(esc) == len(self.text):
                self._esc = (esc, self._starts, self._ends)
            else:  # each word's and each gap's escaped length (a C loop: the escaping is sparse, the words many)
                quoted = map(len, map(_ESCAPE, _SPACE.split(self.text)))
                bounds = _bounds(map(operator.sub, quoted, repeat(2)))  # less the quotes around each
                self._esc = (esc, array("q", bounds[0::2]), array("q", bounds[1::2]))
        return self._esc


@functools.lru_cache(maxsize=8)
def builtin(name: str, seed: int) -> Corpus:
    """A built-in corpus (``CORPORA``) for ``seed``: ``prose`` starts at a word the seed picks (the book read from
    there, round to its start), ``words`` is drawn by the seed. One per process and seed, shared (~0.1 s to build,
    and as much again to escape on the first long prompt)."""
    rng = random.Random(f"kneecap-corpus:{seed}")
    if name == "words":
        return Corpus(" ".join(rng.choice(_WORDS) for _ in range(_WORD_LIST_WORDS)))
    if name != "prose":
        raise ValueError(f"no built-in corpus {name!r}; there are {', '.join(CORPORA)}")
    book = resources.files("harness.workload").joinpath("data").joinpath(PROSE_FILE).read_text("ascii").strip()
    cut = book.find(" ", rng.randrange(len(book)))  # a word boundary the seed picks: the book is read from there
    return Corpus(book if cut < 0 else f"{book[cut + 1:]}\n{book[:cut]}")
