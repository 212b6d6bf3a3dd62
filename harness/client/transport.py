"""Streaming one request over a keep-alive HTTP/1.1 connection, timing every receive as it arrives.

The I/O half of the client: a ``connection.Connection`` (connect, TLS, send, keep-alive), then the answer, each
receive stamped and handed to ``reader.ResponseReader`` (pure: HTTP, SSE and the API's parsing, the outcome):

- **gevent (inside Locust):** the answer is read by the worker's one reader (``client/mux.py``), which drains
  every ready stream per wake and keeps the deadlines. The request's greenlet waits once per request, not once
  per token.
- **plain (threads, scripts):** each request waits for its socket with ``select.poll``, the timeout being the
  next deadline.

A kept-alive socket the server closes in the instant between ``Connection.alive``'s check and the send: the
request is sent once more on a new socket (two rounds at most). A TLS handshake that fails is ``tls_error``
with the reason ("certificate verify failed: self-signed certificate (server 127.0.0.1:8443)").

A user who hangs up (``cancel_after_s``: that long after the request was fully sent; ``patience_s``: that long after
the start with no content yet) ends the request at that moment through its ``Deadline``, like a timeout: the record
is cancelled (``ResponseReader.cancel``), and the socket is closed at once, never reused.

Errors: ``stream_request`` turns network, HTTP and stream trouble into a ``RequestRecord`` with its error
class (``metrics.record.ERROR_CLASSES``) and does not raise for it. What is not about the exchange passes
through: ``GreenletExit`` (Locust stopping a user mid-request), ``KeyboardInterrupt``, bugs.
"""

from __future__ import annotations

import math
import re
import select
import ssl
import time

from harness.client.connection import Connection, resolve, tls_context
from harness.client.deadline import Deadline
from harness.client.inflight import InFlight
from harness.client.reader import BodyParser, ResponseReader
from harness.client.sse import DEFAULT_MAX_LINE
from harness.client.stream import OutputTracker
from harness.metrics.record import RequestRecord
from harness.spec.timeouts import Timeouts
from harness.workload.prompts import SplicedBody

__all__ = ["Connection", "Timeouts", "resolve", "stream_request", "tls_context"]

_SSL_LOCATION = re.compile(r"^\[SSL: \w+\] | \(_ssl\.c:\d+\)$")  # "[SSL: X] reason (_ssl.c:1006)" -> "reason"


def stream_request(conn: Connection, path: str, head: bytes, body: bytes | SplicedBody, timeouts: Timeouts, *,
                   max_line_bytes: int = DEFAULT_MAX_LINE, intended_start: float | None = None,
                   keep_text: bool = False, tracker: OutputTracker | None = None,
                   body_parser: BodyParser | None = None, cancel_after_s: float | None = None,
                   patience_s: float | None = None) -> RequestRecord:
    """Send one request and read its answer to the end; never raises for network or protocol trouble.

    ``path`` is unused: the request line in ``head`` carries it (kept for the callers in ``harness.load``).
    A ``SplicedBody`` (a long prompt's) is sent as its buffers, the head joined to the first (small) one only.
    ``cancel_after_s``, ``patience_s``: the user's hang-ups (module docstring); None: none.
    """
    start = time.perf_counter()
    real_minus_perf = time.time() - start
    if tracker is not None:
        tracker.start = start  # the API's tracker, made by the caller: times count from here
    reader = ResponseReader(start, max_line_bytes=max_line_bytes, intended_start=intended_start,
                            wall_start=start + real_minus_perf, keep_text=keep_text, tracker=tracker,
                            body_parser=body_parser)
    payload: bytes | list[bytes | memoryview] = head + body if isinstance(body, bytes) else \
        [head + body.parts[0], *body.parts[1:]]
    while True:
        reused = conn.alive()
        if _send(conn, payload, timeouts, start, reader, reused):
            sent = start + (reader.record.sent_s or 0.0)
            deadline = Deadline(start, timeouts.ttft_s, timeouts.idle_s, timeouts.total_s,
                                cancel_at=math.inf if cancel_after_s is None else sent + cancel_after_s,
                                patience_at=math.inf if patience_s is None else start + patience_s)
            # a send that went through left conn.sock open
            st = InFlight(conn.sock, conn.tls_io and conn.tls_io[:2], conn.kernel_ts, reader,  # type: ignore[arg-type]
                          deadline, reused, real_minus_perf)
            _receive(conn, st)
        if reader.over or not reused:
            break
        # Not over on a reused socket: the server closed it after our check (the send failed, or EOF before any
        # byte). Once more on a new socket, which cannot be stale: two rounds at most.
        conn.close()
    rec = reader.record
    rec.new_connection = not reused
    rec.after_error, conn.last_failed = conn.last_failed, rec.error is not None
    if reader.reusable:
        conn.kept(reader.headers, time.perf_counter())
    else:
        conn.close()
    return rec


