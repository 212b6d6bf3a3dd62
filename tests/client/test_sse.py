"""SSE decoding on awkward chunks: ``LineDecoder`` and sseclient-py, the reference, on the same cases."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pytest
import sseclient

from harness.client.sse import Event, LineDecoder, OversizedLine

VLLM = (b'data: {"id":"a","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
        b'data: {"id":"a","choices":[{"index":0,"delta":{"content":" caf\xc3\xa9"}}]}\n\n'
        b'data: [DONE]\n\n')


def splits(data: bytes, size: int) -> list[tuple[float, bytes]]:
    return [(float(i), data[i:i + size]) for i in range(0, len(data), size)]


def sseclient_events(chunks: Iterable[tuple[float, bytes]]) -> Iterator[Event]:
    """sseclient-py (a pull parser) over the same chunks, as the same ``Event`` objects (no line-length limit)."""
    clock = [0.0]

    def raw() -> Iterator[bytes]:
        for t, chunk in chunks:
            clock[0] = t
            yield chunk

    for ev in sseclient.SSEClient(raw()).events():
        yield Event(clock[0], ev.data, ev.event or "message")


def line_decode(chunks):
    dec = LineDecoder()
    return [(e.t, e.event, e.data) for t, c in chunks for e in dec.feed(c, t)]


def sseclient_decode(chunks):
    return [(e.t, e.event, e.data) for e in sseclient_events(chunks)]


DECODERS = [line_decode, sseclient_decode]


@pytest.mark.parametrize("decode", DECODERS)
@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, 10_000])
def test_vllm_stream_split_anywhere(decode, size):
    """Split inside 'data:', inside the JSON, inside the UTF-8 'é', between the two newlines."""
    got = decode(splits(VLLM, size))
    assert [d for _, _, d in got] == [
        '{"id":"a","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}',
        '{"id":"a","choices":[{"index":0,"delta":{"content":" café"}}]}',
        "[DONE]"]


@pytest.mark.parametrize("decode", DECODERS)
def test_crlf_comments_keepalives_and_event_names(decode):
    data = b": keep-alive\r\n\r\nevent: error\r\ndata: {\"x\": 1}\r\n\r\n:ping\n\ndata: b\n\n"
    for size in (1, 5, len(data)):
        got = decode(splits(data, size))
        assert [(e, d) for _, e, d in got] == [("error", '{"x": 1}'), ("message", "b")]


@pytest.mark.parametrize("decode", DECODERS)
def test_multiline_data_is_joined(decode):
    assert [d for _, _, d in decode([(0.0, b"data: a\ndata: b\n\n")])] == ["a\nb"]


def test_timestamp_is_the_chunk_that_completes_the_event():
    got = line_decode([(1.0, b"data: x"), (2.0, b"yz\n"), (3.0, b"\n"), (4.0, b"data: q\n\n")])
    assert got == [(3.0, "message", "xyz"), (4.0, "message", "q")]


def test_crlf_split_between_cr_and_lf():
    dec = LineDecoder()
    out = dec.feed(b"data: a\r", 1.0) + dec.feed(b"\n\r", 2.0) + dec.feed(b"\n", 3.0)
    assert [(e.t, e.data) for e in out] == [(2.0, "a")]


def test_bare_cr_line_ends():
    assert [e.data for e in LineDecoder().feed(b"data: a\rdata: b\r\r", 0)] == ["a\nb"]


def test_unterminated_event_is_not_dispatched():
    """Spec: an event needs its blank line. (sseclient-py dispatches the tail at end of stream.)"""
    assert line_decode([(0.0, b"data: [DONE]\n")]) == []


def test_oversized_line_raises_even_before_its_end():
    dec = LineDecoder(max_line_bytes=100)
    with pytest.raises(OversizedLine):
        dec.feed(b"data: " + b"x" * 200, 0)
    with pytest.raises(OversizedLine):
        LineDecoder(max_line_bytes=100).feed(b"data: " + b"x" * 200 + b"\n\n", 0)
    assert LineDecoder(max_line_bytes=100).feed(b"data: " + b"x" * 90 + b"\n\n", 0)[0].data == "x" * 90
