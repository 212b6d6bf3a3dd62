"""Images in chat requests (``workload.images``): the block, the pictures, and the content parts. Pure.

::

    workload:
      images: {count: {dist: uniform, min: 0, max: 2}, width: 1024, height: {dist: uniform, min: 480, max: 960}}

Each request draws ``count`` images (0 allowed), each its ``width`` × ``height`` (``DIST``s, as the token lengths;
each side at most ``MAX_SIDE`` pixels), from a seeded stream of its own (``images``: the lengths and prompts are the
same with and without images). An image is generated here, never read from disk: a PNG (RGB, 8 bits) of a diagonal
gradient under low-amplitude noise (4 random bits per channel: ~3 bytes a pixel, as a photo's PNG), made by
C-speed byte operations (``bytes.translate``, big-integer XOR, ``zlib`` Huffman-only): ~50 ms for 1024×1024. Its
pixels depend only on the workload's seed and its size, so every worker and every run sends the same bytes for the
same size. ``format: jpeg`` encodes the same pixels as a baseline JPEG (Pillow, quality 90, 4:4:4, imported only
then: ~90 ms for 1024×1024 against the PNG's ~60 ms; ~8× fewer bytes at 640×480), deterministic for one Pillow
version.

Each picture is encoded once per worker and size and kept, base64 and all, in a small LRU (``ImageCache``,
``CACHE_SIZE`` sizes); the request's content part holds it as a ``prompts.Spliced``, so ``encode_body`` puts the
cached base64 buffer into the body without copying it (as long prompts are spliced).

Parts: OpenAI chat ``{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}``, Anthropic
messages ``{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "..."}}``; the user
message becomes ``[{"type": "text", "text": ...}, *images]``: the text (with its unique nonce) first, so images of
the same size do not make a shared prefix of their own.
"""

from __future__ import annotations

import base64
import io
import random
import struct
import zlib
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass

from harness.checker import Checker
from harness.workload.lengths import Length
from harness.workload.prompts import Prompt, Spliced
from harness.workload.spec import length_from_spec

__all__ = ["CACHE_SIZE", "IMAGE_APIS", "MAX_COUNT", "MAX_SIDE", "ImageCache", "ImageDrawer", "ImageSpec",
           "images_from_spec", "jpeg_bytes", "pixel_rows", "png_bytes"]

IMAGE_APIS = ("chat", "messages")
"""The APIs whose requests can carry images (OpenAI chat content parts, Anthropic image blocks)."""
MAX_SIDE = 8192
"""Pixels per side at most: past it a size is a typo (a 8192×8192 PNG is ~130 MB of base64)."""
MAX_COUNT = 100
"""Images per request at most."""
CACHE_SIZE = 16
"""Sizes whose encoded image a worker keeps (least recently used dropped first)."""
_KEYS = ("count", "width", "height", "format")


@dataclass(frozen=True, kw_only=True)
class ImageSpec:
    count: Length
    """Images per request (0 allowed)."""
    width: Length
    height: Length
    format: str = "png"


def images_from_spec(node: object, path: str, check: Checker) -> ImageSpec | None:
    """The ``images`` block at ``path``; problems go to ``check`` (None then)."""
    if check.mapping(node, path, _KEYS, required=("count", "width", "height")) is None:
        return None
    assert isinstance(node, dict)
    fmt = check.string(node, "format", path, "png", choices=("png", "jpeg"))
    if fmt == "jpeg":
        try:
            import PIL.Image  # noqa: F401 - a dependency; checked so a broken install says so here, not mid-run
        except ImportError:
            check.fail(f"{path}.format", "jpeg needs Pillow (pip install pillow), which this install lacks; or use "
                                         "format: png")
    before = len(check.problems)
    count = _bounded(node.get("count"), f"{path}.count", check, MAX_COUNT, low=0)
    width = _bounded(node.get("width"), f"{path}.width", check, MAX_SIDE)
    height = _bounded(node.get("height"), f"{path}.height", check, MAX_SIDE)
    if count is None or width is None or height is None or len(check.problems) > before:
        return None
    return ImageSpec(count=count, width=width, height=height, format=fmt or "png")


def _bounded(node: object, path: str, check: Checker, most: int, low: int = 1) -> Length | None:
    """A ``DIST`` whose draws stay within [``low``, ``most``]: a larger fixed value or ``max`` is refused; a
    distribution without ``max`` is clipped at ``most``. ``low`` is the default ``min`` (0 for a count)."""
    bare = isinstance(node, int) and not isinstance(node, bool)
    if bare:
        node = {"dist": "fixed", "value": node}
    if isinstance(node, dict) and "min" not in node and node.get("dist") != "uniform":
        node = {**node, "min": low}
    if isinstance(node, dict):
        for key in ("value", "max"):
            v = node.get(key)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and (v > most or (key == "value" and v < low)):
                check.fail(path if bare else f"{path}.{key}", f"must be {low}-{most}, got {v}")
                return None
    length = length_from_spec(node, path, check)
    if length is not None and length.lo < low:
        check.fail(f"{path}.min", f"must be >= {low}, got {length.lo}")
        return None
    if length is not None:
        length.hi = min(length.hi, most)
    return length


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


