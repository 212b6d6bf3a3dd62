"""One request of any API: its body, headers, stream tracker and non-streaming parser. Pure.

``exchange(endpoint, prompts, max_tokens, ...)`` is all ``LLMUser`` needs to know about the API it speaks:

- chat, completions (/v1/chat/completions, /v1/completions): ``openai.StreamTracker``, ``openai.build_body``;
- responses (/v1/responses): ``responses.ResponsesTracker``, ``responses.build_responses_body``;
- messages (/v1/messages, ``x-api-key`` + ``anthropic-version``): ``anthropic.MessagesTracker``,
  ``anthropic.build_messages_body``;
- embeddings (/v1/embeddings; never streams; a batch of inputs): ``EmbeddingsTracker``, ``embeddings_body``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from harness.client import openai
from harness.client.reader import BodyParser
from harness.client.stream import OutputTracker, StreamProtocolError, count_ok
from harness.endpoint import Endpoint
from harness.workload.prompts import Prompt

__all__ = ["EmbeddingsTracker", "Exchange", "embeddings_body", "exchange"]


@dataclass
class Exchange:
    body: bytes | openai.SplicedBody
    """The JSON body: a ``SplicedBody`` (a list of buffers) when it carries a long prompt (``prompts.Spliced``)."""
    tracker: OutputTracker
    parser: BodyParser | None
    """Reads a non-streaming answer (None: the answer must stream)."""
    headers: dict[str, str] = field(default_factory=dict)
    bearer: bool = True
    """Send the API key as ``authorization: Bearer`` (False: the API's own header carries it)."""
    exact_length: bool = False
    """The body asks for exactly ``max_tokens`` of output (``ignore_eos`` and ``min_tokens``): an answer shorter
    than that is the endpoint not honouring the ask (``RequestRecord.short_answer``)."""


class EmbeddingsTracker(OutputTracker):
    """Embeddings answer in one JSON body; ``inputs`` is how many vectors must come back."""

    __slots__ = ("inputs",)

    def __init__(self, start: float, inputs: int) -> None:
        super().__init__(start)
        self.inputs = inputs

    def on_event(self, t: float, data: str) -> bool:
        raise StreamProtocolError("bad_response", "an embeddings answer does not stream")


def embeddings_body(model: str, texts: list, extra: dict | None = None) -> bytes | openai.SplicedBody:
    body: dict = {"model": model, "input": texts}
    if extra:
        body.update(extra)
    return openai.encode_body(body)


def parse_embeddings(tracker: OutputTracker, t: float, obj: Any) -> None:
    """``data`` has one embedding per input, ``usage.prompt_tokens`` the batch's tokens."""
    inputs = getattr(tracker, "inputs", 1)
    try:
        data, usage = obj["data"], obj.get("usage") or {}
        prompt = usage.get("prompt_tokens")
        ok = isinstance(data, list) and count_ok(prompt)
    except (TypeError, KeyError, AttributeError):
        ok = False
    if not ok:
        raise StreamProtocolError("bad_response", f"answer is not an embeddings response with data and integer "
                                                  f"usage.prompt_tokens: {json.dumps(obj)[:160]}")
    if len(data) != inputs:
        raise StreamProtocolError("bad_response", f"embeddings answer has {len(data)} vectors for {inputs} inputs")
    tracker.prompt_tokens, tracker.finish_reason, tracker.finish_t = prompt, "stop", t


def exchange(ep: Endpoint, prompts: list[Prompt], max_tokens: int, *, continuous_usage: bool = False,
             keep_text: bool = False, api_key: str | None = None, start: float = 0.0) -> Exchange:
    """The request for ``prompts`` (one, or an embeddings batch) in the endpoint's API."""
    api, extra, prompt = ep.api, ep.extra_body, prompts[0]
    if api == "embeddings":
        texts = [p.text if p.text is not None else " ".join(str(m["content"]) for m in p.messages or ())
                 for p in prompts]
        return Exchange(embeddings_body(ep.model, texts, extra), EmbeddingsTracker(start, len(prompts)),
                        parse_embeddings)
    if api == "responses":
        from harness.client import responses  # imported on first use: chat/completions runs load neither

        return Exchange(responses.build_responses_body(ep.model, prompt, max_tokens, stream=ep.stream, extra=extra),
                        responses.ResponsesTracker(start, keep_text=keep_text), responses.parse_responses_body)
    if api == "messages":
        from harness.client import anthropic

        return Exchange(anthropic.build_messages_body(ep.model, prompt, max_tokens, stream=ep.stream, extra=extra),
                        anthropic.MessagesTracker(start, keep_text=keep_text), anthropic.parse_messages_body,
                        anthropic.messages_headers(api_key, ep.anthropic_version), bearer=False)
    body = openai.build_body(api, ep.model, prompt, max_tokens, ignore_eos=ep.ignore_eos, extra=extra,
                             stream=ep.stream, continuous_usage=continuous_usage and ep.stream)
    # extra_body goes over the body: an ``ignore_eos``/``min_tokens`` of its own takes the exact length back
    exact = ep.ignore_eos and extra.get("ignore_eos", True) is True \
        and extra.get("min_tokens", max_tokens) == max_tokens
    return Exchange(body, openai.StreamTracker(start, keep_text=keep_text), openai.parse_body, exact_length=exact)
