"""Per-worker request sampling: lengths from the scenario's distributions, prompts from the builder.

Streams are seeded by ``(seed, worker index, purpose)`` through ``random.Random(str)``, which hashes
the string with SHA-512: the same on every machine and Python version, independent of
PYTHONHASHSEED, and unrelated streams for different workers.
"""

from __future__ import annotations

import random
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.workload.cancel import Cancel, Patience
from harness.workload.images import ImageDrawer
from harness.workload.lengths import JointEmpirical, Length
from harness.workload.prefix_trace import TraceCursor
from harness.workload.prompts import Prompt, PromptBuilder
from harness.workload.token_blocks import BlockText

__all__ = ["SHAPE_DRAWS", "MixSampler", "PlannedRequest", "RequestSampler", "TraceSampler", "length_bucket",
           "worker_rng"]

SHAPE_DRAWS = 2000
"""Lengths drawn to find the prompt-length buckets a workload sends (``RequestSampler.shapes``): a bucket holding
less than ~1/700 of the draws may go unseen (a rare shape the warm-up leaves to the measured part)."""


def length_bucket(tokens: int) -> int:
    """The prompt-length bucket of ``tokens``: powers of two (1, 2, 3-4, 5-8, ...), as engines that compile or capture
    per shape pad lengths to buckets."""
    return (tokens - 1).bit_length() if tokens > 1 else 0


def worker_rng(seed: int, worker: int, purpose: str) -> random.Random:
    return random.Random(f"kneecap/{seed}/{worker}/{purpose}")


@dataclass
class PlannedRequest:
    prompt: Prompt
    max_tokens: int
    """Output length asked for (exactly, when the endpoint honours ignore_eos/min_tokens)."""
    class_index: int | None = None
    """``workload.mix``: the class it was drawn from."""
    cancel_after_s: float | None = None
    """``workload.cancel``: the user hangs up this long after the request was sent; None: not this one."""
    patience_s: float | None = None
    """``workload.patience``: the user hangs up when no token came this long after the start; None: waits."""
    images: tuple[int, int] | None = None
    """``workload.images``: (images, their total pixels) in the prompt; None: the workload has none."""
    ideal_cached: int | None = None
    """``workload.trace``: the prompt tokens an unbounded prefix cache could serve (``prefix_trace.ideal_cached``)."""


class RequestSampler:
    """``next()`` → the next request of this worker: target input length, prompt, output length."""

    def __init__(self, *, input_tokens: Length | None, output_tokens: Length | None, joint: JointEmpirical | None,
                 api: str, seed: int, worker: int, shared_prefix_tokens: int = 0, unique_prompts: bool = True,
                 max_context: int | None = None, prompts: PromptBuilder | None = None, cancel: Cancel | None = None,
                 patience: Patience | None = None, images: ImageDrawer | None = None) -> None:
        """``worker`` names the stream (a worker index, or worker and user); ``prompts`` may be shared by the
        samplers of one worker so they calibrate together. ``cancel``: which requests the user hangs up on, drawn
        from a stream of their own (the lengths are the same with and without); so are ``images``."""
        from_file = prompts is not None and prompts.from_file
        if joint is None and (output_tokens is None or (input_tokens is None and not from_file)):
            raise ValueError("give a joint distribution or both input_tokens and output_tokens (input_tokens may be "
                             "left out with a prompt file: each prompt keeps its own length)")
        self._input, self._output, self._joint = input_tokens, output_tokens, joint
        self._lengths = worker_rng(seed, worker, "lengths")
        self._prompt_rng = worker_rng(seed, worker, "prompts")
        self.prompts = prompts or PromptBuilder(api=api, shared_prefix_tokens=shared_prefix_tokens,
                                                unique=unique_prompts, seed=seed)
        self.max_context = max_context
        self._cancel, self._patience = cancel, patience
        self._cancel_rng = worker_rng(seed, worker, "cancel")
        self._images, self._images_rng = images, worker_rng(seed, worker, "images")

    def lengths(self) -> tuple[int | None, int]:
        """(input, output) tokens; input None: a file's prompt as it is."""
        if self._joint is not None:
            return self._joint.sample(self._lengths)
        n_in = None if self._input is None else self._input.sample(self._lengths)
        # no joint: __init__ required output_tokens
        return n_in, self._output.sample(self._lengths)  # type: ignore[union-attr]

    def batch(self, size: Length) -> int:
        """Inputs in the next embeddings request (from this user's own length stream)."""
        return max(1, size.sample(self._lengths))

    def builder(self, class_index: int | None) -> PromptBuilder:
        """The prompt builder whose calibration a request of this class updates (a mix has one per class)."""
        return self.prompts

    def next(self) -> PlannedRequest:
        n_in, n_out = self.lengths()
        if n_in is not None and self.max_context is not None and n_in + n_out > self.max_context:
            # Keep the answer length (what the user waits for) and trim the context to fit.
            n_out = min(n_out, self.max_context - 1)
            n_in = self.max_context - n_out
        prompt, images = self.prompts.build(n_in, self._prompt_rng), None
        if self._images is not None:
            prompt, count, pixels = self._images.attach(prompt, self._images_rng)
            images = (count, pixels)
        return PlannedRequest(prompt, max(1, n_out), images=images,
                              cancel_after_s=self._cancel.draw(self._cancel_rng) if self._cancel else None,
                              patience_s=self._patience.ttft_s if self._patience else None)


    def shapes(self, draws: int = SHAPE_DRAWS) -> list[PlannedRequest]:
        """What a shape warm-up sends: per prompt-length bucket (``length_bucket``) among ``draws`` draws of the
        lengths, its shortest and longest draw, each with the output length drawn with it (a request the workload
        could send, so one the API accepts: a thinking budget needs room). The server's count of a prompt is the
        target plus its template's tokens: the bucket's range, so shifted, spans two of the server's buckets at
        most, and its ends fall in both. Empty when the prompts keep their own lengths (a prompt file without
        ``input_tokens``)."""
        ends: dict[int, tuple[tuple[int, int], tuple[int, int]]] = {}
        for _ in range(draws):
            n_in, n_out = self.lengths()
            if n_in is None:
                return []
            if self.max_context is not None and n_in + n_out > self.max_context:  # as ``next`` trims it
                n_out = min(n_out, self.max_context - 1)
                n_in = self.max_context - n_out
            b = length_bucket(n_in)
            lo, hi = ends.get(b, ((n_in, n_out), (n_in, n_out)))
            ends[b] = (min(lo, (n_in, n_out)), max(hi, (n_in, n_out)))
        out = []
        for n_in, n_out in sorted({pair for both in ends.values() for pair in both}):
            prompt, images = self.prompts.build(n_in, self._prompt_rng), None
            if self._images is not None:
                prompt, count, pixels = self._images.attach(prompt, self._images_rng)
                images = (count, pixels)
            out.append(PlannedRequest(prompt, max(1, n_out), images=images))
        return out


