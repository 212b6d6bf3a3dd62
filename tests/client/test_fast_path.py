"""The per-event fast path gives the full parse's record exactly: plain content chunks taken from the bytes by a
learned template (``client/chunk_template.py``), and msgspec before json (``stream.decode_json``).

Every case feeds the same bytes through two readers, one whose tracker has the fast path off, and compares every
field of the record. Chunks: the parser corpora of the other client tests, each server's own chunk layout, and
seeded random streams of adversarial variants (escapes, raw quotes, invalid UTF-8, other values in the template's
holes, byte mutations, truncations, CRLF and split framing). hypothesis is not in the environment: a seeded
``random.Random`` per case, so a failure names its seed.
"""

from __future__ import annotations

import dataclasses
import json
import random
import re

import pytest

from harness.client import chunk_template, openai
from harness.client.openai import StreamTracker
from harness.client.reader import ResponseReader
from harness.client.stream import OutputTracker, StreamProtocolError, decode_json
from harness.sim.chat_stream import StreamFormat
from tests.kit.bad_chunks import BROKEN_EVENTS, JSON_EDGES, PROTOCOL_ERRORS, WRONG_SHAPES, WRONG_TYPES, WRONG_USAGE
from tests.kit.wire import END, SSE_HEAD, STREAM, chunked, event

START = 100.0
DONE = b"data: [DONE]\n\n"


class Counting(StreamTracker):
    """Counts the events the fast path took (else a broken template would pass every comparison by never matching)."""

    __slots__ = ("fast_events",)

    def __init__(self, start: float, **kw) -> None:
        super().__init__(start, **kw)
        self.fast_events = 0

    def take_events(self, chunk: bytes, t: float) -> int:
        n = len(self.chunk_times)
        end = super().take_events(chunk, t)
        self.fast_events += len(self.chunk_times) - n
        return end


def read(receives: list[bytes], fast: bool, keep_text: bool = False, **kw) -> tuple[tuple, Counting]:
    tracker = Counting(START, keep_text=keep_text, fast_path=fast)
    reader = ResponseReader(START, tracker=tracker, **kw)
    states = []  # the tracker after every receive: a later chunk can hide a difference from the record
    for i, data in enumerate(receives):
        reader.feed(data, START + 0.001 * (i + 1))
        states.append([getattr(tracker, k) for k in OutputTracker.__slots__ if k != "chunk_times"]
                      + [len(tracker.chunk_times)])
    reader.close(START + 9.0)  # over already, or the end of what was sent
    return (dataclasses.asdict(reader.record), reader.done_seen, reader.reusable, states), tracker


def same(receives: list[bytes], keep_text: bool = False, **kw) -> int:
    """Assert both ways give the same outcome; the number of events the fast path took."""
    full, slow = read(receives, False, keep_text, **kw)
    got, tracker = read(receives, True, keep_text, **kw)
    assert got == full
    assert slow.fast_events == 0
    return tracker.fast_events


def framed(events: list[bytes], head: bytes = SSE_HEAD) -> list[bytes]:
    """One receive per event (an HTTP chunk each), the headers first."""
    return [head] + [chunked(e) for e in events] + [END]


def ev(payload: bytes | str) -> bytes:
    return b"data: " + (payload.encode() if isinstance(payload, str) else payload) + b"\n\n"


# -- each server's layout of a plain content chunk ("@" is where the content's JSON goes) ------------------------

SERVERS = {
    "vllm": '{"id":"chatcmpl-9f1","object":"chat.completion.chunk","created":1733050000,"model":"m","choices":'
            '[{"index":0,"delta":{"content":@},"logprobs":null,"finish_reason":null}]}',
    "vllm_completions": '{"id":"cmpl-9f1","object":"text_completion","created":1733050000,"model":"m","choices":'
                        '[{"index":0,"text":@,"logprobs":null,"finish_reason":null,"stop_reason":null}]}',
    "sglang": '{"id":"5e2","object":"chat.completion.chunk","created":1733050000,"model":"m","choices":[{"index":0,'
              '"delta":{"role":null,"content":@,"reasoning_content":null,"tool_calls":null},"logprobs":null,'
              '"finish_reason":null,"matched_stop":null}],"usage":null}',
    "llama_cpp": '{"choices":[{"finish_reason":null,"index":0,"delta":{"content":@}}],"created":%d,'
                 '"id":"chatcmpl-Xy1","model":"m","system_fingerprint":"b4400-f1","object":"chat.completion.chunk"}',
    "tgi": '{"object":"chat.completion.chunk","id":"","created":%d,"model":"m","system_fingerprint":"3.0.1-native",'
           '"choices":[{"index":0,"delta":{"role":"assistant","content":@},"logprobs":null,"finish_reason":null}],'
           '"usage":null}',
    "openai": '{"id":"chatcmpl-B9","object":"chat.completion.chunk","created":1733050000,"model":"gpt-4o-mini",'
              '"service_tier":"default","system_fingerprint":"fp_0ba","choices":[{"index":0,"delta":{"content":@},'
              '"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"%s"}',
    "python_json": '{"id": "c-1", "choices": [{"index": 0, "delta": {"content": @}, "finish_reason": null}]}',
}


