"""Prompts of a target token length without a tokenizer, calibrated on the server's own count.

A prompt is a run of whole words cut from a corpus (``corpus.py``): by default public-domain prose, real text, as
speculative decoding needs to be measured honestly (synthetic filler is accepted far more often than real text);
``workload.prompts`` picks the word list of one-token words, or a file of the user's own prompts
(``prompt_file.py``). Words are counted at whitespace; N words are about N × (tokens per word) tokens, and the
error (the tokenizer's tokens per word, the chat template's overhead) is learned per worker from
``usage.prompt_tokens``: a running least-squares fit ``reported ≈ a × words + b``, inverted to choose the word
count for the next target.

A file's prompt keeps its own length when the workload gives no ``input_tokens`` (``build(None, rng)``); with one,
it is cut (whole words) or padded (with the file's following prompts) to the calibrated word count, like any prompt.

Cache control: every prompt starts with a unique nonce (prefix caches would otherwise make the test
unrealistically fast); ``shared_prefix_tokens`` puts the same system prompt in front of every request,
the realistic RAG/system-prompt case.

Long prompts (``SPLICE_MIN_WORDS``: 4096 words or more; 128K–1M tokens is 0.8–6.5 MB of text) are not built per
request: their words are a view of one buffer per corpus and process (``Corpus.view``: whole cycles of the corpus,
grown when a longer prompt is asked for), and the prompt is a ``Spliced``: the nonce, then a memoryview of that
buffer, at the same random offset and of the same words as the plain path would have joined. Every word count the
calibration asks for is such a slice, so the calibration varies the length as before. The buffer holds the text
JSON-escaped once, when the corpus first serves a long prompt (quotes, line breaks, non-ASCII), and the nonce is
hex: the parts are already JSON string content, and the request body splices them between the rest of its JSON
(``encode_body``) without copying them; the transport sends the buffers with ``sendmsg``. Shorter prompts are a
plain ``str`` (``SPLICE_MIN_WORDS`` says why), escaped by ``json.dumps`` with the rest of the body.
"""

from __future__ import annotations

import json
import random
import secrets
from dataclasses import dataclass
from typing import Any

from harness.workload.prompt_file import PromptSource

__all__ = ["CHAT_APIS", "SPLICE_MIN_WORDS", "Calibration", "Prompt", "PromptBuilder", "Spliced", "SplicedBody",
           "encode_body"]

CHAT_APIS = ("chat", "responses", "messages")
"""The APIs whose prompts are messages."""

SPLICE_MIN_WORDS = 4096
"""Prompts of at least this many words of their own are ``Spliced``. Measured (``benchmarks/long_context.py``,
build + send over loopback, median): a ``Spliced`` prompt costs 20 µs against 64 µs for a ``str`` at 4096 words,
22 against 118 at 8192, 18 against 27 at 1024, the same at 256. Shorter prompts stay ``str``: what they would
save is small, and a ``str`` is what code that reads or dumps ``Prompt.messages`` itself (a user class, a
script) expects."""


