"""Fuzzing the response reader: seed responses of every API, mutations, the driver and the oracle.

Shared by the seeded corpus in CI (``tests/client/test_fuzz_reader.py``) and the benchmark that runs a million
cases (``benchmarks/fuzz_parsers.py``). A case is one ``random.Random(seed)``: it picks an API, builds a valid
response of that API (``seed_response``), mutates it at the JSON level (a field of another type, giant or deeply
nested values) and at the byte level (bit flips, inserted framing bytes, invalid UTF-8, truncation), frames it
(chunked, content-length or closed; LF, CRLF or CR) and splits it into receives anywhere. ``check_case`` feeds it
to a ``ResponseReader`` and checks the oracle:

- ``feed`` and ``close`` never raise; after ``close`` the reader is ``over``;
- the record's error is None or a class of ``metrics.record.ERROR_CLASSES``, and every field has its declared
  type (no value of the wrong JSON type reaches a record);
- chat/completions: the fast path (``chunk_template.py``) and the full parse give the same record.

A failure is ``Failure(seed, api, problem)``: ``case(seed)`` rebuilds its input exactly.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import random
from dataclasses import dataclass

from harness.client.anthropic import MessagesTracker, parse_messages_body
from harness.client.apis import EmbeddingsTracker, parse_embeddings
from harness.client.openai import StreamTracker, parse_body
from harness.client.reader import ResponseReader
from harness.client.responses import ResponsesTracker, parse_responses_body
from harness.metrics.record import ERROR_CLASSES

__all__ = ["APIS", "Case", "Failure", "case", "check_case", "mutate_bytes", "mutate_json", "read", "split"]

START = 100.0
APIS = ("chat", "completions", "responses", "messages", "embeddings", "chat_body", "responses_body",
        "messages_body", "error")
"""What a case answers: a stream of each API, a non-streaming body of each, or an error reply."""

# -- valid responses of each API -----------------------------------------------------------------------------------


def _chat(rng: random.Random, completions: bool) -> list[dict]:
    def chunk(delta: dict | None = None, finish: str | None = None, text: str | None = None) -> dict:
        choice: dict = {"index": 0, "finish_reason": finish}
        if completions:
            choice["text"] = text if text is not None else (delta or {}).get("content", "")
        else:
            choice["delta"] = delta if delta is not None else {}
        return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1733050000, "model": "m",
                "choices": [choice]}

    out = [] if completions else [chunk({"role": "assistant", "content": ""})]
    done = 0
    continuous = rng.random() < 0.3
    for i in range(rng.randint(0, 8)):
        roll = rng.random()
        delta = {"content": rng.choice([" w", " café", "中文", "😀", '"q"', "\\", "\n"]) + str(i)}
        if not completions and roll < 0.1:
            delta = {"reasoning_content": "hm"}
        elif not completions and roll < 0.15:
            delta = {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}
        c = chunk(delta)
        done += 1
        if continuous:
            c["usage"] = {"prompt_tokens": 9, "completion_tokens": done, "total_tokens": 9 + done}
        out.append(c)
    last = chunk({"content": "!"}, rng.choice(["stop", "length"]))
    if rng.random() < 0.2:
        last["timings"] = {"cache_n": 3, "prompt_ms": 12.5, "predicted_ms": 80}
    out.append(last)
    out.append({"id": "chatcmpl-1", "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": done + 1,
                                                             "prompt_tokens_details": {"cached_tokens": 4}}})
    return out


def _responses(rng: random.Random) -> list[dict]:
    resp = {"id": "resp_1", "status": "in_progress"}
    out: list[dict] = [{"type": "response.created", "response": resp}]
    kinds = ["response.output_text.delta", "response.reasoning_text.delta", "response.function_call_arguments.delta",
             "response.output_item.added"]
    out += [{"type": rng.choice(kinds), "delta": f" w{i}", "item_id": "m"} for i in range(rng.randint(0, 8))]
    usage = {"input_tokens": 9, "output_tokens": 5, "input_tokens_details": {"cached_tokens": 2},
             "output_tokens_details": {"reasoning_tokens": 1}}
    final = rng.choice(["response.completed", "response.incomplete"])
    out.append({"type": final, "response": {"id": "resp_1", "status": final.split(".")[1], "usage": usage,
                                            "incomplete_details": {"reason": "max_output_tokens"}}})
    return out


def _messages(rng: random.Random) -> list[dict]:
    usage = {"input_tokens": 9, "cache_creation_input_tokens": 1, "cache_read_input_tokens": 2, "output_tokens": 1}
    out: list[dict] = [{"type": "message_start", "message": {"id": "msg_1", "usage": usage}},
                       {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}]
    deltas = [("text_delta", "text"), ("thinking_delta", "thinking"), ("input_json_delta", "partial_json"),
              ("signature_delta", "signature")]
    for i in range(rng.randint(0, 8)):
        kind, key = rng.choice(deltas)
        out.append({"type": "content_block_delta", "index": 0, "delta": {"type": kind, key: f" w{i}"}})
    out += [{"type": "ping"}, {"type": "content_block_stop", "index": 0},
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 7}},
            {"type": "message_stop"}]
    return out


BODIES = {
    "chat_body": {"id": "c1", "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                                           "finish_reason": "stop"}],
                  "usage": {"prompt_tokens": 9, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 1},
                            "completion_tokens_details": {"reasoning_tokens": 0}}},
    "responses_body": {"id": "resp_1", "status": "completed", "output": [
        {"type": "message", "content": [{"type": "output_text", "text": "hi"}, {"type": "refusal", "refusal": "no"}]}],
        "usage": {"input_tokens": 9, "output_tokens": 2}},
    "messages_body": {"id": "msg_1", "type": "message", "content": [{"type": "text", "text": "hi"}],
                      "stop_reason": "end_turn", "usage": {"input_tokens": 9, "output_tokens": 2}},
    "embeddings": {"object": "list", "data": [{"embedding": [0.1, -0.2]}, {"embedding": [0.3, 0.4]}],
                   "usage": {"prompt_tokens": 5, "total_tokens": 5}},
}
ERRORS = [(429, b"Retry-After: 2\r\n", {"error": {"message": "slow down"}}), (500, b"", {"error": "boom"}),
          (404, b"Retry-After: Wed, 21 Oct 2015 07:28:00 GMT\r\nDate: Wed, 21 Oct 2015 07:27:00 GMT\r\n",
           {"error": {"message": None}}), (200, b"", {"not": "sse"}), (101, b"Upgrade: h2c\r\n", {})]


def seed_response(rng: random.Random, api: str) -> tuple[bytes, list[dict], bytes]:
    """(status line and headers without the framing header, the JSON objects of the body, the content type)."""
    if api in ("chat", "completions", "responses", "messages"):
        objs = {"chat": lambda: _chat(rng, False), "completions": lambda: _chat(rng, True),
                "responses": lambda: _responses(rng), "messages": lambda: _messages(rng)}[api]()
        return b"HTTP/1.1 200 OK\r\n", objs, b"text/event-stream"
    if api == "error":
        status, headers, body = rng.choice(ERRORS)
        return b"HTTP/1.1 %d X\r\n%b" % (status, headers), [body], b"application/json"
    return b"HTTP/1.1 200 OK\r\n", [json.loads(json.dumps(BODIES[api]))], b"application/json"


# -- mutations ------------------------------------------------------------------------------------------------------

ODD_VALUES = [None, True, -1, 1.5, 10**30, "", "x", [], {}, [1], {"a": None}, "NaN", 2**63, -0.0, "\ud800"]
ODD_BYTES = [b"\n", b"\r", b"\r\n", b"\n\n", b"\r\n\r\n", b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00", b'"', b"\\",
             b"data: [DONE]\n\n", b"data:", b"event: error\n", b": ping\n\n", b"0\r\n\r\n", b"}", b"{", b"[",
             b"HTTP/1.1 200 OK\r\n\r\n", b"\xf0\x9f\x98", b"NaN", b"1e999", b"9" * 400]


def _deep(rng: random.Random) -> str:
    depth = rng.choice([10, 199, 200, 999, 1001, 5000, 20000])
    return "[" * depth + "]" * depth if rng.random() < 0.5 else '{"a":' * depth + "1" + "}" * depth


def mutate_json(rng: random.Random, obj: object) -> object:
    """``obj`` with one value somewhere replaced: another JSON type, a giant string or number, a deep nest (as
    raw JSON text in a ``_Raw``), or a key removed."""
    if not isinstance(obj, (dict, list)) or not obj or rng.random() < 0.15:
        roll = rng.random()
        if roll < 0.1:
            return _Raw(_deep(rng))
        if roll < 0.15:
            return "y" * rng.choice([1000, 70_000, 300_000])
        if roll < 0.2:
            return _Raw(rng.choice(["1e400", "-1e400", "NaN", "Infinity", "1" * 5000, "0.1e-99999", "-0"]))
        return rng.choice(ODD_VALUES)
    if isinstance(obj, dict):
        key = rng.choice(list(obj))
        if rng.random() < 0.1:
            return {k: v for k, v in obj.items() if k != key}
        return {**obj, key: mutate_json(rng, obj[key])}
    i = rng.randrange(len(obj))
    return [*obj[:i], mutate_json(rng, obj[i]), *obj[i + 1:]]


class _Raw(str):
    """JSON text to splice in as it is (deep nests, numbers json.dumps would not write)."""


def dumps(obj: object) -> str:
    if isinstance(obj, _Raw):
        return str(obj)
    if isinstance(obj, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{dumps(v)}" for k, v in obj.items()) + "}"
    if isinstance(obj, list):
        return "[" + ",".join(map(dumps, obj)) + "]"
    return json.dumps(obj, ensure_ascii=False)


def mutate_bytes(rng: random.Random, data: bytes, n: int = 1) -> bytes:
    """``n`` byte-level edits: a bit flipped, a byte deleted, framing or invalid bytes inserted, a span repeated,
    the tail cut."""
    b = bytearray(data)
    for _ in range(n):
        if not b:
            b += rng.choice(ODD_BYTES)
            continue
        at = rng.randrange(len(b))
        op = rng.randrange(6)
        if op == 0:
            b[at] ^= 1 << rng.randrange(8)
        elif op == 1:
            del b[at]
        elif op == 2:
            b[at:at] = rng.choice(ODD_BYTES)
        elif op == 3:
            end = min(len(b), at + rng.randint(1, 64))
            b[at:at] = b[at:end] * rng.randint(1, 50)
        elif op == 4:
            del b[at:]
        else:
            b[at] = rng.randrange(256)
    return bytes(b)


def split(rng: random.Random, raw: bytes) -> list[bytes]:
    """``raw`` as receives: one, every byte alone, or cut at random points."""
    roll = rng.random()
    if roll < 0.15 or len(raw) < 2:
        return [raw]
    if roll < 0.25 and len(raw) < 4000:
        return [raw[i:i + 1] for i in range(len(raw))]
    cuts = sorted(rng.sample(range(1, len(raw)), min(len(raw) - 1, rng.randint(1, 40))))
    return [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]


# -- framing and the case ----------------------------------------------------------------------------------------

_STREAMS = ("chat", "completions", "responses", "messages")


def _events(rng: random.Random, api: str, texts: list[str]) -> bytes:
    """The SSE body: each text a ``data:`` line (with its ``event:`` line for typed APIs), line ends mixed."""
    nl = rng.choice([b"\n"] * 6 + [b"\r\n", b"\r"])
    out = []
    for text, obj_type in texts:
        if rng.random() < 0.05:
            nl = rng.choice([b"\n", b"\r\n", b"\r"])  # a server that changes its line ends mid-stream
        sep = rng.choice([b"data: "] * 8 + [b"data:", b"data:  "])
        if rng.random() < 0.05:
            out.append(rng.choice([b": ping", b"id: 7", b"retry: 10", b"event:", b"data"]) + nl + nl)
        event = b"event: " + obj_type.encode("utf-8", "replace") + nl if api in ("responses", "messages") else b""
        out.append(event + sep + text.encode("utf-8", "surrogatepass") + nl + nl)
    if api in ("chat", "completions") and rng.random() < 0.9:
        out.append(b"data: [DONE]" + nl + nl)
    return b"".join(out)


def _frame(rng: random.Random, body: bytes) -> tuple[bytes, bytes]:
    """(the framing header, the body as sent): chunked at random sizes, content-length, or ended by the close."""
    roll = rng.random()
    if roll < 0.6:
        out, i = [], 0
        while i < len(body):
            n = rng.choice([1, 7, 64, 500, 4096, 1 << 20])
            out.append(b"%x\r\n%b\r\n" % (len(body[i:i + n]), body[i:i + n]))
            i += n
        return b"transfer-encoding: chunked\r\n", b"".join(out) + b"0\r\n\r\n"
    if roll < 0.9:
        return b"content-length: %d\r\n" % len(body), body
    return b"", body


@dataclass
class Case:
    seed: int
    api: str
    receives: list[bytes]
    keep_text: bool
    max_line_bytes: int


def case(seed: int) -> Case:
    """The case of ``seed``: always the same bytes for the same seed."""
    rng = random.Random(seed)
    api = rng.choice(APIS)
    head, objs, ctype = seed_response(rng, api)
    for _ in range(rng.choice([0, 0, 1, 1, 2, 3])):
        i = rng.randrange(len(objs))
        objs[i] = mutate_json(rng, objs[i])
    texts = [(dumps(o), str(o.get("type")) if isinstance(o, dict) else "x") for o in objs]
    if rng.random() < 0.05:
        texts.insert(rng.randrange(len(texts) + 1), (rng.choice(["[DONE", "{", "nul", "", " ", "\ufeff{}"]), "x"))
    if api in _STREAMS and rng.random() < 0.05:  # the server's own error, in each API's words
        err = rng.choice(['{"error":{"message":"overloaded","code":503}}', '{"type":"error","error":{"type":"x"}}',
                          '{"type":"response.failed","response":{"error":{"code":"e","message":"m"}}}'])
        texts.insert(rng.randrange(len(texts) + 1), (err, "error"))
    body = _events(rng, api, texts) if api in _STREAMS else texts[0][0].encode("utf-8", "surrogatepass")
    if rng.random() < 0.4:
        body = mutate_bytes(rng, body, rng.randint(1, 3))
    framing, sent = _frame(rng, body)
    raw = head + b"content-type: " + ctype + b"\r\n" + framing + b"\r\n" + sent
    if rng.random() < 0.1:
        raw = mutate_bytes(rng, raw, rng.randint(1, 2))
    if rng.random() < 0.05:
        raw += rng.choice([b"HTTP/1.1 408 Timeout\r\ncontent-length: 0\r\n\r\n", b"garbage", b"\r\n"])
    return Case(seed, api, split(rng, raw), rng.random() < 0.2, rng.choice([256 * 1024] * 9 + [300]))


# -- the driver and the oracle -----------------------------------------------------------------------------------

_TRACKERS = {
    "responses": (ResponsesTracker, parse_responses_body), "responses_body": (ResponsesTracker, parse_responses_body),
    "messages": (MessagesTracker, parse_messages_body), "messages_body": (MessagesTracker, parse_messages_body),
}


def read(c: Case, fast: bool = True) -> ResponseReader:
    """Feed the case to a reader (receive i at START + i ms), then EOF: the reader, over. Exceptions propagate."""
    if c.api == "embeddings":
        tracker, parser = EmbeddingsTracker(START, 2), parse_embeddings
    elif c.api in _TRACKERS:
        cls, parser = _TRACKERS[c.api]
        tracker = cls(START, keep_text=c.keep_text)
    else:
        tracker, parser = StreamTracker(START, keep_text=c.keep_text, fast_path=fast), parse_body
    reader = ResponseReader(START, tracker=tracker, body_parser=parser, max_line_bytes=c.max_line_bytes,
                            wall_start=1.7e9)
    for i, data in enumerate(c.receives):
        if reader.feed(data, START + 0.001 * (i + 1)) != reader.over:
            raise AssertionError("feed's answer is not reader.over")
    reader.close(START + 9.0)
    return reader


_OPT_INT = ("prompt_tokens", "cached_tokens", "reasoning_tokens", "output_tokens")
_OPT_STR = ("finish_reason", "response_id", "cached_source", "content")
_OPT_TIME = ("headers_s", "ttft_s", "e2e_s", "ttfo_s", "reasoning_start_s", "tool_call_s")


def record_problem(reader: ResponseReader) -> str | None:
    """What is wrong with a finished reader's record, or None: the oracle on every case."""
    rec = reader.record
    if not reader.over:
        return "not over after close"
    if rec.error is not None and rec.error not in ERROR_CLASSES:
        return f"error class {rec.error!r} is not one of ERROR_CLASSES"
    if rec.error is not None and not isinstance(rec.error_detail, str):
        return "error_detail is not a string"
    for name in _OPT_INT:
        v = getattr(rec, name)
        if v is not None and (v.__class__ is not int or v < 0):
            return f"{name} is {v!r}, not an integer >= 0"
    for name in _OPT_STR:
        if (v := getattr(rec, name)) is not None and v.__class__ is not str:
            return f"{name} is {v!r}, not a string"
    for name in _OPT_TIME:
        if (v := getattr(rec, name)) is not None and not (v.__class__ is float and math.isfinite(v)):
            return f"{name} is {v!r}, not a finite float"
    for name in ("server_prefill_s", "server_decode_s", "retry_after_s"):
        if (v := getattr(rec, name)) is not None and not (v.__class__ is float and 0 <= v < math.inf):
            return f"{name} is {v!r}, not a float >= 0"
    if rec.status is not None and rec.status.__class__ is not int:
        return f"status is {rec.status!r}"
    times = rec.chunk_times
    if any(b < a for a, b in itertools.pairwise(times)) or rec.ttft_s != (times[0] if times else None):
        return "chunk times out of order, or the TTFT is not the first"
    if rec.chunk_tokens is not None and any(n.__class__ is not int for n in rec.chunk_tokens):
        return f"chunk_tokens holds a non-integer: {rec.chunk_tokens[:5]!r}"
    if reader.reusable and not reader.complete:
        return "reusable before the message ended"
    try:  # what the metrics derive from a record must not raise either
        rec.tpot_s, rec.tokens_per_s, rec.tpot_content_s, rec.reasoning_s, rec.itl_chunks()
    except Exception as exc:
        return f"a derived metric raised {type(exc).__name__}: {exc}"
    return None


@dataclass
class Failure:
    seed: int
    api: str
    problem: str


def check_case(c: Case) -> Failure | None:
    """Run the oracle on one case (both ways for chat and completions); the failure, or None."""
    try:
        reader = read(c)
    except Exception as exc:  # the point: nothing may escape the reader
        return Failure(c.seed, c.api, f"feed/close raised {type(exc).__name__}: {str(exc)[:200]}")
    if (problem := record_problem(reader)) is not None:
        return Failure(c.seed, c.api, problem)
    if c.api in ("chat", "completions"):
        full = read(c, fast=False)
        got, want = dataclasses.asdict(reader.record), dataclasses.asdict(full.record)
        if (got, reader.done_seen, reader.reusable) != (want, full.done_seen, full.reusable):
            diff = sorted(k for k in got if got[k] != want[k])
            return Failure(c.seed, c.api, f"fast path and full parse differ in {diff or 'done_seen/reusable'}")
    return None