def plain(server: str, content: str, i: int = 0, *, ascii_only: bool = False) -> bytes:
    """Server ``server``'s chunk carrying ``content``; ``i`` varies what that server varies (created, padding)."""
    layout = SERVERS[server]
    if "%d" in layout:
        layout = layout % (1733050000 + i // 7)
    elif "%s" in layout:
        layout = layout % ("Ab3xZ"[: i % 6] + str(i))
    return layout.replace("@", json.dumps(content, ensure_ascii=ascii_only)).encode()


def replace_in(chunk: bytes, old: bytes, new: bytes) -> bytes:
    assert old in chunk, (old, chunk)
    return chunk.replace(old, new, 1)


def sub(chunk: bytes, key: bytes, value: bytes, new: bytes) -> bytes:
    """``"key": value`` (either spacing) replaced by ``new``, once."""
    out, n = re.subn(b'"' + key + b'": ?' + re.escape(value), new, chunk, count=1)
    assert n, (key, chunk)
    return out


def server_stream(server: str, middle: list[bytes], n: int = 3) -> list[bytes]:
    """Role chunk, ``n`` content chunks (the fast path engaged), ``middle``, more content, finish, usage, [DONE]."""
    role = plain(server, "").replace(b'"content":', b'"role":"assistant","content":', 1)
    head = [role] + [plain(server, f" w{i}", i) for i in range(n)]
    last = sub(plain(server, "!", 99), b"finish_reason", b"null", b'"finish_reason":"length"')
    usage = b'{"id":"u","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":%d}}' % (n + len(middle) + 3)
    return [ev(e) for e in head] + middle + [ev(plain(server, " tail", 50)), ev(last), ev(usage), DONE]


@pytest.mark.parametrize("server", sorted(SERVERS))
def test_each_server_s_plain_chunks_take_the_fast_path(server):
    texts = [" the", " café", " 中文", " 😀", "\u2028", "\x7f", "a" * 300, " ", "0", "null", "}]}", "finish_reason"]
    middle = [ev(plain(server, t, i)) for i, t in enumerate(texts * 3)]
    assert same(framed(server_stream(server, middle))) >= len(middle)
    assert same(framed(server_stream(server, middle)), keep_text=True) == 0  # the text is kept: full parse


def test_the_simulator_s_vllm_bytes():
    for kind in ("chat", "completions"):
        f = StreamFormat(kind, "chatcmpl-1", 1733050000, "sim-small")
        events = ([f.role_chunk()] if kind == "chat" else []) + [f.token_chunk(json.dumps(w).encode()) for w in
                                                                 [" a", " b", " é", " c", " d"] * 4]
        events += [f.token_chunk(b'"."', "stop"), f.usage_chunk(9, 21, 4), f.DONE]
        assert same(framed(events)) >= 18
        cont = [f.token_chunk(json.dumps(w).encode(), usage=f.running_usage(9, i + 1)) for i, w in enumerate("abcdef")]
        assert same(framed([f.role_chunk(f.running_usage(9, 0)), *cont, f.DONE])) >= 4  # exact tokens per chunk too


# -- continuous usage (vLLM's continuous_usage_stats): cumulative counts on every chunk ----------------------------

USAGE_LAYOUTS = [  # "#" is the cumulative completion count, "$" prompt + it
    '{"prompt_tokens":9,"total_tokens":$,"completion_tokens":#}',  # vLLM
    '{"prompt_tokens":9,"completion_tokens":#,"total_tokens":$,"prompt_tokens_details":{"cached_tokens":4}}',
    '{"completion_tokens":#,"prompt_tokens":9,"completion_tokens_details":{"reasoning_tokens":0}}',
    '{"prompt_tokens": 9, "total_tokens": $, "completion_tokens": #, "prompt_tokens_details": null}',
]
USAGE_BREAKS = [
    b'"completion_tokens":"#"', b'"completion_tokens":-1', b'"completion_tokens":1.5', b'"completion_tokens":null',
    b'"completion_tokens":#,"completion_tokens":2', b'"completion_tokens":' + b"9" * 19, b'"completion_tokens":true',
    b'"prompt_tokens":"9","completion_tokens":#', b'"prompt_tokens":10,"completion_tokens":#',
    b'"completion_tokens":#,"prompt_tokens_details":{"cached_tokens":-1}',
]


def with_usage(chunk: bytes, layout: str, done: int) -> bytes:
    usage = layout.replace("$", str(9 + done)).replace("#", str(done)).encode()
    if b'"usage":null' in chunk:
        return chunk.replace(b'"usage":null', b'"usage":' + usage, 1)
    return chunk[:-1] + b',"usage":' + usage + b"}"


@pytest.mark.parametrize("layout", range(len(USAGE_LAYOUTS)))
@pytest.mark.parametrize("server", ["vllm", "vllm_completions", "sglang", "openai"])
def test_continuous_usage_chunks_take_the_fast_path_with_their_tokens(server, layout):
    lay = USAGE_LAYOUTS[layout]
    events = [ev(with_usage(plain(server, f" w{i}", i), lay, i + 1)) for i in range(12)]
    events[6] = ev(with_usage(plain(server, " two", 6), lay, 8))  # two tokens in one chunk (speculative decoding)
    events[7:] = [ev(with_usage(plain(server, f" w{i}", i), lay, i + 2)) for i in range(7, 12)]
    assert same(framed([*events, DONE])) >= 8
    _, tracker = read(framed([*events, DONE]), True)
    assert tracker.chunk_tokens == [1] * 6 + [2] + [1] * 5 and tracker.completion_tokens == 13


@pytest.mark.parametrize("seed", range(20))
def test_random_continuous_usage_streams_give_the_same_record(seed):
    rng = random.Random(1000 + seed)
    fast = 0
    for _ in range(10):
        server = rng.choice(["vllm", "vllm_completions", "sglang", "openai", "python_json"])
        lay = rng.choice(USAGE_LAYOUTS)
        done, events = 0, []
        for i in range(rng.randint(3, 30)):
            done += rng.choice([1, 1, 1, 2, 0, 3])
            chunk = with_usage(plain(server, content(rng) or "w", i), lay, done)
            roll = rng.random()
            if roll < 0.1:  # a broken or unusual count
                brk = rng.choice(USAGE_BREAKS).replace(b"#", str(done).encode())
                chunk = re.sub(rb'"completion_tokens": ?[0-9]+', lambda _, b=brk: b, chunk, count=1)
            elif roll < 0.15:  # a chunk without usage: the counts no longer line up
                chunk = plain(server, "w", i)
            elif roll < 0.2:
                done -= 2  # a count going back (a server bug): kept as the full parse keeps it
                chunk = with_usage(plain(server, "w", i), lay, done)
            elif roll < 0.35:
                chunk = variant(rng, server, i)
            events.append(frame(rng, chunk) if rng.random() < 0.2 else ev(chunk))
        raw = b"".join(framed([*events, DONE]))
        cuts = sorted(rng.sample(range(1, len(raw)), rng.randint(0, 20)))
        fast += same([raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]
                     if rng.random() < 0.5 else framed([*events, DONE]))
    assert fast > 0


# -- the parser corpus of the other client tests (tests/kit/bad_chunks.py), in a stream the fast path is engaged in

CORPUS: list[bytes] = [
    *(c.encode() for c, _ in PROTOCOL_ERRORS),
    *(json.dumps(o).encode() for o, _ in WRONG_TYPES),
    *(c.encode() for c in JSON_EDGES),
    *WRONG_SHAPES,
    *(b'{"id": "c", "choices": [], ' + u + b"}" for u in WRONG_USAGE),
]
EVENTS: list[bytes] = [
    *(ev(c) for c in CORPUS),
    *(d for d, _, _ in BROKEN_EVENTS),
    *STREAM, event({"reasoning_content": "hm"}), event({"reasoning": " so"}),
    event({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}, finish="tool_calls"),
    event({"content": "z"}, finish="stop")[:-3] + b',"usage":{"prompt_tokens":4,"completion_tokens":7}}'
                                                                 b"\n\n",
    b": keep-alive\n\n", b"event: error\ndata: {}\n\n", b"data: " + b"x" * 200 + b"\n\n",
]


@pytest.mark.parametrize("server", ["vllm", "openai", "vllm_completions"])
@pytest.mark.parametrize("i", range(len(EVENTS)))
def test_the_parser_corpus_gives_the_same_record(server, i):
    assert same(framed(server_stream(server, [EVENTS[i]]))) >= 2  # the first content chunk teaches the template


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, 300, 10_000])
def test_split_receives_and_other_line_ends(size):
    raw = b"".join(framed(server_stream("vllm", [ev(plain("vllm", f" x{i}", i)) for i in range(10)])))
    same([raw[i:i + size] for i in range(0, len(raw), size)])
    for nl in (b"\r\n", b"\r"):
        events = [e.replace(b"\n", nl) for e in server_stream("vllm", [])]
        same(framed(events))
    same([raw])  # every event in one receive
    assert same(framed(STREAM)) == 1  # "a" teaches the template, " café" takes it
    long = framed(server_stream("vllm", [ev(plain("vllm", "y" * 200))]))
    assert same(long, max_line_bytes=300) == 2  # the chunks before the long line
    assert read(long, True, max_line_bytes=300)[0][0]["error"] == "oversized_line"