class Spliced:
    """A long message's text as parts that are already JSON string content (escaped, ASCII): the nonce, then a view
    of the worker's shared corpus. ``str()`` is the text they stand for (a copy: for tests and the rare reader of
    the text, not for request bodies)."""

    __slots__ = ("parts", "size")

    def __init__(self, parts: tuple[bytes | memoryview, ...]) -> None:
        self.parts = parts
        self.size = sum(len(p) for p in parts)
        """Bytes of JSON string content (each ASCII; an escaped character counts its escape)."""

    def __str__(self) -> str:
        return json.loads(b'"' + b"".join(self.parts) + b'"')

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
            found.append(obj)  # in document order: the encoder walks it in order
            return _MARK
        raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")

    data = json.dumps(body, separators=(",", ":"), default=mark).encode()
    if not found:
        return data
    pieces = data.split(_MARK_JSON)
    if len(pieces) != len(found) + 1:
        raise ValueError("a request body's text holds kneecap's splice mark")
    parts: list[bytes | memoryview] = []
    small = pieces[0]
    for text, after in zip(found, pieces[1:], strict=True):
        small += b'"'  # each text's opening quote (the mark's quotes were split off with it)
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
    """Builds prompts for ``api`` ("chat" or "completions") from ``source``'s text (the default: the prose corpus).
    One per worker (calibration is per worker)."""

    def __init__(self, *, api: str, shared_prefix_tokens: int = 0, unique: bool = True, seed: int = 0,
                 splice_min_words: int = SPLICE_MIN_WORDS, source: PromptSource | None = None) -> None:
        self.api = api
        self.splice_min_words = splice_min_words
        """Prompts with at least this many words of their own are ``Spliced`` (a huge number: never)."""
        self.chat = api in CHAT_APIS
        """Prompts as messages (a system prompt, then the user's); else one text (completions, embeddings)."""
        self.unique = unique
        self.calibration = Calibration()
        self.corpus, self._firsts = (source or PromptSource()).text(seed)
        """The text prompts are cut from; ``_firsts``: a file's prompts (each one's first word), else empty."""
        self.shared_prefix = self.corpus.words(0, shared_prefix_tokens) if shared_prefix_tokens else ""
        self._prefix_words = shared_prefix_tokens
        self._prefix_bytes = json.dumps(f"{self.shared_prefix} ")[1:-1].encode() if self.shared_prefix else b""
        """The shared prefix and its space as JSON string content: a long completions prompt's first part."""
        self._count = 0

    @property
    def from_file(self) -> bool:
        """Prompts are a file's: they have a length of their own (``build(None, rng)``)."""
        return bool(self._firsts)

    def _own(self, target_tokens: int | None, nonce: str, rng: random.Random) -> tuple[int, int]:
        """(first word, words of its own) of the next prompt: a file's drawn prompt, cut or padded to the target's
        calibrated length (its own without a target); else a run of the corpus at a random word."""
        if self._firsts:
            i = int(rng.random() * len(self._firsts))
            first = self._firsts[i]
            if target_tokens is None:
                return first, (self._firsts[i + 1] if i + 1 < len(self._firsts) else self.corpus.n) - first
        elif target_tokens is None:
            raise ValueError("a prompt without a target length needs a prompt file (workload.prompts.file)")
        else:
            first = int(rng.random() * self.corpus.n)
        own = self.calibration.words_for(target_tokens) - self._prefix_words - (1 if nonce else 0)
        return first, max(1, own)

    def _nonce(self, rng: random.Random) -> str:
        if not self.unique:
            return ""
        self._count += 1
        return f"{rng.getrandbits(32):08x}{self._count:x} "

    def build(self, target_tokens: int | None, rng: random.Random) -> Prompt:
        """A prompt whose reported length should approach ``target_tokens`` (the shared prefix included); None: a
        file's prompt as it is."""
        nonce = self._nonce(rng)
        first, own = self._own(target_tokens, nonce, rng)
        words = own + self._prefix_words + (1 if nonce else 0)
        target = target_tokens or 0
        if own >= self.splice_min_words:
            view = self.corpus.view(first, own)
            if self.chat:
                messages: list[dict[str, Any]] = [{"role": "system", "content": self.shared_prefix}] \
                    if self.shared_prefix else []
                messages.append({"role": "user", "content": Spliced((nonce.encode(), view) if nonce else (view,))})
                return Prompt(messages, None, words, target)
            return Prompt(None, Spliced((self._prefix_bytes + nonce.encode(), view)), words, target)
        return self._plain(nonce + self.corpus.words(first, own), words, target)

    def build_text(self, text: str, rng: random.Random) -> Prompt:
        """A prompt whose own words are ``text`` as it is, after the nonce (a replayed conversation's first message;
        no target: its length is the text's)."""
        nonce = self._nonce(rng)
        return self._plain(nonce + text, len(text.split()) + self._prefix_words + (1 if nonce else 0), 0)

    def _plain(self, body: str, words: int, target: int) -> Prompt:
        if self.chat:
            messages = [{"role": "system", "content": self.shared_prefix}] if self.shared_prefix else []
            messages.append({"role": "user", "content": body})
            return Prompt(messages, None, words, target)
        text = f"{self.shared_prefix} {body}" if self.shared_prefix else body
        return Prompt(None, text, words, target)

    def turn_text(self, tokens: int, rng: random.Random) -> str:
        """A session turn's new message of about ``tokens`` tokens: corpus text, no nonce (the session's first
        message is unique already). Sized by the calibration's slope (its intercept is the template's overhead
        of a whole prompt, not of one message)."""
        a = self.calibration.slope_intercept[0]
        return self.corpus.words(int(rng.random() * self.corpus.n), max(1, round(tokens / a)))

    def observe(self, prompt: Prompt, reported_tokens: int) -> None:
        """Feed the server's ``usage.prompt_tokens`` for a prompt this builder made."""
        if reported_tokens > 0:
            self.calibration.observe(prompt.words, reported_tokens)
