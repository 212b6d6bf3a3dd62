"""Prompts of a target token length without a tokenizer, calibrated on the server's own count.

Words come from a list of common English words that are one token each in common BPE vocabularies,
so N words ≈ N tokens. The remaining error (chat template overhead, a tokenizer that splits
differently) is learned per worker from ``usage.prompt_tokens``: a running least-squares fit
``reported ≈ a × words + b``, inverted to choose the word count for the next target.

Cache control: every prompt starts with a unique nonce (prefix caches would otherwise make the test
unrealistically fast); ``shared_prefix_tokens`` puts the same system prompt in front of every request,
the realistic RAG/system-prompt case.

Long prompts (``SPLICE_MIN_WORDS``: 4096 words or more; 128K–1M tokens is 0.8–6.5 MB of text) are not built per
request: their words are a view of one corpus string built once per worker (``_shared``: whole cycles of the
65,536-word corpus, grown when a longer prompt is asked for), and the prompt is a ``Spliced``: the nonce, then a
memoryview of that string, at the same random offset and of the same words as the plain path would have
joined. Every word count the calibration asks for is such a slice, so the calibration varies the length as
before. The words are lowercase ASCII and the nonce hex: the parts are already JSON string content, and the
request body splices them between the rest of its JSON (``encode_body``) without copying them; the transport
sends the buffers with ``sendmsg``. Shorter prompts are a plain ``str`` (``SPLICE_MIN_WORDS`` says why).
"""

from __future__ import annotations

import json
import random
import secrets
from dataclasses import dataclass

__all__ = ["CHAT_APIS", "SPLICE_MIN_WORDS", "Calibration", "Prompt", "PromptBuilder", "Spliced", "SplicedBody",
           "encode_body"]

CHAT_APIS = ("chat", "responses", "messages")
"""The APIs whose prompts are messages."""

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
_CORPUS_WORDS = 1 << 16
SPLICE_MIN_WORDS = 4096
"""Prompts of at least this many words of their own are ``Spliced``. Measured (``benchmarks/long_context.py``,
build + send over loopback, median): a ``Spliced`` prompt costs 20 µs against 64 µs for a ``str`` at 4096 words,
22 against 118 at 8192, 18 against 27 at 1024, the same at 256. Shorter prompts stay ``str``: what they would
save is small, and a ``str`` is what code that reads or dumps ``Prompt.messages`` itself (a user class, a
script) expects."""


class Spliced:
    """A long message's text as parts that are already JSON string content (no character needs escaping):
    the nonce, then a view of the worker's shared corpus. ``str()`` joins them (a copy: for tests and the rare
    reader of the text, not for request bodies)."""

    __slots__ = ("parts", "size")

    def __init__(self, parts: tuple[bytes | memoryview, ...]) -> None:
        self.parts = parts
        self.size = sum(len(p) for p in parts)
        """Characters (= bytes: all ASCII)."""

    def __str__(self) -> str:
        return b"".join(self.parts).decode("ascii")

    def __len__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        return f"Spliced({self.size} chars: {bytes(self.parts[0][:24])!r}...)"


_MARK = f"\x00kneecap-splice-{secrets.token_hex(8)}\x00"
"""Stands in for a ``Spliced`` string while the rest of the body is encoded (no real text holds it)."""
_MARK_JSON = json.dumps(_MARK).encode()
_SMALL = 4096
"""Parts shorter than this are joined to their neighbours: fewer buffers per send, for a copy of a few kB."""


class SplicedBody:
    """A request body as a list of buffers (``parts``), sent by ``Connection.send`` without joining them: the JSON
    around a ``Spliced`` text, and the text's own parts (views of the worker's shared corpus)."""

    __slots__ = ("parts", "size")

    def __init__(self, parts: list[bytes | memoryview]) -> None:
        self.parts = parts
        self.size = sum(len(p) for p in parts)

    def __len__(self) -> int:
        return self.size

    def __bytes__(self) -> bytes:
        return b"".join(self.parts)


def encode_body(body: dict) -> bytes | SplicedBody:
    """``json.dumps(body)`` compact (ASCII, as every API here sends), as bytes; with a ``Spliced`` string anywhere
    in it, a ``SplicedBody`` whose joined bytes are what json.dumps would have made of the joined text."""
    found: list[Spliced] = []

    def mark(obj: object) -> str:
        if obj.__class__ is Spliced:
            found.append(obj)  # type: ignore[arg-type]  # in document order: the encoder walks it in order
            return _MARK
        raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")

    data = json.dumps(body, separators=(",", ":"), default=mark).encode()
    if not found:
        return data
    pieces = data.split(_MARK_JSON)
    if len(pieces) != len(found) + 1:
        raise ValueError("a request body's text holds kneecap's splice mark")
    parts: list[bytes | memoryview] = []
    small = pieces[0] + b'"'
    for text, after in zip(found, pieces[1:], strict=True):
        for p in text.parts:
            if len(p) < _SMALL:
                small += p
                continue
            if small:
                parts.append(small)
            parts.append(p)
            small = b""
        small += b'"' + after
    parts.append(small)
    return SplicedBody(parts)


@dataclass
class Prompt:
    """One request's prompt: ``messages`` (chat) or ``text`` (completions), and its word count. A long prompt's
    user text (the last message's content, or ``text``) is a ``Spliced``, not a ``str``."""

    messages: list[dict] | None
    text: str | Spliced | None
    words: int
    target_tokens: int


