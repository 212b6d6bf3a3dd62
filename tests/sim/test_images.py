"""Image headers, data URLs and image tokens (``harness/sim/images.py``), on plain bytes: Pillow writes real files
(``image_data.py``), hand-built headers cover the awkward cases."""

from __future__ import annotations

import struct

import pytest

from harness.sim.images import ImageError, decode_data_url, image_size, image_tokens, measure, read_image
from tests.sim.image_data import data_url, encoded


@pytest.mark.parametrize("fmt,name,save", [
    ("PNG", "png", {}), ("JPEG", "jpeg", {}), ("JPEG", "jpeg", {"progressive": True}), ("GIF", "gif", {}),
    ("WEBP", "webp", {}), ("WEBP", "webp", {"lossless": True}),
])
@pytest.mark.parametrize("size", [(1, 1), (640, 480), (1023, 77), (3000, 2)])
def test_size_is_read_from_real_files(fmt, name, save, size):
    assert image_size(encoded(fmt, size, **save)) == (name, *size)


def test_jpeg_frame_after_an_exif_segment_is_found():
    plain = encoded("JPEG", (300, 200))
    exif = b"\xff\xe1" + struct.pack(">H", 2 + 5000) + b"Exif\x00" + bytes(4995)
    assert image_size(plain[:2] + exif + plain[2:]) == ("jpeg", 300, 200)


def test_webp_extended_header_gives_the_canvas():
    vp8x = b"RIFF" + struct.pack("<I", 30) + b"WEBP" + b"VP8X" + struct.pack("<I", 10) + bytes(4) \
        + (1919).to_bytes(3, "little") + (1079).to_bytes(3, "little")
    assert image_size(vp8x) == ("webp", 1920, 1080)


@pytest.mark.parametrize("data,message", [
    (b"hello world, not an image", "not a PNG, JPEG, GIF or WebP image"),
    (b"\x89PNG\r\n\x1a\n\x00\x00", "PNG header cut short"),
    (b"\xff\xd8\xff\xda\x00\x08", "no start-of-frame"),
    (b"\xff\xd8\x00\x00\x00\x00", "JPEG marker expected at byte 2"),
    (b"GIF89a\x01", "GIF header cut short"),
    (b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + struct.pack(">II", 0, 5), "says 0x5 pixels"),
])
def test_bad_headers_are_refused_with_a_reason(data, message):
    with pytest.raises(ImageError, match=message):
        image_size(data)


def test_a_truncated_real_jpeg_is_refused():
    whole = encoded("JPEG", (50, 40))
    frame = whole.index(b"\xff\xc0")
    with pytest.raises(ImageError, match="no start-of-frame"):
        image_size(whole[:frame + 6])


@pytest.mark.parametrize("w,h,patch,tokens", [
    (28, 28, 28, 1), (29, 28, 28, 2), (1024, 768, 28, 37 * 28), (1, 1, 28, 1), (448, 448, 14, 32 * 32),
])
def test_tokens_count_partial_patches_whole(w, h, patch, tokens):
    assert image_tokens(w, h, patch) == tokens


def test_measure_records_format_size_bytes_tokens_and_a_content_key():
    png = encoded("PNG", (100, 57))
    info = measure(png)
    assert info.trace() == {"format": "png", "width": 100, "height": 57, "bytes": len(png), "tokens": 4 * 3}
    assert measure(png).key == info.key != measure(encoded("PNG", (100, 58))).key


def test_data_url_round_trip_and_media_type_is_not_trusted():
    jpeg = encoded("JPEG", (64, 64))
    assert decode_data_url(data_url(jpeg, "image/jpeg")) == jpeg
    assert read_image(data_url(jpeg, "image/png"), patch_px=32).format == "jpeg"  # the bytes decide, as PIL does
    assert read_image(data_url(jpeg, "image/png"), patch_px=32).tokens == 4


@pytest.mark.parametrize("url,message", [
    ("https://example.com/cat.png", "only data URLs"),
    ("http://example.com/cat.png", "only data URLs"),
    ("file:///cat.png", "expected a data URL"),
    ("data:image/png;base64", "no ','"),
    ("data:image/png,rawbytes", "must be base64"),
    ("data:text/plain;base64,aGVsbG8=", "media type must be image/*"),
    ("data:image/png;base64,not*base64!", "not valid base64"),
    ("data:image/png;base64,aGVsbG8=", "not a PNG, JPEG, GIF or WebP image"),
])
def test_bad_urls_are_refused_with_a_reason(url, message):
    with pytest.raises(ImageError, match=message):
        read_image(url)
