"""One streamed HTTP response, read as it arrives: bytes and their arrival time in, a ``RequestRecord`` out.

Pure: no sockets, no clock, no gevent (``tests/client/test_reader.py`` replays scripted bytes on a fake clock).
A push object in the style of httpx's decoders: the transport calls ``feed(data, t)`` for every receive,
with ``t`` the moment those bytes arrived, ``close(t)`` when the server closes the connection, and
``fail(kind, detail, t)`` for trouble only the transport can see (connect errors, timeouts, resets), and
``cancel(reason, t)`` when the user hangs up (``workload/cancel.py``: the record is cancelled, not failed).
``feed`` and ``close`` return True once the response is ``over``; ``record`` is then complete.

Three pure layers do the parsing: httptools (C) for HTTP/1.1 and its chunked framing, ``sse.LineDecoder``
for events, the API's tracker (``openai.StreamTracker`` for chat/completions) for its chunks; at an event
boundary the tracker may first take whole events straight from the bytes (``take_events``, its fast path:
``chunk_template.py``). This object decides the outcome:

1. Headers: ``headers_s`` and ``status``. The body is an event stream only for 200 with
   ``content-type: text/event-stream``; any other body is kept (up to 64 KB) to say what went wrong.
2. Event stream: every event is stamped with its chunk's arrival. ``[DONE]`` sets ``done_seen`` and E2E,
   and reading goes on to the end of the HTTP message, so the connection can carry the next request. Bytes
   after the end of the message are not read as another response; the connection is then not reusable.
3. The message ends: after ``[DONE]``, ok. Without it, ok when a chunk carried a ``finish_reason`` (E2E
   is that chunk's arrival), else ``truncated``. A non-stream body: ``http_429``, ``http_4xx``, ``http_5xx``,
   or ``not_sse`` for a 200. A 429's ``Retry-After`` is kept as seconds (``retry_after_s``): a finite
   number >= 0, or an HTTP date counted from the response's ``Date`` (the server's own clock), else from
   ``wall_start`` (the client's wall clock at ``start``, passed in); anything else is None.
4. The server closes first (``close``): ok when a ``finish_reason`` was seen in an event stream (E2E at
   that chunk), else ``truncated`` after the headers, ``reset`` before them.
5. Bytes that break a layer: ``bad_response`` (not HTTP, or a chunk's JSON of the wrong shape, e.g. usage
   counts as strings: ``openai.py``), ``malformed_chunk`` (a ``data:`` line that is not JSON),
   ``stream_error`` (the server's error object in the stream), ``oversized_line`` (an SSE line over
   ``max_line_bytes``). Whatever the server sends, ``feed`` and ``close`` never raise.

A failure's ``e2e_s`` is when it showed: the arrival of the bytes that broke the stream, or the ``t``
given to ``close``/``fail``. The times the stream reached (headers, content chunks) are kept.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from email.utils import parsedate_to_datetime

import httptools

from harness.client.openai import StreamTracker
from harness.client.sse import DEFAULT_MAX_LINE, LineDecoder, OversizedLine
from harness.client.stream import OutputTracker, StreamProtocolError
from harness.metrics.record import RequestRecord, overflows

__all__ = ["MAX_ERROR_BODY", "MAX_JSON_BODY", "BodyParser", "ResponseReader"]

MAX_ERROR_BODY = 65536
"""Bytes of a non-stream reply kept for its error message; past this the reply is judged as it stands."""
MAX_JSON_BODY = 64 << 20
"""Largest non-streaming answer read (an embeddings batch of a few thousand vectors fits)."""

BodyParser = Callable[[OutputTracker, float, object], None]
"""Reads a non-streaming JSON answer into a tracker; raises ``StreamProtocolError`` on a wrong shape."""


class _PastTheEnd(Exception):
    """Raised from httptools' callback at the start of a message after ours."""