class MixSampler:
    """``workload.mix``: each ``next()`` is the next request of the class ``pick()`` deals (a worker's one
    ``ClassPicker``, shared by its users so the worker's requests keep the weights), from that class's sampler. A
    class of sessions has a session sampler instead (``sessions[i]``; ``samplers[i]`` None): its pick is a whole
    session, which the user runs turn by turn."""

    def __init__(self, samplers: list[RequestSampler | None], pick: Callable[[], int], *, user: int = 0,
                 sessions: list[Any] | None = None) -> None:
        self._samplers, self.pick = samplers, pick
        self.user = user
        """The worker's count of the user this sampler is for (its place among fixed ``users:``)."""
        self.sessions: list[Any] = sessions or [None] * len(samplers)
        """Per class: its ``SessionSampler`` (a class of sessions), else None."""
        self.has_sessions = any(s is not None for s in self.sessions)

    def builder(self, class_index: int | None) -> PromptBuilder:
        # asked only for a class of requests, which has one
        return self._samplers[class_index or 0].prompts  # type: ignore[union-attr]

    def next(self) -> PlannedRequest:
        return self.next_of(self.pick())

    def next_of(self, i: int) -> PlannedRequest:
        """The next request of class ``i`` (a class of requests)."""
        plan = self._samplers[i].next()  # type: ignore[union-attr]  # asked only for a class of requests, which has one
        plan.class_index = i
        return plan


class TraceSampler:
    """``workload.trace``: ``next()`` → the trace's next request on this worker (the users of a worker share its
    ``cursor`` and ``blocks``), its prompt the blocks of its hash ids (a pass after the first with a salt of its
    own), as one user message (chat) or the prompt (completions); its target its trace length and the template's
    tokens around it."""

    def __init__(self, cursor: TraceCursor, blocks: BlockText, prompts: PromptBuilder, salt: str) -> None:
        self.cursor, self.blocks, self.prompts, self.salt = cursor, blocks, prompts, salt

    def builder(self, class_index: int | None) -> PromptBuilder:
        return self.prompts

    def next(self) -> PlannedRequest:
        req, ideal, done = self.cursor.next()
        salt = f"{self.salt}p{done}" if done else self.salt
        if self.cursor.trace.salt == "request":  # the control: no block shared, on any worker
            salt += f"r{secrets.token_hex(6)}"
        text = self.blocks.prompt(req.hash_ids, req.input_tokens, salt)
        n = req.input_tokens
        target = self.blocks.words.before + n + self.blocks.words.after
        prompt = Prompt([{"role": "user", "content": text}], None, n, target) if self.prompts.chat else \
            Prompt(None, text, n, target)
        return PlannedRequest(prompt, req.output_tokens, ideal_cached=ideal)

    def shapes(self) -> list[PlannedRequest]:
        """No shape warm-up: the trace's own first requests are its shapes, and a warm-up would fill the cache."""
        return []