# -- seeded random streams of adversarial chunks -----------------------------------------------------------------

PIECES = [" word", "é", "中文", "😀", '"', "\\", "\\u0041", "\\n", "finish_reason", '"usage":{"prompt_tokens":1}',
          '","finish_reason":"stop', "\n", "\r", "\t", "\x00", "\x1f", "\x7f", "\u2028", "\ud7ff", "", " ", "null",
          "}]}", "{", ",", "0", "true"]
BAD_UTF8 = [b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xc0\xaf", b"\xf4\x90\x80\x80", b"\xe2\x82", b"\x80", b"\xf0\x9f\x98"]
BYTES = b'"\\,:{}[] 0n1-.eE\x80\xff\xc3\r\n\ta'
DELTA_EXTRAS = ['"reasoning_content":"hm"', '"reasoning":"so"', '"tool_calls":[{"index":0}]', '"role":"assistant"',
                '"reasoning_content":null', '"content":"dup"', '"refusal":null', '"role":7']
TOP_EXTRAS = ['"usage":null', '"usage":{"prompt_tokens":1,"completion_tokens":2}', '"error":{"message":"x"}',
              '"id":"other"', '"created":"soon"', '"created":-1', '"created":1.5', '"created":' + "9" * 30,
              '"obfuscation":"\\u0041"', '"timings":{"cache_n":3}', '"choices":[]', '"x":NaN', '"x":Infinity',
              '"usage":0', '"usage":""']

HOLE_STRINGS = [b"x\\", b"\\", b"a\\u00e9", b"\\u12", b"a\xff", b"\xc3\xa9", b"\t", b"", b"z" * 80, b"\x7f", b"a b"]
HOLE_NUMBERS = [b"-1", b"1.5", b"9" * 18, b"9" * 19, b"9" * 30, b"01", b'"1"', b"1e3", b"0", b"-0", b"null", b"NaN"]

def content(rng: random.Random) -> str:
    return "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 4)))


def variant(rng: random.Random, server: str, i: int) -> bytes:
    """One chunk of ``server``'s layout: plain most often, else one of many ways to be almost plain."""
    text = content(rng) or "w"
    ascii_only = rng.random() < 0.2
    chunk = plain(server, text, i, ascii_only=ascii_only)
    encoded = json.dumps(text, ensure_ascii=ascii_only).encode()
    roll = rng.randrange(14)
    if roll == 0:  # the content raw, unescaped
        chunk = replace_in(chunk, encoded, b'"' + text.encode() + b'"')
    elif roll == 1:  # invalid UTF-8 in the content
        chunk = replace_in(chunk, encoded, b'"a' + rng.choice(BAD_UTF8) + b'b"')
    elif roll == 2:  # byte mutations anywhere
        b = bytearray(chunk)
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(b))
            op = rng.randrange(3)
            if op == 0:
                b[at] = rng.choice(BYTES)
            elif op == 1:
                del b[at]
            else:
                b.insert(at, rng.choice(BYTES))
        chunk = bytes(b)
    elif roll == 3:  # truncated
        chunk = chunk[:rng.randrange(len(chunk))]
    elif roll == 4 and b'"content":' in chunk:  # more delta fields
        chunk = chunk.replace(b'"content":', rng.choice(DELTA_EXTRAS).encode() + b',"content":', 1)
    elif roll == 4 and b'"content": ' in chunk:
        chunk = chunk.replace(b'"content": ', rng.choice(DELTA_EXTRAS).encode() + b', "content": ', 1)
    elif roll == 5:  # more top-level fields, before or after the rest
        extra = rng.choice(TOP_EXTRAS).encode()
        chunk = b"{" + extra + b"," + chunk[1:] if rng.random() < 0.5 else chunk[:-1] + b"," + extra + b"}"
    elif roll == 6 and b'"finish_reason"' in chunk:
        chunk = sub(chunk, b"finish_reason", b"null", b'"finish_reason":' + rng.choice([b'"stop"', b'""', b"7", b"0"]))
    elif roll == 7:  # several choices, or none
        obj = json.loads(chunk)
        obj["choices"] = obj["choices"] * rng.choice([0, 2])
        chunk = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
    elif roll == 8:  # keys in another order, or other whitespace
        obj = json.loads(chunk)
        items = list(obj.items())
        rng.shuffle(items)
        chunk = json.dumps(dict(items), separators=rng.choice([(",", ":"), (", ", ": "), (",", ": ")])).encode()
    elif roll == 9:  # a number, null, a list, an object where the content string was
        chunk = replace_in(chunk, encoded, rng.choice([b"7", b"null", b'["a"]', b'{"a":1}', b"true", b'""']))
    elif roll == 10:  # other values in the holes of id, created, obfuscation
        key = rng.choice([b"id", b"obfuscation"])
        value = b'"' + key + b'":"' + rng.choice(HOLE_STRINGS) + b'"'
        chunk = re.sub(b'"' + key + b'": ?"[^"]*"', lambda _: value, chunk, count=1)
    elif roll == 11:
        value = b'"created":' + rng.choice(HOLE_NUMBERS)
        chunk = re.sub(rb'"created": ?[0-9]+', lambda _: value, chunk, count=1)
    return chunk


