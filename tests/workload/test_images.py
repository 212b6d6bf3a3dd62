"""Images in chat requests (``workload/images.py``): the block and its refusals by key path, the generated PNGs
(their header and pixels decode to the drawn size), determinism by seed, the cache, the request bodies. Pure."""

from __future__ import annotations

import base64
import json
import random
import zlib

import pytest

from harness.client.anthropic import build_messages_body
from harness.client.openai import build_body
from harness.scenario import ScenarioError
from harness.sim.images import image_size, read_anthropic, read_openai
from harness.workload.images import ImageCache, ImageDrawer, jpeg_bytes, png_bytes
from harness.workload.prompts import PromptBuilder, SplicedBody
from harness.workload.sampler import RequestSampler
from tests.kit.scenarios import SMALL, parse_with


def _problems(extra: str, **kw) -> list[str]:
    with pytest.raises(ScenarioError) as err:
        parse_with(extra, **kw)
    return err.value.problems


def test_the_block_parses_count_may_be_zero():
    spec = parse_with("{images: {count: {dist: uniform, min: 0, max: 2}, width: 640, height: "
                  "{dist: uniform, min: 100, max: 200}, format: png}}").workload.images
    rng = random.Random(1)
    counts = {spec.count.sample(rng) for _ in range(300)}
    assert counts == {0, 1, 2} and spec.width.sample(rng) == 640 and spec.format == "png"
    assert all(100 <= spec.height.sample(rng) <= 200 for _ in range(100))
    assert parse_with("{images: {count: 0, width: 8, height: 8}}").workload.images.count.sample(rng) == 0
    lognormal = parse_with("{images: {count: 1, width: {dist: lognormal, median: 5000, sigma: 3}, height: 8}}")
    assert max(lognormal.workload.images.width.sample(rng) for _ in range(500)) == 8192  # clipped at MAX_SIDE


@pytest.mark.parametrize("extra, problem", [
    ("{images: {count: 1, width: 8, height: 8, format: gif}}", "workload.images.format"),
    ("{images: {count: 1, width: {dist: lognormal, median: 0}, height: 8}}", "workload.images.width"),
    ("{images: {count: 1, width: {dist: nope}, height: 8}}", "workload.images.width.dist"),
    ("{images: {count: 1, width: 9000, height: 8}}", "workload.images.width: must be 1-8192, got 9000"),
    ("{images: {count: 1, width: 8, height: {dist: uniform, min: 1, max: 10000}}}",
     "workload.images.height.max: must be 1-8192, got 10000"),
    ("{images: {count: 101, width: 8, height: 8}}", "workload.images.count: must be 0-100, got 101"),
    ("{images: {count: -1, width: 8, height: 8}}", "workload.images.count"),
    ("{images: {width: 8, height: 8}}", "workload.images: missing required key 'count'"),
    ("{images: {count: 1, width: 8, height: 8, colour: red}}", "workload.images"),
    ("{images: [1, 2]}", "workload.images: expected a mapping"),
])
def test_a_bad_block_is_refused_with_its_key_path(extra, problem):
    problems = _problems(extra)
    assert any(p.startswith(problem) for p in problems), problems


@pytest.mark.parametrize("api", ["completions", "responses", "embeddings"])
def test_other_apis_are_refused_naming_the_key(api):
    assert _problems("{images: {count: 1, width: 8, height: 8}}", endpoint=f"{{api: {api}}}") == [
        f"workload.images: images are for api: chat or messages (this endpoint's api is {api})"]


def test_a_mix_class_sets_its_own_or_takes_the_workloads():
    text = """
name: m
endpoint: {api: chat, model: m}
workload:
  images: {count: 1, width: 8, height: 8}
  mix:
    - {name: plain, weight: 1, input_tokens: 10, output_tokens: 5}
    - {name: seen, weight: 1, input_tokens: 10, output_tokens: 5, images: {count: 2, width: 30, height: 20}}
"""
    plain, seen = parse_with(text=text).workload.mix
    rng = random.Random(0)
    assert plain.workload.images.width.sample(rng) == 8 and seen.workload.images.count.sample(rng) == 2
    no_top = text.replace("  images: {count: 1, width: 8, height: 8}\n", "")
    with pytest.raises(ScenarioError) as err:
        parse_with(text=no_top.replace("api: chat", "api: completions"))
    assert err.value.problems == ["workload.mix.seen.images: images are for api: chat or messages (this endpoint's "
                                  "api is completions)"]
    with pytest.raises(ScenarioError) as err:
        parse_with(text=no_top.replace("width: 30", "width: 0"))
    assert err.value.problems[0].startswith("workload.mix.seen.images.width"), err.value.problems


