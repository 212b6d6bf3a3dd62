"""Typed SSE events (``event:`` + ``data:``) as the Responses and Anthropic framings send them, read strictly."""

from __future__ import annotations

import json


def typed_events(raw: bytes) -> list[dict]:
    """Each event's data, checking that every event is exactly ``event: T`` + ``data: {json with type T}``."""
    assert raw.endswith(b"\n\n"), raw[-200:]
    out = []
    for block in raw[:-2].split(b"\n\n"):
        head, data = block.split(b"\n")
        assert head.startswith(b"event: ") and data.startswith(b"data: "), block
        body = json.loads(data[6:])
        assert body["type"] == head[7:].decode(), block
        out.append(body)
    return out


def types(events: list[dict]) -> list[str]:
    return [e["type"] for e in events]
