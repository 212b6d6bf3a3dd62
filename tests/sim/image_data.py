"""Images for the simulator's tests: real files written by Pillow (matplotlib, a dependency, brings it), as data
URLs, OpenAI image_url parts and Anthropic image blocks. (Here, not in tests/kit: only tests/sim uses them.)"""

from __future__ import annotations

import base64
import io

from PIL import Image

__all__ = ["JPEG", "PNG", "data_url", "encoded", "image_block", "image_url"]


def encoded(fmt: str, size: tuple[int, int], **save) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, (200, 30, 30)).save(out, fmt, **save)
    return out.getvalue()


def data_url(data: bytes, media: str = "image/png") -> str:
    return f"data:{media};base64,{base64.b64encode(data).decode()}"


def image_url(data: bytes, media: str = "image/png") -> dict:
    """An OpenAI chat content part."""
    return {"type": "image_url", "image_url": {"url": data_url(data, media)}}


def image_block(data: bytes, media: str = "image/png", kind: str = "base64") -> dict:
    """An Anthropic Messages image block."""
    return {"type": "image", "source": {"type": kind, "media_type": media, "data": base64.b64encode(data).decode()}}


PNG = encoded("PNG", (100, 57))
"""4 x 3 = 12 tokens at 28 px."""
JPEG = encoded("JPEG", (280, 280))
"""10 x 10 = 100 tokens at 28 px."""