_SHIFT = [bytes((i + d) & 255 for i in range(256)) for d in range(256)]
"""``_SHIFT[d]`` adds d (mod 256) to every byte of a row (``bytes.translate``)."""


def pixel_rows(seed: int, width: int, height: int) -> Iterator[bytes]:
    """The picture's RGB rows (3 bytes a pixel): a gradient under 4-bit noise, the same for the same arguments."""
    rng = random.Random(f"kneecap/{seed}/image/{width}x{height}")
    hue = rng.getrandbits(24).to_bytes(3, "big")
    base = b"".join(bytes(((x * 255) // max(1, width - 1) + c) & 255 for c in hue) for x in range(width))
    n = 3 * width
    mask = int.from_bytes(b"\x0f" * n, "big")
    for y in range(height):
        row = base.translate(_SHIFT[(y * 255) // max(1, height - 1)])
        noisy = int.from_bytes(row, "big") ^ (int.from_bytes(rng.randbytes(n), "big") & mask)
        yield noisy.to_bytes(n, "big")


def jpeg_bytes(seed: int, width: int, height: int) -> bytes:
    """The picture of ``png_bytes`` as a baseline JPEG (Pillow, quality 90, no chroma subsampling)."""
    from PIL import Image  # only for format: jpeg (a worker without images never loads it)

    out = io.BytesIO()
    picture = Image.frombytes("RGB", (width, height), b"".join(pixel_rows(seed, width, height)))
    picture.save(out, "JPEG", quality=90, subsampling=0)  # 4:4:4: a small picture keeps its colours
    return out.getvalue()


def png_bytes(seed: int, width: int, height: int) -> bytes:
    """An RGB PNG of ``width`` × ``height``: a gradient under 4-bit noise, the same for the same arguments."""
    packer = zlib.compressobj(1, zlib.DEFLATED, 15, 8, zlib.Z_HUFFMAN_ONLY)  # noise: matching finds nothing
    body = [packer.compress(b"\x00" + row) for row in pixel_rows(seed, width, height)]
    body.append(packer.flush())
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", b"".join(body))
            + _chunk(b"IEND", b""))


class ImageCache:
    """A worker's encoded images, as ready content parts, by (API, seed, width, height): at most ``size`` of them,
    the least recently used dropped first. ``encoded`` counts the images made (a test's view of the hits)."""

    def __init__(self, size: int = CACHE_SIZE) -> None:
        self.size, self.encoded = size, 0
        self._parts: OrderedDict[tuple, dict] = OrderedDict()

    def part(self, api: str, seed: int, width: int, height: int, fmt: str = "png") -> dict:
        """The content part of one image (shared: read, never changed, by every request that sends it)."""
        key = (api, seed, width, height, fmt)
        part = self._parts.get(key)
        if part is not None:
            self._parts.move_to_end(key)
            return part
        encode = jpeg_bytes if fmt == "jpeg" else png_bytes
        data = base64.b64encode(encode(seed, width, height))  # ASCII, nothing to escape: JSON string content
        self.encoded += 1
        media = f"image/{fmt}"
        if api == "messages":
            part = {"type": "image", "source": {"type": "base64", "media_type": media, "data": Spliced((data,))}}
        else:
            part = {"type": "image_url", "image_url": {"url": Spliced((f"data:{media};base64,".encode(), data))}}
        self._parts[key] = part
        if len(self._parts) > self.size:
            self._parts.popitem(last=False)
        return part


class ImageDrawer:
    """Adds a request's drawn images to its prompt (``attach``), from the worker's ``cache``."""

    def __init__(self, spec: ImageSpec, *, api: str, seed: int, cache: ImageCache) -> None:
        if api not in IMAGE_APIS:
            raise ValueError(f"images are for api {' or '.join(IMAGE_APIS)}, not {api}")
        self.spec, self.api, self.seed, self.cache = spec, api, seed, cache

    def draw(self, rng: random.Random) -> list[tuple[int, int]]:
        """The next request's images: (width, height) each."""
        spec = self.spec
        return [(spec.width.sample(rng), spec.height.sample(rng)) for _ in range(spec.count.sample(rng))]

    def attach(self, prompt: Prompt, rng: random.Random) -> tuple[Prompt, int, int]:
        """(the prompt with the next request's images after its user text, images, total pixels); the prompt as it
        is when none are drawn."""
        sizes = self.draw(rng)
        if not sizes or not prompt.messages:
            return prompt, 0, 0
        *before, last = prompt.messages
        parts = [{"type": "text", "text": last["content"]},
                 *(self.cache.part(self.api, self.seed, w, h, self.spec.format) for w, h in sizes)]
        messages = [*before, {**last, "content": parts}]
        return Prompt(messages, None, prompt.words, prompt.target_tokens), len(sizes), sum(w * h for w, h in sizes)
