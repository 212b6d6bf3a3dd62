"""An OpenAI chat stream as scripted bytes (SSE events, HTTP chunks, the whole response), and the response reader
fed them on a fake clock: the client's reader tests (``read``) and those that compare two ways of reading."""

from __future__ import annotations

import json

from harness.client.reader import ResponseReader
from harness.metrics.record import ERROR_CLASSES

__all__ = ["DONE", "END", "LAST", "ROLE", "SSE_HEAD", "START", "STREAM", "USAGE", "A", "B", "chunked", "event",
           "read", "wire"]

START = 100.0
SSE_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
END = b"0\r\n\r\n"  # the chunked terminator


def chunked(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


def event(delta: dict | None = None, finish: str | None = None, usage: dict | None = None, text: str | None = None,
          nl: bytes = b"\n") -> bytes:
    choice: dict = {"index": 0, "finish_reason": finish}
    if delta is not None:
        choice["delta"] = delta
    if text is not None:
        choice["text"] = text
    obj: dict = {"id": "chatcmpl-1", "choices": [] if usage else [choice]}
    if usage:
        obj["usage"] = usage
    return b"data: " + json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode() + nl + nl


ROLE = event({"role": "assistant", "content": ""})
A, B = event({"content": "a"}), event({"content": " caf\u00e9"})
LAST = event({"content": "!"}, finish="length")
USAGE = event(usage={"prompt_tokens": 9, "completion_tokens": 3})
DONE = b"data: [DONE]\n\n"
STREAM = [ROLE, A, B, LAST, USAGE, DONE]


def read(*receives: tuple[float, bytes], close_at: float | None = None, **kw) -> ResponseReader:
    """Feed each (arrival offset from START, bytes); then EOF at ``close_at`` if given."""
    reader = ResponseReader(START, **kw)
    for dt, data in receives:
        over = reader.feed(data, START + dt)
        assert over == reader.over
    if close_at is not None:
        assert reader.close(START + close_at)
    if reader.over:
        assert reader.record.error is None or reader.record.error in ERROR_CLASSES
    return reader


def wire(*events: bytes, end: bytes = END) -> bytes:
    return SSE_HEAD + b"".join(map(chunked, events)) + end
