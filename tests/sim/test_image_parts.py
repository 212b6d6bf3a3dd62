"""Image parts in chat and Messages requests, on plain data: counted into prompt tokens, listed for the trace,
keyed for the prefix cache; bad or remote images refused with a 400 naming the part."""

from __future__ import annotations

import json
import random

import pytest

from harness.sim.anthropic import AnthropicError, parse_messages
from harness.sim.openai import ApiError, OutputPolicy, parse_request
from harness.sim.plan import Behavior
from tests.sim.image_data import JPEG, PNG, encoded, image_block, image_url


def chat(*parts: dict, behavior: Behavior | None = None, block_size: int | None = None, **body):
    full = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "what is this"}, *parts]}], **body}
    return parse_request("chat", json.dumps(full).encode(), models=["m"], max_model_len=8192, policy=OutputPolicy(),
                         rng=random.Random(0), block_size=block_size, behavior=behavior)


def messages(*blocks: dict, block_size: int | None = None):
    full = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "what is this"}, *blocks]}]}
    return parse_messages(json.dumps(full).encode(), headers={"anthropic-version": "2023-06-01"}, models=["m"],
                          max_model_len=8192, policy=OutputPolicy(), rng=random.Random(0), block_size=block_size)


def test_chat_image_tokens_join_the_prompt_and_the_trace_list():
    plain = chat().prompt_tokens
    got = chat(image_url(PNG), image_url(JPEG, "image/jpeg"))
    assert got.prompt_tokens == plain + 12 + 100
    assert [i.trace() for i in got.images] == [
        {"format": "png", "width": 100, "height": 57, "bytes": len(PNG), "tokens": 12},
        {"format": "jpeg", "width": 280, "height": 280, "bytes": len(JPEG), "tokens": 100}]
    assert chat().images == []


def test_patch_size_is_the_flag():
    assert chat(image_url(PNG), behavior=Behavior(image_patch_px=14)).prompt_tokens == chat().prompt_tokens + 8 * 5


def test_images_in_several_messages_and_with_tools_each_count_once():
    body = {"messages": [{"role": "system", "content": "be brief"},
                         {"role": "user", "content": [image_url(PNG)]},
                         {"role": "assistant", "content": "a cat"},
                         {"role": "user", "content": [{"type": "text", "text": "and this"}, image_url(JPEG)]}],
            "tools": [{"type": "function", "function": {"name": "f"}}]}
    with_images = chat(**body)
    for m in body["messages"]:
        if isinstance(m["content"], list):
            m["content"] = [p for p in m["content"] if p["type"] == "text"]
    assert with_images.prompt_tokens == chat(**body).prompt_tokens + 112 and len(with_images.images) == 2


@pytest.mark.parametrize("url,message", [
    ("https://example.com/cat.png", "only data URLs"),
    ("data:image/png;base64,@@@@", "not valid base64"),
    ("data:image/png;base64,aGVsbG8gd29ybGQ=", "not a PNG, JPEG, GIF or WebP image"),
])
def test_bad_chat_images_are_400_naming_the_part(url, message):
    with pytest.raises(ApiError) as err:
        chat({"type": "image_url", "image_url": {"url": url}})
    assert err.value.status == 400 and message in err.value.message
    assert err.value.param == "messages[0].content[1]" and err.value.message.startswith("messages[0].content[1]: ")


def test_image_url_must_be_an_object_with_a_url():
    with pytest.raises(ApiError, match="image_url must be an object with a 'url' string"):
        chat({"type": "image_url", "image_url": "data:image/png;base64,xx"})


def test_same_image_same_prefix_blocks_another_image_other_blocks():
    def keys(data: bytes) -> list[int]:
        system = {"role": "system", "content": "a b c d e f g h"}  # with its 4 template units: 3 blocks of 4
        return chat(block_size=4, messages=[system, {"role": "user", "content": [image_url(data)]}]).block_keys

    one, again, other = keys(PNG), keys(PNG), keys(encoded("PNG", (100, 56)))
    assert one == again and len(one) > 3
    assert one[:3] == other[:3] and one[3] != other[3]


def test_messages_image_blocks_count_like_chat():
    plain = messages().prompt_tokens
    got = messages(image_block(PNG), image_block(JPEG, "image/jpeg"))
    assert got.prompt_tokens == plain + 112 and [i.format for i in got.images] == ["png", "jpeg"]
    inside = messages({"type": "tool_result", "tool_use_id": "t", "content": [image_block(PNG)]})
    assert inside.prompt_tokens == plain + 12


@pytest.mark.parametrize("block,message", [
    (image_block(PNG, kind="url"), "source.type 'url': the simulator reads only base64 sources"),
    (image_block(PNG, media="image/bmp"), "source.media_type must be one of image/jpeg, image/png"),
    ({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "!!"}}, "not valid base64"),
    ({"type": "image", "source": {}}, 'source must be {"type": "base64"'),
    (image_block(b"GIF89a\x01\x00"), "GIF header cut short"),
])
def test_bad_messages_images_are_400_in_anthropic_shape(block, message):
    with pytest.raises(AnthropicError) as err:
        messages(block)
    assert err.value.status == 400 and err.value.message.startswith("messages.0.content[1]: ")
    assert message in err.value.message and json.loads(err.value.render())["type"] == "error"
