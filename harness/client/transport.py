"""Streaming one request over a keep-alive HTTP/1.1 connection, timing every chunk as it arrives.

Plain blocking sockets: under Locust (gevent monkey-patched) they are cooperative, elsewhere they are
ordinary threads' sockets. The response is parsed by httptools (C, handles chunked encoding). Every
receive is timestamped before any parsing, so no buffering sits between the wire and the clock
(Locust's ``iter_lines`` waits for 1 KB: +100 ms TTFT). On Linux plain TCP the stamp is the kernel's
own receive time (``SO_TIMESTAMPNS``), so a worker reading a burst of streams one after another does
not add its reading order to their times; elsewhere (TLS) it is ``time.perf_counter`` at ``recv``.
Nothing raises: every outcome is a ``RequestRecord``, failures with their error class.
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import struct
import sys
import time
from urllib.parse import urlsplit

import httptools

from harness.client.openai import StreamProtocolError, StreamTracker
from harness.client.sse import DEFAULT_MAX_LINE, LineDecoder, OversizedLine
from harness.client.timeouts import Timeouts
from harness.client.watchdog import Deadline, watchdog
from harness.metrics.record import RequestRecord

__all__ = ["Connection", "Timeouts", "stream_request"]

_RECV = 65536
_MAX_ERROR_BODY = 65536
# Python does not export it; 35 is SO_TIMESTAMPNS (= SCM_TIMESTAMPNS) in Linux's asm-generic socket.h.
_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35 if sys.platform == "linux" else None)
_CMSG_SPACE = socket.CMSG_SPACE(16) if hasattr(socket, "CMSG_SPACE") else 0


class Connection:
    """One keep-alive connection to ``base_url`` (http or https), reopened when needed."""

    def __init__(self, base_url: str) -> None:
        u = urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"expected an http(s) URL, got {base_url!r}")
        self.tls = u.scheme == "https"
        self.host = u.hostname
        self.port = u.port or (443 if self.tls else 80)
        self.host_header = u.netloc.rsplit("@", 1)[-1]
        self.base_path = u.path.rstrip("/")
        self.sock: socket.socket | None = None
        self.kernel_ts = False
        """True when the kernel stamps each receive (SO_TIMESTAMPNS, plain TCP on Linux)."""
        self.cooperative = False
        """True for gevent sockets (inside Locust)."""

    def open(self, timeout: float) -> socket.socket:
        sock = socket.create_connection((self.host, self.port), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.kernel_ts = False
        if self.tls:
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=self.host)
        elif _SO_TIMESTAMPNS is not None:
            try:
                sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
                self.kernel_ts = True
            except OSError:
                pass
        # gevent sockets wait without timeouts (each would arm a timer per event); the watchdog keeps the
        # deadlines. Plain sockets get a per-read timeout instead (harness/client/watchdog.py).
        self.cooperative = type(sock).__module__.startswith("gevent")
        sock.settimeout(None)
        self.sock = sock
        return sock

    def close(self) -> None:
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.close()
            self.sock = None


class _Response:
    """httptools callbacks."""

    def __init__(self) -> None:
        self.headers: dict[str, str] = {}
        self.headers_done = False
        self.complete = False
        self.keep_alive = False
        self.body: list[bytes] = []
        self.parser: httptools.HttpResponseParser | None = None

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self.headers_done = True

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.complete = True
        # Ask now: once feed_data returns, httptools has reset and always answers False.
        self.keep_alive = self.parser is not None and self.parser.should_keep_alive()


class _Failure(Exception):
    def __init__(self, kind: str, detail: str) -> None:
        self.kind, self.detail = kind, detail


def stream_request(conn: Connection, path: str, head: bytes, body: bytes, timeouts: Timeouts, *,
                   max_line_bytes: int = DEFAULT_MAX_LINE, intended_start: float | None = None) -> RequestRecord:
    """Send one streaming request and read it to the end; never raises for network or protocol trouble."""
    start = time.perf_counter()
    rec = RequestRecord(start=start, intended_start=intended_start)
    tracker = StreamTracker(start)
    try:
        _exchange(conn, head + body, timeouts, start, rec, tracker, max_line_bytes)
    except _Failure as f:
        rec.error, rec.error_detail = f.kind, f.detail
        rec.e2e_s = time.perf_counter() - start
        conn.close()
    except StreamProtocolError as e:
        rec.error, rec.error_detail = e.kind, e.detail
        rec.e2e_s = time.perf_counter() - start
        conn.close()
    except OversizedLine as e:
        rec.error, rec.error_detail = "oversized_line", str(e)
        rec.e2e_s = time.perf_counter() - start
        conn.close()
    rec.chunk_times = tracker.chunk_times
    rec.ttft_s = tracker.chunk_times[0] if tracker.chunk_times else None
    rec.finish_reason = tracker.finish_reason
    rec.response_id = tracker.response_id
    rec.prompt_tokens = tracker.prompt_tokens
    if tracker.completion_tokens is not None:
        rec.output_tokens = tracker.completion_tokens
    elif tracker.chunk_times:
        rec.output_tokens, rec.output_tokens_counted = len(tracker.chunk_times), True
    return rec


def _send(conn: Connection, payload: bytes, timeouts: Timeouts, start: float) -> bool:
    """Send on the kept-alive socket or a new one; True when the socket was reused."""
    reused = conn.sock is not None
    if not reused:
        try:
            conn.open(timeouts.connect_s)
        except TimeoutError:
            raise _Failure("connect_timeout", f"connect to {conn.host}:{conn.port} took over "
                                              f"{timeouts.connect_s} s") from None
        except (OSError, ssl.SSLError) as exc:
            raise _Failure("connect_error", f"cannot connect to {conn.host}:{conn.port}: {exc}") from None
    sock = conn.sock
    assert sock is not None
    sock.settimeout(max(start + timeouts.total_s - time.perf_counter(), 0.001))  # a server that never reads
    try:
        sock.sendall(payload)
    except TimeoutError:
        conn.close()
        raise _Failure("total_timeout", f"sending the request took over {timeouts.total_s} s") from None
    except OSError as exc:
        conn.close()
        if reused:
            return _send(conn, payload, timeouts, start)
        raise _Failure("reset", f"send failed: {exc}") from None
    finally:
        with contextlib.suppress(OSError):  # already closed on failure
            sock.settimeout(None)
    return reused


def _exchange(conn: Connection, payload: bytes, timeouts: Timeouts, start: float, rec: RequestRecord,
              tracker: StreamTracker, max_line: int) -> None:
    reused = _send(conn, payload, timeouts, start)
    deadline = Deadline(conn.sock, start, timeouts.ttft_s, timeouts.idle_s, timeouts.total_s)  # type: ignore[arg-type]
    if conn.cooperative:
        watchdog.watch(deadline)
    try:
        retry = _read(conn, deadline, reused, start, rec, tracker, max_line)
    finally:
        watchdog.forget(deadline)
    if retry:  # a stale keep-alive socket: once more on a new one
        _exchange(conn, payload, timeouts, start, rec, tracker, max_line)


def _expired(deadline: Deadline, start: float, tracker: StreamTracker) -> _Failure:
    kind = deadline.expired or "reset"
    return _Failure(kind, f"{kind.replace('_', ' ')} after {time.perf_counter() - start:.3f} s "
                          f"({len(tracker.chunk_times)} content chunks)")


def _read(conn: Connection, deadline: Deadline, reused: bool, start: float, rec: RequestRecord,
          tracker: StreamTracker, max_line: int) -> bool:
    """Read the response to its end; True when a reused socket turned out stale before any byte."""
    resp = _Response()
    parser = resp.parser = httptools.HttpResponseParser(resp)
    decoder = LineDecoder(max_line)
    got_bytes = False
    sse = True
    real_minus_perf = time.time() - time.perf_counter()
    error_body: list[bytes] = []
    perf = time.perf_counter
    sock = conn.sock
    assert sock is not None
    cooperative = conn.cooperative
    while True:
        if not cooperative:  # plain sockets: a per-read timeout is free, no watchdog
            at, kind = deadline.next()
            sock.settimeout(max(at - perf(), 1e-6))
        try:
            if conn.kernel_ts:
                data, anc, _, _ = sock.recvmsg(_RECV, _CMSG_SPACE)
            else:
                data, anc = sock.recv(_RECV), None
        except TimeoutError:
            deadline.expired = kind
            raise _expired(deadline, start, tracker) from None
        except OSError as exc:
            if deadline.expired:
                raise _expired(deadline, start, tracker) from None
            if reused and not got_bytes:
                conn.close()
                return True
            raise _Failure("reset", f"connection error after {len(tracker.chunk_times)} content chunks: "
                                    f"{exc}") from None
        if deadline.expired:
            raise _expired(deadline, start, tracker)
        t = perf()
        if anc and anc[0][1] == _SO_TIMESTAMPNS:
            # The kernel's receive time (CLOCK_REALTIME) on our clock: the moment the bytes arrived, however
            # late this greenlet got to read them (a burst of streams is read one after another).
            sec, nsec = struct.unpack("qq", anc[0][2][:16])
            t = min(t, sec + nsec * 1e-9 - real_minus_perf)
        deadline.last = t
        if not data:
            if reused and not got_bytes:
                conn.close()
                return True
            conn.close()
            if tracker.finish_reason is not None and sse:  # closed after finish: complete, no [DONE]
                rec.e2e_s = tracker.finish_t - start  # type: ignore[operator]
                return False
            raise _Failure("truncated" if resp.headers_done else "reset",
                           f"server closed the connection after {len(tracker.chunk_times)} content chunks "
                           f"without finish_reason or [DONE]")
        got_bytes = True
        was_done = resp.headers_done
        try:
            parser.feed_data(data)
        except httptools.HttpParserError as exc:
            raise _Failure("bad_response", f"response is not valid HTTP: {exc}") from None
        if resp.headers_done and not was_done:
            rec.headers_s = t - start
            rec.status = parser.get_status_code()
            sse = rec.status == 200 and resp.headers.get("content-type", "").startswith("text/event-stream")
        if resp.body:
            chunks, resp.body = resp.body, []
            if sse:
                for chunk in chunks:
                    for ev in decoder.feed(t, chunk):
                        if tracker.on_event(ev.t, ev.data):
                            rec.e2e_s = ev.t - start
                deadline.first = bool(tracker.chunk_times)
            else:
                error_body.extend(chunks)
                if sum(map(len, error_body)) > _MAX_ERROR_BODY:
                    resp.complete = True  # enough to say what went wrong
        if rec.e2e_s is not None and not resp.complete:
            continue  # [DONE] seen: read the chunked terminator so the connection can be reused
        if resp.complete:
            if not resp.keep_alive:
                conn.close()
            if not sse:
                _http_failure(rec, resp, b"".join(error_body))
            if rec.e2e_s is None:
                if tracker.finish_reason is None:
                    raise _Failure("truncated", f"stream ended without finish_reason or [DONE] after "
                                                f"{len(tracker.chunk_times)} content chunks")
                rec.e2e_s = tracker.finish_t - start  # type: ignore[operator]
            return False


def _http_failure(rec: RequestRecord, resp: _Response, body: bytes) -> None:
    status = rec.status or 0
    try:
        err = json.loads(body).get("error", {})
        message = err.get("message", "") if isinstance(err, dict) else str(err)
    except (ValueError, AttributeError):
        message = body[:200].decode("utf-8", "replace")
    if status == 200:
        raise _Failure("not_sse", f"HTTP 200 with content-type {resp.headers.get('content-type')!r}, expected "
                                  f"text/event-stream: {message[:200]}")
    if status == 429:
        retry = resp.headers.get("retry-after")
        try:
            rec.retry_after_s = float(retry) if retry is not None else None
        except ValueError:
            rec.retry_after_s = None
        raise _Failure("http_429", f"HTTP 429 (Retry-After: {retry}): {message[:200]}")
    kind = "http_5xx" if status >= 500 else "http_4xx"
    raise _Failure(kind, f"HTTP {status}: {message[:200]}")