class ResponseReader:
    """Reads one response. Use::

        reader = ResponseReader(start)
        while not reader.over:
            data, t = receive()          # the bytes and when they arrived
            if data:
                reader.feed(data, t)
            else:
                reader.close(t)          # the server closed the connection
        rec = reader.record
    """

    __slots__ = ("_body", "_decoder", "_error_body", "_error_len", "_json", "_parser", "_t", "body_parser",
                 "bytes_in", "chunk_times", "complete", "done_seen", "headers", "headers_done", "keep_alive", "over",
                 "record", "sse", "start", "tracker", "wall_start")

    def __init__(self, start: float, *, max_line_bytes: int = DEFAULT_MAX_LINE,
                 intended_start: float | None = None, wall_start: float | None = None,
                 keep_text: bool = False, tracker: OutputTracker | None = None,
                 body_parser: BodyParser | None = None) -> None:
        self.start = start
        """When the request was initiated (``time.perf_counter``); every duration is from here."""
        self.wall_start = wall_start
        """``time.time()`` at ``start``, if known: turns a Retry-After date into seconds when there is no Date."""
        self.record = RequestRecord(start=start, intended_start=intended_start)
        """The outcome; complete once ``over``."""
        self.tracker = tracker if tracker is not None else StreamTracker(start, keep_text=keep_text)
        """The API's stream tracker (``client/stream.py``; chat/completions by default). ``keep_text``: the record's
        ``content`` gets the answer's text (sessions send it back)."""
        self.body_parser = body_parser
        """Non-streaming requests: reads a 200 JSON body into the tracker (``parser(tracker, t, obj)``)."""
        self._json: list[bytes] | None = None
        self.chunk_times = self.tracker.chunk_times
        """Arrival of each content chunk so far (the tracker's list: the transport watches it for the TTFT)."""
        self.bytes_in = 0
        """Bytes fed so far (0: the server has answered nothing, so a stale kept-alive socket can be retried)."""
        self.headers: dict[str, str] = {}
        """Response headers, names lower-cased."""
        self.headers_done = False
        self.sse = False
        """The body is an event stream (200, text/event-stream)."""
        self.done_seen = False
        """``data: [DONE]`` arrived."""
        self.complete = False
        """The HTTP message ended (the chunked terminator or content-length reached)."""
        self.keep_alive = False
        """The server will take another request on this connection (asked when the message completes)."""
        self.over = False
        """Nothing more to read: success or failure is in ``record``."""
        self._decoder = LineDecoder(max_line_bytes)
        self._parser: httptools.HttpResponseParser | None = httptools.HttpResponseParser(self)
        self._t = start  # arrival of the bytes being parsed, for the httptools callbacks
        self._body: list[bytes] = []
        self._error_body: list[bytes] = []
        self._error_len = 0

    @property
    def reusable(self) -> bool:
        """The connection can carry the next request: the response ended well and the server keeps it open."""
        return self.over and self.keep_alive and self.record.error is None and self.record.cancelled is None

    # -- the transport's calls ---------------------------------------------------------------------------

    def shared_stamps(self, n: int, first: int | None = None) -> None:
        """``n`` more output chunks shared a receive's stamp with a later one and may have arrived earlier; ``first``:
        the index of that receive's first chunk."""
        rec = self.record
        rec.shared_stamps += n
        if first is not None:
            rec.late_chunks = [*(rec.late_chunks or ()), first]

    def feed(self, data: bytes, t: float) -> bool:
        """One receive's bytes, arrived at ``t``; True once the response is over. The per-token hot path."""
        if self.over:
            return True
        self.bytes_in += len(data)
        self._t = t
        try:
            self._parser.feed_data(data)  # type: ignore[union-attr]  # dropped only once over
        except httptools.HttpParserError as exc:
            if not self.complete:
                return self._fail("bad_response", f"response is not valid HTTP: {exc}", t)
            # Bytes past the end of this response (a server's 408 before it closes, a stray answer): not ours,
            # and a connection that carries them cannot be trusted with the next request.
            self.keep_alive = False
        except httptools.HttpParserUpgrade:  # not an HttpParserError: a 101 would escape as an exception
            return self._fail("bad_response", f"HTTP {self.record.status} switches protocols (upgrade: "
                                              f"{self.headers.get('upgrade')}) instead of answering", t)
        body = self._body
        if body:
            self._body = []
            if self.sse:
                tracker, dec = self.tracker, self._decoder
                on_event, take, decode = tracker.on_event, tracker.take_events, dec.feed
                try:
                    for chunk in body:
                        # At an event boundary the tracker may take whole events from the bytes first (its fast
                        # path); a chunk within the line limit holds no line the decoder would refuse.
                        if dec.idle and len(chunk) <= dec.max_line and (taken := take(chunk, t)):
                            if taken == len(chunk):
                                continue
                            chunk = chunk[taken:]
                        for ev in decode(chunk, t):
                            if on_event(ev.t, ev.data):
                                self.done_seen = True
                                self.record.e2e_s = ev.t - self.start
                except StreamProtocolError as e:
                    return self._fail(e.kind, e.detail, t)
                except OversizedLine as e:
                    return self._fail("oversized_line", str(e), t)
            elif self._json is not None:
                self._json.extend(body)
                self._error_len += sum(map(len, body))
                if self._error_len > MAX_JSON_BODY:
                    return self._fail("bad_response", f"JSON response over {MAX_JSON_BODY >> 20} MiB", t)
            else:
                self._error_body.extend(body)
                self._error_len += sum(map(len, body))
                if self._error_len > MAX_ERROR_BODY:  # enough to say what went wrong
                    return self._http_failure()
        if self.complete:
            return self._message_end()
        return False

    def close(self, t: float) -> bool:
        """The server closed the connection at ``t`` (EOF). Always True: the response is over."""
        if self.over:
            return True
        tracker = self.tracker
        if self.sse and tracker.finish_reason is not None:  # closed after the finish: complete, no [DONE]
            # finish_t is set with finish_reason
            self.record.e2e_s = tracker.finish_t - self.start  # type: ignore[operator]
            return self._finish()
        return self._fail("truncated" if self.headers_done else "reset",
                          f"server closed the connection after {len(self.chunk_times)} content chunks without "
                          f"finish_reason or [DONE]", t)

    def fail(self, kind: str, detail: str, t: float) -> bool:
        """End with error class ``kind`` (a key of ``metrics.record.ERROR_CLASSES``) noticed at ``t``."""
        if self.over:
            return True
        return self._fail(kind, detail, t)

    def cancel(self, reason: str, t: float) -> bool:
        """The user hung up at ``t`` (``reason``: "cancel" or "patience"): the record is cancelled, with what the
        stream had brought (TTFT if the first token came, output chunks so far); the connection is not reused."""
        if self.over:
            return True
        self.record.cancelled, self.record.e2e_s = reason, t - self.start
        return self._finish()

    # -- httptools callbacks ------------------------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self.complete:  # a second message in the same bytes: stop there (feed sees a callback error)
            raise _PastTheEnd

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self.headers_done = True
        rec = self.record
        rec.headers_s = self._t - self.start
        # its own parser calls back, so it is live
        rec.status = self._parser.get_status_code()  # type: ignore[union-attr]
        kind = self.headers.get("content-type", "")
        self.sse = rec.status == 200 and kind.startswith("text/event-stream")
        if rec.status == 200 and not self.sse and self.body_parser is not None and "json" in kind:
            self._json = []  # a non-streaming answer

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        self.complete = True
        # Ask now: once feed_data returns, httptools has reset and always answers False.
        # its own parser calls back, so it is live
        self.keep_alive = self._parser.should_keep_alive()  # type: ignore[union-attr]

    # -- outcomes ------------------------------------------------------------------------------------------

    def _message_end(self) -> bool:
        if self._json is not None:
            return self._json_end()
        if not self.sse:
            return self._http_failure()
        if not self.done_seen:
            tracker = self.tracker
            if tracker.finish_reason is None:
                return self._fail("truncated", f"stream ended without finish_reason or [DONE] after "
                                               f"{len(self.chunk_times)} content chunks", self._t)
            # finish_t is set with finish_reason
            self.record.e2e_s = tracker.finish_t - self.start  # type: ignore[operator]
        return self._finish()

    def _json_end(self) -> bool:
        """A non-streaming answer: E2E at its last byte, tokens from its usage; no TTFT (nothing streamed)."""
        data = b"".join(self._json or ())
        try:
            obj = json.loads(data)
        except (ValueError, RecursionError):
            return self._fail("bad_response", f"response body is not JSON: {data[:120]!r}", self._t)
        try:
            self.body_parser(self.tracker, self._t, obj)  # type: ignore[misc]  # _json is set only with a body_parser
        except StreamProtocolError as e:
            return self._fail(e.kind, e.detail, self._t)
        self.record.e2e_s = self._t - self.start
        return self._finish()

    def _http_failure(self) -> bool:
        rec, headers, body = self.record, self.headers, b"".join(self._error_body)
        status = rec.status or 0
        try:
            err = json.loads(body).get("error", {})
            message = err.get("message", "") if isinstance(err, dict) else err
            message = "" if message is None else str(message)
        except (ValueError, AttributeError, RecursionError):  # RecursionError: nested too deep
            message = body[:200].decode("utf-8", "replace")
        if status == 200:
            return self._fail("not_sse", f"HTTP 200 with content-type {headers.get('content-type')!r}, expected "
                                         f"text/event-stream: {message[:200]}", self._t)
        if status == 429:
            retry = headers.get("retry-after")
            rec.retry_after_s = None if retry is None else self._retry_after_s(retry)
            return self._fail("http_429", f"HTTP 429 (Retry-After: {retry}): {message[:200]}", self._t)
        kind = "http_5xx" if status >= 500 else \
            "context_overflow" if overflows(body.decode("utf-8", "replace")) else "http_4xx"
        return self._fail(kind, f"HTTP {status}: {message[:200]}", self._t)

    def _retry_after_s(self, value: str) -> float | None:
        """Retry-After as seconds from now: delay-seconds or an HTTP date (RFC 9110 10.2.3); None if neither."""
        try:
            seconds = float(value)
        except ValueError:
            pass
        else:
            return seconds if math.isfinite(seconds) and seconds >= 0 else None
        try:
            at = parsedate_to_datetime(value).timestamp()
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
        date = self.headers.get("date")
        if date is not None:
            try:  # both on the server's clock: no skew between its clock and ours
                return max(0.0, at - parsedate_to_datetime(date).timestamp())
            except (TypeError, ValueError, IndexError, OverflowError):
                pass
        if self.wall_start is None:
            return None
        return max(0.0, at - (self.wall_start + self._t - self.start))

    def _fail(self, kind: str, detail: str, t: float) -> bool:
        rec = self.record
        rec.error, rec.error_detail, rec.e2e_s = kind, detail, t - self.start
        return self._finish()

    def _finish(self) -> bool:
        tracker, rec = self.tracker, self.record
        rec.chunk_times = tracker.chunk_times
        rec.ttft_s = tracker.chunk_times[0] if tracker.chunk_times else None
        rec.finish_reason = tracker.finish_reason
        rec.response_id = tracker.response_id
        rec.prompt_tokens = tracker.prompt_tokens
        rec.cached_tokens, rec.cached_source = tracker.cached_tokens, tracker.cached_source
        rec.server_prefill_s, rec.server_decode_s = tracker.server_prefill_s, tracker.server_decode_s
        rec.chunk_tokens = tracker.chunk_tokens
        rec.ttfo_s, rec.reasoning_start_s = tracker.content_t, tracker.reasoning_t
        rec.tool_call_s, rec.tool_call_chunks = tracker.tool_t, tracker.tool_chunks
        if tracker.reasoning_tokens is not None:
            rec.reasoning_tokens = tracker.reasoning_tokens
        elif tracker.reasoning_chunks:  # exact from per-chunk counts, else one token per reasoning chunk, flagged
            exact = tracker.chunk_tokens is not None
            rec.reasoning_tokens = tracker.reasoning_chunk_tokens if exact else tracker.reasoning_chunks
            rec.reasoning_tokens_counted = not exact
        if tracker.text is not None:
            rec.content = "".join(tracker.text)
        if tracker.completion_tokens is not None:
            rec.output_tokens = tracker.completion_tokens
        elif tracker.chunk_times:
            rec.output_tokens, rec.output_tokens_counted = len(tracker.chunk_times), True
        self.over = True
        self._parser = None  # it refers back to us: without this the pair waits for the cycle collector
        return True