def test_refused_with_sessions():
    text = SMALL.replace("  input_tokens: 100\n  output_tokens: 50\n", """  images: {count: 1, width: 8, height: 8}
  sessions: {turns: 2, first_input_tokens: 10, turn_input_tokens: 5, output_tokens: 5}
""")
    with pytest.raises(ScenarioError) as err:
        parse_with(text=text)
    assert any(p.startswith("workload.images: not with sessions yet") for p in err.value.problems), err.value.problems


def _pixels(png: bytes) -> bytes:
    """The PNG's IDAT data inflated (filter bytes included)."""
    i, idat = 8, b""
    while i < len(png):
        n = int.from_bytes(png[i:i + 4], "big")
        if png[i + 4:i + 8] == b"IDAT":
            idat += png[i + 8:i + 8 + n]
        i += 12 + n
    return zlib.decompress(idat)


@pytest.mark.parametrize("width, height", [(1, 1), (3, 2), (28, 28), (640, 480), (1, 300)])
def test_the_png_decodes_to_its_size(width, height):
    png = png_bytes(5, width, height)
    assert image_size(png) == ("png", width, height)
    raw = _pixels(png)
    assert len(raw) == height * (1 + 3 * width) and raw[::1 + 3 * width] == bytes(height)  # rows, filter 0 each
    pil = pytest.importorskip("PIL.Image")
    import io

    with pil.open(io.BytesIO(png)) as im:
        im.load()
        assert im.size == (width, height) and im.mode == "RGB"


@pytest.mark.parametrize("width, height", [(1, 1), (3, 2), (28, 28), (640, 480)])
def test_the_jpeg_is_the_pngs_picture_and_decodes_to_its_size(width, height):
    import io

    from PIL import Image

    jpeg = jpeg_bytes(5, width, height)
    assert image_size(jpeg) == ("jpeg", width, height) and jpeg == jpeg_bytes(5, width, height)
    with Image.open(io.BytesIO(jpeg)) as im, Image.open(io.BytesIO(png_bytes(5, width, height))) as ref:
        assert im.size == (width, height) and im.mode == "RGB" and im.format == "JPEG"
        # the same pixels, lossy: a few levels of 255 off each (the 4-bit noise is what JPEG drops), none on average
        got, want = im.tobytes(), ref.convert("RGB").tobytes()
        assert sum(abs(a - b) for a, b in zip(got, want, strict=True)) / len(want) < 8
        assert abs(sum(got) - sum(want)) / len(want) < 1


def test_format_jpeg_parses_and_its_parts_say_image_jpeg():
    spec = parse_with("{images: {count: 1, width: 16, height: 8, format: jpeg}}").workload.images
    assert spec.format == "jpeg"
    cache = ImageCache()
    chat, messages = cache.part("chat", 1, 16, 8, "jpeg"), cache.part("messages", 1, 16, 8, "jpeg")
    assert str(chat["image_url"]["url"]).startswith("data:image/jpeg;base64,/9j/")
    assert messages["source"]["media_type"] == "image/jpeg" and cache.encoded == 2
    assert cache.part("chat", 1, 16, 8, "png") is not chat  # one picture per format


def test_the_png_is_the_seeds_and_sizes_alone():
    assert png_bytes(5, 64, 48) == png_bytes(5, 64, 48)
    assert png_bytes(5, 64, 48) != png_bytes(6, 64, 48)
    assert len({png_bytes(5, 64, 48), png_bytes(5, 48, 64), png_bytes(5, 64, 47)}) == 3