def _send(conn: Connection, payload: bytes | list[bytes | memoryview], timeouts: Timeouts, start: float,
          reader: ResponseReader, reused: bool) -> bool:
    """Send on the kept-alive socket or a new one; False when that failed (recorded in ``reader`` unless the socket
    was a reused one, which the caller retries)."""
    if not reused:
        t0 = time.perf_counter()
        try:
            conn.open(timeouts.connect_s)
            reader.record.connect_s = time.perf_counter() - t0
        except TimeoutError:
            reader.fail("connect_timeout", f"connect to {conn.host}:{conn.port} took over {timeouts.connect_s} s",
                        time.perf_counter())
            return False
        except ssl.SSLCertVerificationError as exc:
            reader.fail("tls_error", f"certificate verify failed: {exc.verify_message or exc.reason} "
                                     f"(server {conn.host}:{conn.port})", time.perf_counter())
            return False
        except ssl.SSLError as exc:
            reader.fail("tls_error", _handshake_failure(conn, exc), time.perf_counter())
            return False
        except OSError as exc:
            reader.fail("connect_error", f"cannot connect to {conn.host}:{conn.port}: {exc}", time.perf_counter())
            return False
    try:
        conn.send(payload, start + timeouts.total_s)
        reader.record.sent_s = time.perf_counter() - start
    except TimeoutError:
        conn.close()
        reader.fail("total_timeout", f"sending the request took over {timeouts.total_s} s", time.perf_counter())
        return False
    except (OSError, ssl.SSLError) as exc:
        conn.close()
        if not reused:
            reader.fail("reset", f"send failed: {exc}", time.perf_counter())
        return False
    return True


def _handshake_failure(conn: Connection, exc: ssl.SSLError) -> str:
    reason = _SSL_LOCATION.sub("", str(exc.args[1] if len(exc.args) > 1 else exc))
    detail = f"TLS handshake with {conn.host}:{conn.port} failed: {reason}"
    if exc.reason in ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG"):
        detail += " (the server does not speak TLS here: is it plain http://?)"
    return detail


def _receive(conn: Connection, st: InFlight) -> None:
    """Read ``st`` to its end: in the worker's one reader under gevent, else here, waiting for each receive."""
    deadline, perf = st.deadline, time.perf_counter
    if conn.cooperative:
        from harness.client import mux

        if mux.available():
            mux.read(st)
            return
        from gevent.socket import wait_read

        while True:  # no epoll (not Linux): this greenlet waits for its own socket
            at, kind = deadline.next()
            try:
                wait_read(st.fd, timeout=max(at - perf(), 1e-6))
            except TimeoutError:
                st.expire(kind, perf())
                return
            if st.pump():
                return
    poll = select.poll()
    poll.register(st.fd, select.POLLIN)
    while True:
        at, kind = deadline.next()
        now = perf()
        if now >= at or not poll.poll(max(1, math.ceil((at - now) * 1000))):
            if perf() >= at:  # else woken early by poll's rounding: look again
                st.expire(kind, perf())
                return
            continue
        if st.pump():
            return
