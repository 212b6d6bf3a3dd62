"""Hostile responses whose size is a parameter, to check that reading them costs linear time.

Each builder of ``PATHOLOGICAL`` returns the receives of one response ``n`` bytes (or items) long: many tiny
receives, a line with no line end, deep JSON, endless lines of one event, CR-only line ends, many headers, an error
body or JSON answer in 1-byte receives. ``cost(receives)`` is the best of a few reads (seconds, the reader alone);
``growth(name, n)`` the ratio of the cost at ``4n`` to that at ``n``: about 4 when linear, 16 when quadratic.
Used by ``tests/client/test_fuzz_reader.py`` (small sizes) and ``benchmarks/fuzz_parsers.py`` (up to 256 kB).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from harness.client.openai import StreamTracker, parse_body
from harness.client.reader import ResponseReader

__all__ = ["PATHOLOGICAL", "cost", "growth"]

_SSE = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n"  # ended by the close: bytes pass as they are
_CHUNK = b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}\n\n'
_MAX_LINE = 1 << 20  # above every size used, so the line is read to its end, not refused


def _ones(data: bytes) -> list[bytes]:
    return [data[i:i + 1] for i in range(len(data))]


def _stream(n: int) -> bytes:
    return _CHUNK * (n // len(_CHUNK) + 1)


PATHOLOGICAL: dict[str, Callable[[int], list[bytes]]] = {
    "line_without_end_1B": lambda n: [_SSE, *_ones(b"data: " + b"x" * n)],
    "line_without_end_64B": lambda n: [_SSE] + [(b"data: " + b"x" * n)[i:i + 64] for i in range(0, n + 6, 64)],
    "stream_in_1B_receives": lambda n: [_SSE, *_ones(_stream(n))],
    "stream_in_one_receive": lambda n: [_SSE, _stream(n)],
    "chunked_1B_http_chunks": lambda n: [_SSE.replace(b"\r\n\r\n", b"\r\ntransfer-encoding: chunked\r\n\r\n")]
    + [b"1\r\n%b\r\n" % bytes([c]) for c in _stream(n // 6)],
    "one_event_many_data_lines": lambda n: [_SSE, b"data: x\n" * (n // 8)],
    "deep_json_event": lambda n: [_SSE, b"data: " + b"[" * (n // 2) + b"]" * (n // 2) + b"\n\n"],
    "deep_json_body": lambda n: [b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n",
                                 b'{"a":' * (n // 6) + b"1" + b"}" * (n // 6)],
    "cr_line_ends_1B": lambda n: [_SSE, *[b"\r"] * n],
    "comment_lines": lambda n: [_SSE, b":\n" * (n // 2)],
    "many_headers": lambda n: [b"HTTP/1.1 200 OK\r\n" + b"x-a: b\r\n" * (n // 8) + _SSE[17:]],
    "error_body_1B": lambda n: [b"HTTP/1.1 500 X\r\n\r\n", *[b"x"] * n],
    "json_body_1B": lambda n: [b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n", *[b"["] * n],
    "escaped_content_fast_path": lambda n: [_SSE, _CHUNK * 3 + _CHUNK.replace(b'"a"', b'"' + b"\\n\\u00e9" * (n // 8)
                                                                               + b'"')],
}


def _read(receives: list[bytes]) -> float:
    reader = ResponseReader(100.0, tracker=StreamTracker(100.0), body_parser=parse_body, max_line_bytes=_MAX_LINE)
    t0 = time.perf_counter()
    for i, data in enumerate(receives):
        reader.feed(data, 100.0 + 1e-6 * i)
    reader.close(200.0)
    return time.perf_counter() - t0


def cost(receives: list[bytes], repeat: int = 3) -> float:
    """The best of ``repeat`` reads of ``receives``, in seconds (the least disturbed by the rest of the machine)."""
    return min(_read(receives) for _ in range(repeat))


def growth(name: str, n: int, repeat: int = 3) -> tuple[float, float]:
    """(cost at n, cost at 4n) of the builder ``name``."""
    build = PATHOLOGICAL[name]
    return cost(build(n), repeat), cost(build(4 * n), repeat)
