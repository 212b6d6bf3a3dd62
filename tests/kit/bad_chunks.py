"""Chunks a server should not send, each with what the client must make of it: the case tables of the tracker's
tests (``tests/client/test_openai_chunks.py``) and the reader's (``tests/client/test_reader.py``). The fast-path
test (``tests/client/test_fast_path.py``) reads the same chunks inside a stream the fast path is engaged in, with
the fast path on and off, so its corpus grows with theirs: the tables live here, where all three import them."""

from __future__ import annotations

__all__ = ["BROKEN_EVENTS", "JSON_EDGES", "PROTOCOL_ERRORS", "WRONG_SHAPES", "WRONG_TYPES", "WRONG_USAGE"]

# -- the tracker: one event's data -----------------------------------------------------------------------------------

PROTOCOL_ERRORS: list[tuple[str, str]] = [
    ("{not json", "malformed_chunk"),
    ("[1, 2]", "bad_response"),
    ('{"choices": [7]}', "bad_response"),
    ('{"choices": [{"delta": "text"}]}', "bad_response"),
    ('{"error": {"message": "model overloaded", "code": 503}}', "stream_error"),
    ("[" * 100_000, "malformed_chunk"),  # json.loads raises RecursionError, not ValueError
]
"""(chunk, error class): chunks the tracker rejects, each with its class."""


WRONG_TYPES: list[tuple[object, str]] = [
    ([1, 2], "server chunk is an array, expected an object"),
    ("error", "server chunk is 'error', expected an object"),
    (None, "server chunk is null, expected an object"),
    ({"choices": "abc"}, "server chunk's choices is 'abc', expected an array"),
    ({"choices": {"0": {}}}, "server chunk's choices is an object, expected an array"),
    ({"choices": 5}, "server chunk's choices is 5, expected an array"),
    ({"choices": [7]}, "server chunk's choices[0] is 7, expected an object"),
    ({"choices": [{"delta": "text"}]}, "server chunk's choices[0].delta is 'text', expected an object"),
    ({"choices": [{"delta": ["a"]}]}, "server chunk's choices[0].delta is an array, expected an object"),
    ({"choices": [{"text": "a", "finish_reason": 7}]}, "server chunk's choices[0].finish_reason is 7, expected a "
                                                       "string"),
    ({"choices": [{"delta": {}, "finish_reason": {"why": "stop"}}]},
     "server chunk's choices[0].finish_reason is an object, expected a string"),
    ({"choices": [], "usage": "all of it"}, "server chunk's usage is 'all of it', expected an object"),
    ({"choices": [], "usage": [3]}, "server chunk's usage is an array, expected an object"),
    ({"choices": [], "usage": {"prompt_tokens": "fifty", "completion_tokens": 3}},
     "server chunk's usage.prompt_tokens is 'fifty', expected an integer >= 0"),
    ({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": "3"}},
     "server chunk's usage.completion_tokens is '3', expected an integer >= 0"),
    ({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": -1}},
     "server chunk's usage.completion_tokens is -1, expected an integer >= 0"),
    ({"choices": [], "usage": {"prompt_tokens": True, "completion_tokens": 3}},
     "server chunk's usage.prompt_tokens is true, expected an integer >= 0"),
    ({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2.5}},
     "server chunk's usage.completion_tokens is 2.5, expected an integer >= 0"),
]
"""(chunk as a JSON value, the problem named): a field of the wrong type is a ``bad_response`` naming the field."""


JSON_EDGES: list[str] = [
    ' {"id": "w", "choices": []}', '{"id": "w", "choices": []}\t ', '{"id": "w", "choices": []}{"id": "x"}',
    '{"id": "w", "choices": []} x', '', '\ufeff{"id": "w"}', '{"id": "\u00e9", "choices": []}',
]
"""One JSON value with something around it (whitespace, a second value, a BOM, nothing at all): around its
fast path the decoder answers as ``json.loads`` does."""


# -- the reader: a bad chunk inside a stream, judged at its arrival --------------------------------------------------

BROKEN_EVENTS: list[tuple[bytes, str, str]] = [
    (b"data: {not json\n\n", "malformed_chunk", "chunk is not JSON: '{not json'"),
    (b'data: {"choices": [7]}\n\n', "bad_response",
     "server chunk's choices[0] is 7, expected an object: '{\"choices\": [7]}'"),
    (b'data: {"error": {"message": "model overloaded"}}\n\n', "stream_error",
     "server error in stream: model overloaded"),
]
"""(SSE event, error class, detail): a broken chunk mid-stream, as the reader reports it."""


WRONG_USAGE: list[bytes] = [
    b'"usage": {"prompt_tokens": "fifty", "completion_tokens": "three"}',
    b'"usage": {"prompt_tokens": 9, "completion_tokens": "3"}',
    b'"usage": "lots"',
    b'"usage": [9, 3]',
]
"""A chunk's ``usage`` member of the wrong type: a ``bad_response``, and no count kept."""


WRONG_SHAPES: list[bytes] = [
    b'{"id": "c", "choices": "a"}', b'{"id": "c", "choices": {"0": {"delta": {"content": "a"}}}}',
    b'{"id": "c", "choices": [{"delta": "a"}]}', b'{"id": "c", "choices": [{"delta": {}, "finish_reason": 1}]}',
    b'["c"]', b'"c"', b"7", b"null", b"true",
]
"""A chunk's JSON of the wrong shape (choices not an array, a delta not an object, not an object at all): a
``bad_response``."""