def frame(rng: random.Random, payload: bytes) -> bytes:
    sep = rng.choice([b"data: ", b"data: ", b"data: ", b"data:", b"data:  "])
    nl = rng.choice([b"\n"] * 6 + [b"\r\n", b"\r"])
    extra = rng.choice([b""] * 8 + [b": ping" + nl + nl, b"event: delta" + nl, b"id: 7" + nl])
    return extra + sep + payload + nl + nl


@pytest.mark.parametrize("seed", range(40))
def test_random_streams_give_the_same_record(seed, monkeypatch):
    if seed % 2:  # no limit on templates learned: every variant that is plain content teaches one
        monkeypatch.setattr(openai, "_LEARNS", 10**6)
    rng = random.Random(seed)
    fast = 0
    for _ in range(15):
        server = rng.choice(sorted(SERVERS))
        middle: list[bytes] = []
        for i in range(rng.randint(5, 40)):
            middle.append(frame(rng, variant(rng, server, i)) if rng.random() < 0.4
                          else ev(plain(server, content(rng) or "w", i)))
            if rng.random() < 0.15:  # the same again: a template learned from a wrong chunk would take it
                middle.append(middle[-1])
        events = server_stream(server, middle, n=rng.randint(0, 3))
        if rng.random() < 0.2:
            events = events[:rng.randrange(len(events))]  # the stream cut short
        raw = b"".join(framed(events))
        cuts = sorted(rng.sample(range(1, len(raw)), rng.randint(0, 30)))
        receives = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]
        fast += same(receives if rng.random() < 0.5 else framed(events))
    assert fast > 0


