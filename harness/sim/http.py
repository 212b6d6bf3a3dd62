"""A minimal HTTP/1.1 server connection on asyncio + httptools, made for streaming many small chunks.

Why not a framework: the simulator writes ~20 k SSE chunks per second from one engine loop; a
synchronous ``transport.write`` per chunk costs a fraction of an awaited framework ``write()``
(see ``benchmarks/sim_throughput.py``). The application gets a parsed ``Request`` and a
``ServerConnection`` to answer on, either in one piece (``respond``) or streamed with chunked transfer
encoding (``start_stream``/``send_chunk``/``end_stream``). Keep-alive and pipelining are supported;
requests on one connection are answered in order.

Two tail causes live here, both off by default: ``accept_delay_s`` holds a new connection's first bytes
unread for that long (a slow TLS or connection set-up: the request's arrival, and so the server's own
latencies, start after it, the client's do not), and ``close_after`` answers the current request with
``connection: close`` and closes once it is done (``--close-after-p``; the next request pays a new connection).
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus

import httptools

from harness.sim.openai import ApiError, error_body

__all__ = ["Request", "ServerConnection"]


@dataclass
class Request:
    method: str
    path: str
    query: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    keep_alive: bool = True
    received_at: float = 0.0
    """time.monotonic() when the request's first bytes were parsed (its arrival)."""


def _status_line(status: int) -> bytes:
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Unknown"
    return f"HTTP/1.1 {status} {phrase}\r\n".encode()


