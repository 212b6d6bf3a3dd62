"""OpenAI embeddings (``POST /v1/embeddings``): request validation and the response. Pure: no I/O.

Request: ``model``, ``input`` (a string, a list of strings, a list of token ids, or a list of such
lists; at most 2048 inputs), ``encoding_format`` (``float``, the default, or ``base64``: little-endian
float32, as OpenAI sends it), ``dimensions`` (at most ``--embedding-dim``). Each input counts like a
completions prompt: ``ceil(words × tokens_per_word)`` (at least 1), or one token per id; none may
exceed the context window.

Cost: each input is one prefill-only engine sequence (its prompt tokens, no decode) through the same
slots, KV admission and per-iteration token budget as generation, so embeddings queue and have a
knee (``engine.py``). The answer is sent when the last input's prefill is done.

Response: ``{"object": "list", "data": [{"object": "embedding", "index": i, "embedding": [...]}],
"model", "usage": {"prompt_tokens", "total_tokens"}}``; each vector is a deterministic function of
its input (equal inputs, equal vectors), of unit length.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import random
import struct
from typing import TypeGuard

from harness.sim.openai import ApiError, GenRequest, OutputPolicy, load_body, opt_int
from harness.sim.plan import Behavior, Plan

__all__ = ["MAX_INPUTS", "EmbeddingsWriter", "parse_embeddings", "vector"]

MAX_INPUTS = 2048


def _is_ids(value: object) -> TypeGuard[list[int]]:
    return isinstance(value, list) and bool(value) and all(isinstance(t, int) and not isinstance(t, bool)
                                                           for t in value)


def _inputs(given: object) -> list[str | list[int]]:
    if isinstance(given, str) or _is_ids(given):
        return [given]
    if isinstance(given, list) and given and all(isinstance(x, str) or _is_ids(x) for x in given):
        return given
    raise ApiError(400, "'input' is required: a string, a list of strings, a list of token ids, or a list of "
                        "token-id lists (none empty)", param="input")


def parse_embeddings(raw: bytes, *, models: list[str], max_model_len: int, policy: OutputPolicy,
                     rng: random.Random, block_size: int | None = None, behavior: Behavior | None = None
                     ) -> GenRequest:
    """Validate one embeddings request; raise ``ApiError`` naming the bad field. ``options["inputs"]`` holds
    each input's token count (one engine sequence each)."""
    behavior = behavior or Behavior()
    body = load_body(raw, models)
    inputs = _inputs(body.get("input"))
    if len(inputs) > MAX_INPUTS:
        raise ApiError(400, f"'input' holds {len(inputs)} inputs; at most {MAX_INPUTS} per request", param="input")
    fmt = body.get("encoding_format", "float")
    if fmt not in ("float", "base64"):
        raise ApiError(400, f"'encoding_format' must be 'float' or 'base64', got {fmt!r}", param="encoding_format")
    dims = opt_int(body, "dimensions", 1) or behavior.embedding_dim
    if dims > behavior.embedding_dim:
        raise ApiError(400, f"'dimensions' must be <= {behavior.embedding_dim} (this model's size), got {dims}",
                       param="dimensions")
    counts = []
    for i, item in enumerate(inputs):
        n = len(item) if isinstance(item, list) else max(1, math.ceil(len(item.split()) * policy.tokens_per_word))
        if n > max_model_len:
            raise ApiError(400, f"input[{i}] has {n} tokens; this model's maximum context length is {max_model_len}",
                           param="input", code="context_length_exceeded")
        counts.append(n)
    return GenRequest("embeddings", body["model"], False, False, sum(counts), 0, "", plan=Plan(0),
                      options={"inputs": counts, "keys": [json.dumps(x) for x in inputs], "dimensions": dims,
                               "encoding_format": fmt})


def vector(key: str, dims: int) -> list[float]:
    """The unit-length embedding of an input (``key``: its JSON), the same for the same input."""
    rng = random.Random(hashlib.sha1(key.encode(), usedforsecurity=False).digest())
    v = [rng.gauss(0.0, 1.0) for _ in range(dims)]
    norm = math.sqrt(sum(x * x for x in v)) or 1.0
    return [x / norm for x in v]


class EmbeddingsWriter:
    """The answer of one embeddings request (non-streaming only; see ``server.py``)."""

    def __init__(self, gen: GenRequest, request_id: str, created: int) -> None:
        self.gen = gen

    def body(self, created: int, cached: int | None) -> bytes:
        opts = self.gen.options
        data = []
        for i, key in enumerate(opts["keys"]):
            v = vector(key, opts["dimensions"])
            embedding: list[float] | str = v if opts["encoding_format"] == "float" else \
                base64.b64encode(struct.pack(f"<{len(v)}f", *v)).decode()
            data.append({"object": "embedding", "index": i, "embedding": embedding})
        n = self.gen.prompt_tokens
        return json.dumps({"object": "list", "data": data, "model": self.gen.model,
                           "usage": {"prompt_tokens": n, "total_tokens": n}}, separators=(",", ":")).encode()