def _sampler(api: str, seed: int, cache: ImageCache, spec_text: str = "{count: {dist: uniform, min: 0, max: 3}, "
             "width: {dist: uniform, min: 20, max: 90}, height: {dist: uniform, min: 20, max: 90}}"):
    spec = parse_with(f"{{images: {spec_text}}}", endpoint=f"{{api: {api}}}").workload.images
    return RequestSampler(input_tokens=_len(40), output_tokens=_len(5), joint=None, api=api, seed=seed, worker=3,
                          prompts=PromptBuilder(api=api, seed=seed),
                          images=ImageDrawer(spec, api=api, seed=seed, cache=cache))


def _len(n: int):
    from harness.workload.lengths import Fixed

    return Fixed(n)


def _sent(api: str, plan) -> list:
    """The images of a request's body as the simulator reads them."""
    body = build_body(api, "m", plan.prompt, plan.max_tokens, ignore_eos=False) if api == "chat" else \
        build_messages_body("m", plan.prompt, plan.max_tokens)
    data = bytes(body) if isinstance(body, SplicedBody) else body
    user = json.loads(data)["messages"][-1]["content"]
    read = read_openai if api == "chat" else read_anthropic
    assert isinstance(user, list) and user[0]["type"] == "text"
    return [read(part) for part in user[1:]]


@pytest.mark.parametrize("api", ["chat", "messages"])
def test_requests_carry_the_drawn_images_the_same_for_the_same_seed(api):
    cache = ImageCache()
    a, b, c = _sampler(api, 1, cache), _sampler(api, 1, ImageCache()), _sampler(api, 2, ImageCache())
    plans = [a.next() for _ in range(40)]
    again = [b.next() for _ in range(40)]
    assert [p.images for p in plans] == [p.images for p in again]  # deterministic by seed
    assert [p.images for p in plans] != [c.next().images for _ in range(40)]
    assert {p.images[0] for p in plans} == {0, 1, 2, 3}
    for plan in plans:
        count, pixels = plan.images
        if count == 0:
            assert isinstance(plan.prompt.messages[-1]["content"], str)  # no parts without images
            continue
        sent = _sent(api, plan)
        assert len(sent) == count and sum(i.width * i.height for i in sent) == pixels
        assert all(i.format == "png" and 20 <= i.width <= 90 and 20 <= i.height <= 90 for i in sent)
    # the lengths are the same with and without images: their own stream
    plain = RequestSampler(input_tokens=_len(40), output_tokens=_len(5), joint=None, api=api, seed=1, worker=3,
                           prompts=PromptBuilder(api=api, seed=1))
    texts = [plain.next().prompt.messages[-1]["content"] for _ in range(40)]
    assert texts == [p.prompt.messages[-1]["content"] if p.images[0] == 0 else p.prompt.messages[-1]["content"][0]
                     ["text"] for p in plans]


def test_an_image_is_encoded_once_per_size_and_sent_without_a_copy():
    cache = ImageCache(size=2)
    sampler = _sampler("chat", 1, cache, "{count: 2, width: 2000, height: {dist: uniform, min: 100, max: 101}}")
    plans = [sampler.next() for _ in range(20)]
    assert cache.encoded == 2  # two sizes, each encoded once
    body = build_body("chat", "m", plans[0].prompt, 5, ignore_eos=False)
    assert isinstance(body, SplicedBody)
    url = cache.part("chat", 1, 2000, 100)["image_url"]["url"]
    assert any(part is url.parts[1] for part in body.parts)  # the cached base64 buffer itself, not a copy
    assert base64.b64decode(url.parts[1]) == png_bytes(1, 2000, 100)
    cache.part("chat", 1, 5, 5)
    cache.part("chat", 1, 6, 6)
    assert cache.encoded == 4 and cache.part("chat", 1, 2000, 100) and cache.encoded == 5  # the LRU dropped it


def test_a_body_with_several_spliced_strings_is_the_json_of_their_text():
    from harness.workload.prompts import Spliced, encode_body

    big = b"x" * 5000
    body = {"a": [{"t": Spliced((b"ab", big))}, {"u": Spliced((b"cd",))}, "e"], "f": Spliced((big,))}
    plain = {"a": [{"t": "ab" + big.decode()}, {"u": "cd"}, "e"], "f": big.decode()}
    assert bytes(encode_body(body)) == json.dumps(plain, separators=(",", ":")).encode()