class Calibration:
    """Running least-squares fit of reported prompt tokens on words sent."""

    def __init__(self) -> None:
        self.n = 0
        self._sx = self._sy = self._sxx = self._sxy = 0.0

    def observe(self, words: int, reported: int) -> None:
        self.n += 1
        self._sx += words
        self._sy += reported
        self._sxx += words * words
        self._sxy += words * reported

    @property
    def slope_intercept(self) -> tuple[float, float]:
        """(a, b) with reported ≈ a·words + b; (1, 0) before any data, a pure ratio until words vary."""
        if self.n == 0 or self._sx == 0:
            return 1.0, 0.0
        var = self._sxx - self._sx * self._sx / self.n
        if self.n < 3 or var <= 1e-9 * self._sxx:
            return self._sy / self._sx, 0.0
        a = (self._sxy - self._sx * self._sy / self.n) / var
        if a <= 0.05:  # a degenerate fit (noise); fall back to the ratio
            return self._sy / self._sx, 0.0
        return a, (self._sy - a * self._sx) / self.n

    def words_for(self, tokens: int) -> int:
        a, b = self.slope_intercept
        return max(1, round((tokens - b) / a))


class PromptBuilder:
    """Builds prompts for ``api`` ("chat" or "completions"). One per worker (calibration is per worker)."""

    def __init__(self, *, api: str, shared_prefix_tokens: int = 0, unique: bool = True, seed: int = 0,
                 splice_min_words: int = SPLICE_MIN_WORDS) -> None:
        self.api = api
        self.splice_min_words = splice_min_words
        """Prompts with at least this many words of their own are ``Spliced`` (a huge number: never)."""
        self.chat = api in CHAT_APIS
        """Prompts as messages (a system prompt, then the user's); else one text (completions, embeddings)."""
        self.unique = unique
        self.calibration = Calibration()
        corpus_rng = random.Random(f"kneecap-corpus:{seed}")
        words = [corpus_rng.choice(_WORDS) for _ in range(_CORPUS_WORDS)]
        self._corpus = " ".join(words)
        # Start offset of every word, so a prompt is one slice of the corpus (cheap at 8k words).
        self._starts, pos = [], 0
        for w in words:
            self._starts.append(pos)
            pos += len(w) + 1
        self._starts.append(pos)
        self.shared_prefix = self._slice(0, shared_prefix_tokens) if shared_prefix_tokens else ""
        self._prefix_words = shared_prefix_tokens
        self._prefix_bytes = f"{self.shared_prefix} ".encode() if self.shared_prefix else b""
        self._count = 0
        self._shared = memoryview(b"")
        """Whole cycles of the corpus, space-separated, ASCII: long prompts are views of its start."""

    def _shared_words(self, first: int, n: int) -> memoryview:
        """Words ``first`` to ``first + n`` of the endless corpus (``_slice(first, n)``), as a view of ``_shared``."""
        cycle = self._starts[-1]  # one corpus and its trailing space
        cycles, rest = divmod(first + n, _CORPUS_WORDS)
        end = cycles * cycle + self._starts[rest] - 1 if rest else cycles * cycle - 1
        if end > len(self._shared):
            # Grow by whole cycles, a quarter more than asked: calibration nudges the length up by a little at a
            # time, and each growth copies the whole string once (views of the old one stay valid).
            need = -(-(end + 1) // cycle)
            self._shared = memoryview(f"{self._corpus} ".encode() * max(need, need * 5 // 4))
        return self._shared[self._starts[first]:end]

    def _slice(self, first: int, n: int) -> str:
        parts = []
        while n > 0:  # wrap around for prompts longer than the corpus
            take = min(n, _CORPUS_WORDS - first)
            parts.append(self._corpus[self._starts[first]:self._starts[first + take] - 1])
            n -= take
            first = 0
        return " ".join(parts)

    def build(self, target_tokens: int, rng: random.Random) -> Prompt:
        """A prompt whose reported length should approach ``target_tokens`` (the shared prefix included)."""
        total_words = self.calibration.words_for(target_tokens)
        prefix_words = self._prefix_words
        nonce = ""
        if self.unique:
            self._count += 1
            nonce = f"{rng.getrandbits(32):08x}{self._count:x} "
        own = max(1, total_words - prefix_words - (1 if nonce else 0))
        first = int(rng.random() * _CORPUS_WORDS)
        words = own + prefix_words + (1 if nonce else 0)
        if own >= self.splice_min_words:
            view = self._shared_words(first, own)
            if self.chat:
                messages = [{"role": "system", "content": self.shared_prefix}] if self.shared_prefix else []
                messages.append({"role": "user", "content": Spliced((nonce.encode(), view) if nonce else (view,))})
                return Prompt(messages, None, words, target_tokens)
            return Prompt(None, Spliced((self._prefix_bytes + nonce.encode(), view)), words, target_tokens)
        body = nonce + self._slice(first, own)
        if self.chat:
            messages = [{"role": "system", "content": self.shared_prefix}] if self.shared_prefix else []
            messages.append({"role": "user", "content": body})
            return Prompt(messages, None, words, target_tokens)
        text = f"{self.shared_prefix} {body}" if self.shared_prefix else body
        return Prompt(None, text, words, target_tokens)

    def turn_text(self, tokens: int, rng: random.Random) -> str:
        """A session turn's new message of about ``tokens`` tokens: corpus text, no nonce (the session's first
        message is unique already). Sized by the calibration's slope (its intercept is the template's overhead
        of a whole prompt, not of one message)."""
        a = self.calibration.slope_intercept[0]
        return self._slice(int(rng.random() * _CORPUS_WORDS), max(1, round(tokens / a)))

    def observe(self, prompt: Prompt, reported_tokens: int) -> None:
        """Feed the server's ``usage.prompt_tokens`` for a prompt this builder made."""
        if reported_tokens > 0:
            self.calibration.observe(prompt.words, reported_tokens)