# -- the template on its own --------------------------------------------------------------------------------------

@pytest.mark.parametrize("data", [
    '{"id":"c","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"stop"}]}',
    '{"id":"c","choices":[{"index":0,"delta":{"content":""},"finish_reason":null}]}',
    '{"id":"c","choices":[{"index":0,"delta":{"content":"a","reasoning_content":"b"}}]}',
    '{"id":"c","choices":[{"index":0,"delta":{"content":"a","tool_calls":[]}}]}',
    '{"id":"c","choices":[{"delta":{"content":"a"}},{"delta":{"content":"b"}}]}',
    '{"id":"c","choices":[{"delta":{"content":"a"}}],"usage":{"prompt_tokens":1,"completion_tokens":-1}}',
    '{"id":"c","choices":[{"delta":{"content":"a"}}],"usage":{"prompt_tokens":1,"completion_tokens":"1"}}',
    '{"id":"c","choices":[{"delta":{"content":"a"}}],"usage":{"prompt_tokens":1}}',
    '{"id":"c","choices":[{"delta":{"content":"a"}}],"usage":{"completion_tokens":1,"completion_tokens":2}}',
    '{"id":"c","choices":[{"delta":{"content":"a"}}],"usage":7}',
    '{"id":"c","choices":[{"delta":{"content":"a"}}],"error":null}',
    '{"id":"c","choices":[{"delta":{"content":"a","content":"b"}}]}',
    '{"id":"c","id":"d","choices":[{"delta":{"content":"a"}}]}',
    '{"id":"c",\t"choices":[{"delta":{"content":"a"}}]}',
    '{"id":"c","choices":[{"delta":{"content":7}}]}',
    '{"id":"c","choices":[{"delta":null}]}',
    '{"id":"c","choices":[{"text":"a","delta":{}}]}',
    '[{"id":"c"}]', '{"id":"c","choices":[{"delta":{"content":"a"}}]} ',
])
def test_no_template_from_a_chunk_that_is_not_plain_content(data):
    assert chunk_template.learn(data) is None


