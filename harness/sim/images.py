"""Images in a prompt: a data URL's bytes, the picture's size from its header, and what it costs in tokens. Pure.

The simulator reads only the header of an image, never its pixels (no Pillow): PNG's ``IHDR`` chunk, JPEG's
first start-of-frame marker (``SOF0``–``SOF15`` but ``DHT``/``JPG``/``DAC``, so baseline and progressive alike,
after any ``APPn``/EXIF segments), GIF's logical screen and WebP's ``VP8``/``VP8L``/``VP8X`` chunk. Anything
else, or a header cut short, is an ``ImageError`` (the API layer answers 400, as vLLM does when it cannot open
an image).

Tokens, as Qwen2-VL-like models count them: ``ceil(width / patch) × ceil(height / patch)`` with a patch of
``patch_px`` pixels (28 by default: Qwen2-VL's 14-pixel patches merged 2×2). A 1024×768 PNG is 37 × 28 = 1036
tokens; a 28×28 one is 1.

Request shapes: OpenAI's content part ``{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}``
(``read_openai``) and Anthropic's block ``{"type": "image", "source": {"type": "base64", "media_type": "image/png",
"data": "..."}}`` (``read_anthropic``; the media type must be one Anthropic takes: JPEG, PNG, GIF or WebP).

Only data URLs (``data:image/png;base64,...``) are read: the simulator is offline, so an ``http(s)://`` URL is an
``ImageError`` too. The base64 text is decoded whole (strictly: a stray character is an error), which costs about
1 ms per MB; ``bytes`` is the decoded size.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import math
import struct
from dataclasses import dataclass

__all__ = ["DEFAULT_PATCH_PX", "ImageError", "ImageInfo", "decode_data_url", "image_size", "image_tokens",
           "measure", "read_anthropic", "read_image", "read_openai"]

DEFAULT_PATCH_PX = 28
"""Pixels per side of one image token (Qwen2-VL: 14-pixel patches, merged 2×2)."""


class ImageError(ValueError):
    """An image the simulator cannot read: a bad data URL, a remote URL, an unknown or truncated header."""


@dataclass(frozen=True, slots=True)
class ImageInfo:
    """One image of a prompt, as the trace records it (``trace()``), with ``key`` for the prefix cache."""

    format: str
    """"png", "jpeg", "gif" or "webp" (from the bytes, whatever the URL's media type says)."""
    width: int
    height: int
    bytes: int
    """Decoded size."""
    tokens: int
    key: str
    """A short hash of the bytes: equal images hit the same prefix-cache blocks, as vLLM's multimodal hash does."""

    def trace(self) -> dict[str, object]:
        return {"format": self.format, "width": self.width, "height": self.height, "bytes": self.bytes,
                "tokens": self.tokens}


def decode_data_url(url: str) -> bytes:
    """The bytes of a ``data:[<media type>];base64,<data>`` URL."""
    if url.startswith(("http://", "https://")):
        raise ImageError("the simulator reads only data URLs (data:image/png;base64,...); it is offline and does "
                         "not fetch http(s) images")
    if not url.startswith("data:"):
        raise ImageError(f"expected a data URL (data:image/png;base64,...), got {url[:40]!r}")
    head, comma, data = url.partition(",")
    if not comma:
        raise ImageError("malformed data URL: no ',' between the media type and the data")
    params = head[5:].split(";")
    if "base64" not in params[1:]:
        raise ImageError(f"data URL must be base64 (data:image/png;base64,...), got {head!r}")
    if params[0] and not params[0].startswith("image/"):
        raise ImageError(f"data URL media type must be image/*, got {params[0]!r}")
    return _b64(data, "data URL")


def _b64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ImageError(f"{what} is not valid base64: {exc}") from None


def _png(data: bytes) -> tuple[int, int]:
    if len(data) < 24 or data[12:16] != b"IHDR":
        raise ImageError("PNG header cut short: no IHDR chunk")
    return struct.unpack(">II", data[16:24])


_SOF = {0xC0 + i for i in range(16)} - {0xC4, 0xC8, 0xCC}
"""Start-of-frame markers (the ones that carry the frame size); C4 (DHT), C8 (JPG) and CC (DAC) are not frames."""


def _jpeg(data: bytes) -> tuple[int, int]:
    i = 2
    while i + 4 <= len(data):
        if data[i] != 0xFF:
            raise ImageError(f"JPEG marker expected at byte {i}, found 0x{data[i]:02x}")
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in (0x01, *range(0xD0, 0xD8)):  # standalone markers: no length
            i += 2
            continue
        if marker in (0xD9, 0xDA):
            break  # end of image or start of scan before any frame header
        length = struct.unpack(">H", data[i + 2:i + 4])[0]
        if marker in _SOF:
            if i + 9 > len(data):
                break
            height, width = struct.unpack(">HH", data[i + 5:i + 9])
            return width, height
        i += 2 + length
    raise ImageError("JPEG has no start-of-frame (SOFn) marker before its scan data")


def _gif(data: bytes) -> tuple[int, int]:
    if len(data) < 10:
        raise ImageError("GIF header cut short")
    return struct.unpack("<HH", data[6:10])


def _webp(data: bytes) -> tuple[int, int]:
    chunk, body = data[12:16], data[20:30]
    if len(body) < 10:
        raise ImageError("WebP header cut short")
    if chunk == b"VP8X":
        return 1 + int.from_bytes(body[4:7], "little"), 1 + int.from_bytes(body[7:10], "little")
    if chunk == b"VP8L":
        bits = int.from_bytes(body[1:5], "little")
        return 1 + (bits & 0x3FFF), 1 + ((bits >> 14) & 0x3FFF)
    if chunk == b"VP8 ":
        w, h = struct.unpack("<HH", body[6:10])
        return w & 0x3FFF, h & 0x3FFF
    raise ImageError(f"WebP chunk {chunk!r} is not VP8, VP8L or VP8X")


_FORMATS = ((b"\x89PNG\r\n\x1a\n", "png", _png), (b"\xff\xd8", "jpeg", _jpeg), (b"GIF87a", "gif", _gif),
            (b"GIF89a", "gif", _gif))


def _sniff(data: bytes) -> tuple[str, tuple[int, int]]:
    for magic, name, read in _FORMATS:
        if data.startswith(magic):
            return name, read(data)
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp", _webp(data)
    raise ImageError(f"not a PNG, JPEG, GIF or WebP image (starts with {data[:8]!r})")


def image_size(data: bytes) -> tuple[str, int, int]:
    """(format, width, height) from the image's header."""
    name, (width, height) = _sniff(data)
    if width < 1 or height < 1:
        raise ImageError(f"{name.upper()} header says {width}x{height} pixels")
    return name, width, height


def image_tokens(width: int, height: int, patch_px: int = DEFAULT_PATCH_PX) -> int:
    """Tokens of a width × height image: one per ``patch_px``-pixel square, partial squares counting whole."""
    return math.ceil(width / patch_px) * math.ceil(height / patch_px)


def read_image(url: str, patch_px: int = DEFAULT_PATCH_PX) -> ImageInfo:
    """An image given as a data URL, measured."""
    return measure(decode_data_url(url), patch_px)


def measure(data: bytes, patch_px: int = DEFAULT_PATCH_PX) -> ImageInfo:
    """An image's decoded bytes, measured."""
    name, width, height = image_size(data)
    key = hashlib.sha1(data, usedforsecurity=False).hexdigest()[:16]
    return ImageInfo(name, width, height, len(data), image_tokens(width, height, patch_px), key)


def read_openai(part: dict, patch_px: int = DEFAULT_PATCH_PX) -> ImageInfo:
    """An OpenAI ``image_url`` content part, measured."""
    image_url = part.get("image_url")
    if not isinstance(image_url, dict) or not isinstance(image_url.get("url"), str):
        raise ImageError("image_url must be an object with a 'url' string (a data URL: data:image/png;base64,...)")
    return read_image(image_url["url"], patch_px)


_ANTHROPIC_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")


def read_anthropic(block: dict, patch_px: int = DEFAULT_PATCH_PX) -> ImageInfo:
    """An Anthropic ``image`` block with a base64 source, measured."""
    source = block.get("source")
    kind = source.get("type") if isinstance(source, dict) else None
    if kind in ("url", "file"):
        raise ImageError(f"source.type {kind!r}: the simulator reads only base64 sources; it is offline")
    if kind != "base64" or not isinstance(source, dict) or not isinstance(source.get("data"), str):
        raise ImageError('source must be {"type": "base64", "media_type": "image/png", "data": "..."}')
    if source.get("media_type") not in _ANTHROPIC_TYPES:
        raise ImageError(f"source.media_type must be one of {', '.join(_ANTHROPIC_TYPES)}, "
                         f"got {source.get('media_type')!r}")
    return measure(_b64(source["data"], "source.data"), patch_px)
