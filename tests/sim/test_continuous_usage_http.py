"""vLLM's continuous usage stats through the real simulator, and a strict server's 400 for them."""

from __future__ import annotations

import itertools
import json

import pytest

from tests.kit.sim import start_sim
from tests.kit.sim_http import CHAT, chat, post, read_chunks

pytestmark = pytest.mark.integration

CONTINUOUS = {"include_usage": True, "continuous_usage_stats": True}


def tokens_in(chunk: dict) -> int:
    choice = chunk["choices"][0]
    text = choice["text"] if "text" in choice else choice["delta"].get("content") or \
        choice["delta"].get("reasoning_content", "")
    return len(text.split())


@pytest.mark.parametrize("path,body", [
    (CHAT, chat(23, stream=True, stream_options=CONTINUOUS)),
    ("/v1/completions", {"model": "sim-tiny", "prompt": "a b c", "max_tokens": 23, "ignore_eos": True,
                         "stream": True, "stream_options": CONTINUOUS}),
])
def test_every_chunk_carries_cumulative_usage_that_sums_to_the_total(path, body):
    with start_sim("--preset", "tiny", "--tokens-per-chunk", "3", "--reasoning-tokens", "5") as sim:
        _, resp = post(sim, path, body)
        raw = resp.read()
        chunks = [json.loads(e[6:]) for e in raw[:-2].split(b"\n\n")[:-1]]
    final = chunks[-1]
    assert final["choices"] == [] and final["usage"]["completion_tokens"] == 23
    counted = [c["usage"]["completion_tokens"] for c in chunks[:-1]]
    assert counted == sorted(counted) and counted[-1] == 23
    steps = [b - a for a, b in itertools.pairwise([0, *counted])]
    assert sum(steps) == 23
    if path == CHAT:
        assert counted[0] == 0 and set(chunks[0]["usage"]) == {"prompt_tokens", "total_tokens", "completion_tokens"}
        assert b'"finish_reason":null}],"usage":{"prompt_tokens":11,"total_tokens":11,"completion_tokens":0}}' in raw
    for chunk, step in zip(chunks[:-1], steps, strict=True):
        assert chunk["usage"]["total_tokens"] == chunk["usage"]["prompt_tokens"] + chunk["usage"]["completion_tokens"]
        if path == CHAT:
            assert tokens_in(chunk) == step  # the exact token count of each chunk (the role chunk: 0)
    # prefill emits 1 token, then 3 per iteration; 5 reasoning tokens, so the emission of tokens 4-6 is split 1 + 2
    assert steps == ([0] if path == CHAT else []) + [1, 3, 1, 2, 3, 3, 3, 3, 3, 1]


def test_without_include_usage_continuous_stats_are_ignored_as_vllm_does(sim):
    _, resp = post(sim, CHAT, chat(3, stream=True, stream_options={"continuous_usage_stats": True}))
    assert all("usage" not in c for c in read_chunks(resp))


def test_a_strict_server_rejects_the_option_naming_it():
    with start_sim("--preset", "tiny", "--strict-stream-options", "on") as sim:
        _, resp = post(sim, CHAT, chat(3, stream=True, stream_options=CONTINUOUS))
        error = json.loads(resp.read())["error"]
        assert resp.status == 400
        assert error == {"message": "Unknown parameter: 'stream_options.continuous_usage_stats'.",
                         "type": "invalid_request_error", "param": "stream_options.continuous_usage_stats",
                         "code": "unknown_parameter"}
        _, resp = post(sim, CHAT, chat(3, stream=True, stream_options={"include_usage": True}))  # the fallback
        assert resp.status == 200 and read_chunks(resp)[-1]["usage"]["completion_tokens"] == 3