def test_a_template_varies_only_in_its_holes():
    m = chunk_template.learn(plain("openai", "x", 3).decode())
    assert m is not None
    assert m(ev(plain("openai", " café 😀", 4)))  # other content, other padding
    assert m(ev(plain("openai", "y", 5)).replace(b"data: ", b"data:"))
    assert m(ev(plain("openai", "y", 5).replace(b'"chatcmpl-B9"', b'"other-id"')))
    for text in ['a"b', "a\\b", "a\nb", "\x01", "é", "😀"]:  # escapes: any of them is at least one character
        assert m(ev(plain("openai", text, ascii_only=True)))
    assert not m(ev(plain("openai", "")))
    for raw in [b'a"b', b"a\nb", b"\x01", b"\\x41", b"\\u12", b"\\", b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xc0\xaf"]:
        assert not m(ev(plain("openai", "y").replace(b'"y"', b'"' + raw + b'"'))), raw
    assert not m(ev(plain("openai", "y")).replace(b"\n\n", b"\r\n\r\n"))
    assert not m(ev(sub(plain("openai", "y"), b"finish_reason", b"null", b'"finish_reason":"stop"')))
    assert chunk_template.learn(plain("openai", "z", 9).decode()) is m  # one compiled template per layout


# -- msgspec before json: the same objects, the same errors ------------------------------------------------------

def reference(data: str) -> object:
    """decode_json as it was, json alone."""
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        raise StreamProtocolError("malformed_chunk", f"chunk is not JSON: {data[:120]!r}") from None


def outcome(f, data: str) -> tuple:
    try:
        v = f(data)
    except StreamProtocolError as e:
        return ("error", e.kind, e.detail)
    return ("ok", repr(v), json.dumps(v, sort_keys=False)) if len(data) < 5000 else ("ok",)


SPECIAL = [
    '{"a":1,"a":2}', "[NaN]", "[-Infinity]", "[1" + "0" * 30 + "]", "[" + "9" * 4000 + "]", "[" + "9" * 5000 + "]",
    "\ufeff{}", '"\\ud800"', '"\\ud83d\\ude00"', "[1E400]", "[-0]", "[-0.0]", "[1e-400]", " {} ", "{}x", "",
    "[1.0]", "[2.5e-324]", "[" * 199 + "]" * 199, "[" * 200 + "]" * 200, "[" * 990 + "]" * 990, "[" * 100_000,
    '{"a":"\x7f"}', '{"a":"\x01"}', '"\ud800"', "[01]", "[.5]", "[1.]", "[+1]", "tru", '{"a":[1,2,{"b":null}]}',
    "[18446744073709551616]", "[-9223372036854775809]", "[0.1, 0.30000000000000004]",
]


@pytest.mark.parametrize("data", SPECIAL + [c.decode("utf-8", "replace") for c in CORPUS])
def test_decode_json_answers_as_json_loads(data):
    assert outcome(decode_json, data) == outcome(reference, data)


@pytest.mark.parametrize("seed", range(10))
def test_decode_json_on_mutated_chunks(seed):
    rng = random.Random(seed)
    for _ in range(300):
        raw = variant(rng, rng.choice(sorted(SERVERS)), rng.randrange(100))
        data = raw.decode("utf-8", "replace")
        assert outcome(decode_json, data) == outcome(reference, data), data
