"""Prompts of a target token length without a tokenizer, calibrated on the server's own count.

Words come from a list of common English words that are one token each in common BPE vocabularies,
so N words ≈ N tokens. The remaining error (chat template overhead, a tokenizer that splits
differently) is learned per worker from ``usage.prompt_tokens``: a running least-squares fit
``reported ≈ a × words + b``, inverted to choose the word count for the next target.

Cache control: every prompt starts with a unique nonce (prefix caches would otherwise make the test
unrealistically fast); ``shared_prefix_tokens`` puts the same system prompt in front of every request,
the realistic RAG/system-prompt case.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["CHAT_APIS", "Calibration", "Prompt", "PromptBuilder"]

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


@dataclass
class Prompt:
    """One request's prompt: ``messages`` (chat) or ``text`` (completions), and its word count."""

    messages: list[dict] | None
    text: str | None
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

    def __init__(self, *, api: str, shared_prefix_tokens: int = 0, unique: bool = True, seed: int = 0) -> None:
        self.api = api
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
        self._count = 0

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
        body = nonce + self._slice(int(rng.random() * _CORPUS_WORDS), own)
        words = own + prefix_words + (1 if nonce else 0)
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
