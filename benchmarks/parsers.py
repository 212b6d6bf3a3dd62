"""Per-event cost of each API's stream tracker: ``python -m benchmarks.parsers``.

The hot path of a streamed token after the SSE line split is one ``on_event``: this measures it for the chat
tracker (today, and at a reference revision read from git: the one before the tracker interface of the
reasoning/APIs issue), the Responses tracker and the Anthropic Messages tracker, each on a typical text-delta
event of the shape that API streams, best of 5 runs of 200,000 events. Goal (issue 13): the chat tracker within
5% of the reference (a whole event costs ~45–70 µs in the client, README, so the tracker is ~3% of it).
One JSON line per tracker; ``ratio`` is against the reference chat tracker measured in the same run.

Issue 14 adds the whole per-event path of a chat stream, from the HTTP chunk's bytes (``ResponseReader.feed``:
httptools, SSE split, tracker): ``reader_chat_full`` parses every event (the fast path off), ``reader_chat_fast``
takes plain content chunks by their learned template (``client/chunk_template.py``); ``vs_full`` compares the two.
Goal: the fast path under a third of the full parse (3.9 µs an event before issue 14, json.loads and no fast
path, at 6e33225^; 1.05 µs after).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

from benchmarks.common import ROOT, git_rev

REFERENCE = "a26fc7a"  # the last revision before client/stream.py
CHAT = json.dumps({"id": "chatcmpl-bbc19a2243aa4918860febfbaa1d6b6e", "object": "chat.completion.chunk",
                   "created": 1733050000, "model": "sim-small",
                   "choices": [{"index": 0, "delta": {"content": " the"}, "logprobs": None, "finish_reason": None}]},
                  separators=(",", ":"))
RESPONSES = json.dumps({"type": "response.output_text.delta", "sequence_number": 12,
                        "item_id": "msg_67c9fdcecf488190bdd9a0409de3a1ec07b8b0ad4e5eb654", "output_index": 0,
                        "content_index": 0, "delta": " the", "logprobs": []}, separators=(",", ":"))
MESSAGES = json.dumps({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": " the"}},
                      separators=(",", ":"))


def _per_event_us(make, data: str, setup: list[str], n: int = 200_000) -> float:
    best = float("inf")
    for _ in range(5):
        tracker = make(0.0)
        for d in setup:
            tracker.on_event(0.0, d)
        on_event = tracker.on_event
        t0 = time.perf_counter()
        for i in range(n):
            on_event(i * 1e-3, data)
        best = min(best, (time.perf_counter() - t0) / n)
    return best * 1e6


def _reader_us(fast: bool, n: int = 200_000) -> float:
    """One chat event per HTTP chunk through ``ResponseReader.feed``, after the stream's first two events."""
    from harness.client.openai import StreamTracker
    from harness.client.reader import ResponseReader

    event = b"data: " + CHAT.encode() + b"\n\n"
    chunk = b"%x\r\n%b\r\n" % (len(event), event)
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    best = float("inf")
    for _ in range(5):
        reader = ResponseReader(0.0, tracker=StreamTracker(0.0, fast_path=fast))
        reader.feed(head + chunk + chunk, 0.0)
        feed = reader.feed
        t0 = time.perf_counter()
        for i in range(n):
            feed(chunk, i * 1e-3)
        best = min(best, (time.perf_counter() - t0) / n)
        assert not reader.over and len(reader.chunk_times) == n + 2
    return best * 1e6


def _reference_tracker():
    src = subprocess.run(["git", "show", f"{REFERENCE}:harness/client/openai.py"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location("openai_reference", f.name)
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    os.unlink(f.name)
    return mod.StreamTracker


def main() -> None:
    sys.path.insert(0, ROOT)
    from harness.client.anthropic import MessagesTracker
    from harness.client.openai import StreamTracker
    from harness.client.responses import ResponsesTracker

    start = json.dumps({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
    ref = _per_event_us(_reference_tracker(), CHAT, [CHAT])
    rows = [("chat_reference", ref), ("chat", _per_event_us(StreamTracker, CHAT, [CHAT])),
            ("responses", _per_event_us(ResponsesTracker, RESPONSES, [RESPONSES])),
            ("messages", _per_event_us(MessagesTracker, MESSAGES, [start, MESSAGES]))]
    full = _reader_us(False)
    rows += [("reader_chat_full", full), ("reader_chat_fast", _reader_us(True))]
    for name, us in rows:
        row = {"name": "parsers", "rev": git_rev(), "reference": REFERENCE, "tracker": name,
               "us_per_event": round(us, 3), "ratio": round(us / ref, 3)}
        if name.startswith("reader_"):
            row["vs_full"] = round(us / full, 3)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