class ServerConnection(asyncio.Protocol):
    """One client connection. ``handler(request, connection)`` must answer each request exactly once."""

    def __init__(self, handler: Callable[[Request, ServerConnection], None], *, max_body_bytes: int,
                 accept_delay_s: float = 0.0) -> None:
        self._handler = handler
        self._accept_delay = accept_delay_s
        self._held: list[bytes] | None = [] if accept_delay_s > 0 else None
        """Bytes received during the accept delay, parsed when it ends (pause_reading in connection_made does
        not hold under uvloop)."""
        self._max_body = max_body_bytes
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._pending: list[Request] = []
        self._current: Request | None = None
        self._busy = False
        self._url = b""
        self._began = 0.0
        self._headers: dict[str, str] = {}
        self._body: list[bytes] = []
        self._body_size = 0
        self._too_big = False
        self.closed = False
        self._discarding = False
        self.on_lost: Callable[[], None] | None = None
        """Called once when the peer goes away (or we abort) while a response is in progress."""
        self.close_after = False
        """Answer the current request with ``connection: close`` and close after it."""

    # -- asyncio.Protocol -------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # a stream server's transport is an asyncio.Transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._held is not None:
            asyncio.get_running_loop().call_later(self._accept_delay, self._accepted)

    def _accepted(self) -> None:
        held, self._held = self._held or [], None
        for data in held:
            if self.closed:
                return
            self.data_received(data)

    def data_received(self, data: bytes) -> None:
        if self._discarding:
            return
        if self._held is not None:
            self._held.append(data)
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(400, b"protocol upgrades are not supported")
        except httptools.HttpParserError as exc:
            if self._too_big:
                self._fail(413, f"request body larger than {self._max_body} bytes".encode())
            else:
                self._fail(400, f"malformed HTTP request: {exc}".encode())

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        callback, self.on_lost = self.on_lost, None
        if callback is not None:
            callback()

    # -- httptools callbacks ----------------------------------------------------------------
    def on_message_begin(self) -> None:
        self._began = time.monotonic()
        self._url = b""
        self._headers = {}
        self._body = []
        self._body_size = 0

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        key = name.decode("latin-1").lower()
        self._headers[key] = value.decode("latin-1")
        if key == "content-length" and value.isdigit() and int(value) > self._max_body:
            self._too_big = True
            raise httptools.HttpParserError("body too large")

    def on_body(self, body: bytes) -> None:
        self._body_size += len(body)
        if self._body_size > self._max_body:
            self._too_big = True
            raise httptools.HttpParserError("body too large")
        self._body.append(body)

    def on_message_complete(self) -> None:
        try:
            url = httptools.parse_url(self._url)
            path, query = url.path.decode("latin-1"), (url.query or b"").decode("latin-1")
        except httptools.HttpParserInvalidURLError:
            path, query = "", ""
        self._pending.append(Request(self._parser.get_method().decode("latin-1"), path, query, self._headers,
                                     b"".join(self._body), self._parser.should_keep_alive(), self._began))
        if len(self._pending) > 16 and self._transport is not None:
            self._transport.pause_reading()  # a client pipelining without reading: stop taking more
        self._next()

    # -- answering --------------------------------------------------------------------------
    def _next(self) -> None:
        while not self._busy and self._pending and not self.closed:
            self._current = self._pending.pop(0)
            self._busy = True
            self._handler(self._current, self)
        if not self._pending and self._transport is not None and not self.closed:
            self._transport.resume_reading()

    def _done(self) -> None:
        self._busy = False
        self.on_lost = None
        if self.close_after or (self._current is not None and not self._current.keep_alive):
            self.close()
            return
        self._next()

    def respond(self, status: int, body: bytes, content_type: str = "application/json",
                headers: dict[str, str] | None = None) -> None:
        """Answer the current request in one piece."""
        if self.closed or self._transport is None:
            return
        head = [_status_line(status), f"content-type: {content_type}\r\ncontent-length: {len(body)}\r\n".encode()]
        for k, v in (headers or {}).items():
            head.append(f"{k}: {v}\r\n".encode())
        if self.close_after or (self._current is not None and not self._current.keep_alive):
            head.append(b"connection: close\r\n")
        self._transport.write(b"".join(head) + b"\r\n" + body)
        self._done()

    def start_stream(self, status: int = 200, content_type: str = "text/event-stream; charset=utf-8") -> None:
        if self.closed or self._transport is None:
            return
        self._transport.write(_status_line(status) + f"content-type: {content_type}\r\n"
                              "cache-control: no-cache\r\ntransfer-encoding: chunked\r\n".encode()
                              + (b"connection: close\r\n\r\n" if self.close_after else b"\r\n"))

    def send_chunk(self, data: bytes) -> None:
        if not self.closed and self._transport is not None:
            self._transport.write(b"%x\r\n%b\r\n" % (len(data), data))

    def end_stream(self) -> None:
        if not self.closed and self._transport is not None:
            self._transport.write(b"0\r\n\r\n")
            self._done()

    def close(self) -> None:
        """Close cleanly (FIN) after what was written; the current response is abandoned."""
        self.on_lost = None
        if not self.closed and self._transport is not None:
            self.closed = True
            self._transport.close()

    def reset(self) -> None:
        """Abort with a TCP RST (SO_LINGER 0): what a crashed server or a proxy timeout looks like."""
        self.on_lost = None
        if self.closed or self._transport is None:
            return
        sock = self._transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.closed = True
        self._transport.abort()

    def _fail(self, status: int, message: bytes) -> None:
        """Answer unparseable input and close; mid-response there is no room for an answer, only close."""
        self._pending.clear()
        body = error_body(ApiError(status, message.decode()))
        if self._transport is None or self.closed:
            return
        if not self._busy:
            self._transport.write(_status_line(status) + f"content-type: application/json\r\ncontent-length: "
                                  f"{len(body)}\r\nconnection: close\r\n\r\n".encode() + body)
        if status == 413 and not self._busy:
            # Swallow the rest of the upload before closing: closing with unread bytes sends a RST,
            # and the client would see a reset instead of our answer. Bounded: 5 s at most.
            self._discarding = True
            asyncio.get_running_loop().call_later(5.0, self.close)
            return
        self.close()
