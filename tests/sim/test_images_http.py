"""Images over real HTTP: chat image_url parts and Messages image blocks are prefilled (the engine's prompt-token
counter moves by usage's count), a bad or remote image is a 400, and the trace lists each image."""

from __future__ import annotations

import json

import pytest

from tests.kit.sim import start_sim
from tests.kit.sim_http import CHAT, chat, post, scrape
from tests.sim.image_data import JPEG, PNG, image_block, image_url

pytestmark = pytest.mark.integration


def with_images(*parts: dict) -> dict:
    body = chat(4)
    body["messages"] = [{"role": "user", "content": [{"type": "text", "text": "one two three four"}, *parts]}]
    return body


def test_images_are_prefilled_refused_when_bad_and_traced(tmp_path):
    trace = tmp_path / "trace.jsonl"
    with start_sim("--preset", "tiny", "--trace-file", str(trace)) as sim:
        _, resp = post(sim, CHAT, chat(4))
        plain = json.loads(resp.read())["usage"]["prompt_tokens"]
        before = scrape(sim)["vllm:prompt_tokens_total"]
        _, resp = post(sim, CHAT, with_images(image_url(PNG), image_url(JPEG, "image/jpeg")))
        usage = json.loads(resp.read())["usage"]
        assert resp.status == 200 and usage["prompt_tokens"] == plain + 12 + 100
        assert scrape(sim)["vllm:prompt_tokens_total"] - before == usage["prompt_tokens"]

        _, resp = post(sim, CHAT, with_images({"type": "image_url", "image_url": {"url": "https://x.test/a.png"}}))
        err = json.loads(resp.read())["error"]
        assert resp.status == 400 and "only data URLs" in err["message"] and err["type"] == "invalid_request_error"

        msg = {"model": "sim-tiny", "max_tokens": 4, "messages": [{"role": "user", "content": [image_block(PNG)]}]}
        _, resp = post(sim, "/v1/messages", msg, {"anthropic-version": "2023-06-01"})
        assert resp.status == 200 and json.loads(resp.read())["usage"]["input_tokens"] == 3 + 4 + 12
    rows = [json.loads(line) for line in trace.read_text().splitlines()]
    assert [r["kind"] for r in rows] == ["chat", "chat", "messages"]  # the 400 never reached the engine
    assert rows[0]["images"] == [] and rows[2]["images"][0]["tokens"] == 12
    assert rows[1]["images"] == [
        {"format": "png", "width": 100, "height": 57, "bytes": len(PNG), "tokens": 12},
        {"format": "jpeg", "width": 280, "height": 280, "bytes": len(JPEG), "tokens": 100}]
    assert rows[1]["prompt_tokens"] == plain + 112 and all(r["model"] == "sim-tiny" for r in rows)
