"""Streaming one request over a keep-alive HTTP/1.1 connection, timing every receive as it arrives.

The I/O half of the client: connect, send, and a recv loop that stamps each receive and hands it to
``reader.ResponseReader`` (pure; HTTP, SSE and OpenAI parsing and the outcome). It also keeps the
deadlines (``watchdog``) and retries once, on a new socket, when a kept-alive one turns out stale.

Plain blocking sockets: under Locust (gevent monkey-patched) they are cooperative, elsewhere they are
ordinary threads' sockets. Every receive is timestamped before any parsing, so no buffering sits between
the wire and the clock (Locust's ``iter_lines`` waits for 1 KB: +100 ms TTFT). On Linux plain TCP the
stamp is the kernel's own receive time (``SO_TIMESTAMPNS``), so a worker reading a burst of streams one
after another does not add its reading order to their times; elsewhere (TLS) it is ``time.perf_counter``
at ``recv``.

TLS (https URLs): the system's CAs by default, or only those of ``ca_file`` (a private CA); ``verify=False``
accepts any certificate and any host name. One ``ssl.SSLContext`` per setting and process
(``tls_context``): loading the system's CA bundle takes milliseconds, too slow for each new connection.
A handshake that fails is ``tls_error`` with the reason ("certificate verify failed: self-signed
certificate (server 127.0.0.1:8443)").

Errors: ``stream_request`` turns network, HTTP and stream trouble into a ``RequestRecord`` with its error
class (``metrics.record.ERROR_CLASSES``) and does not raise for it. ``Connection`` raises ``ValueError``
for a URL that is not http(s). What is not about the exchange passes through: ``GreenletExit`` (Locust
stopping a user mid-request), ``KeyboardInterrupt``, bugs.
"""

from __future__ import annotations

import contextlib
import functools
import re
import socket
import ssl
import struct
import sys
import time
from urllib.parse import urlsplit

from harness.client.reader import BodyParser, ResponseReader
from harness.client.sse import DEFAULT_MAX_LINE
from harness.client.stream import OutputTracker
from harness.client.timeouts import Timeouts
from harness.client.watchdog import Deadline, watchdog
from harness.metrics.record import RequestRecord

__all__ = ["Connection", "Timeouts", "stream_request", "tls_context"]

_RECV = 65536
# Python does not export it; 35 is SO_TIMESTAMPNS (= SCM_TIMESTAMPNS) in Linux's asm-generic socket.h.
_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35 if sys.platform == "linux" else None)
_CMSG_SPACE = socket.CMSG_SPACE(16) if hasattr(socket, "CMSG_SPACE") else 0
_SSL_LOCATION = re.compile(r"^\[SSL: \w+\] | \(_ssl\.c:\d+\)$")  # "[SSL: X] reason (_ssl.c:1006)" -> "reason"


@functools.lru_cache(maxsize=8)
def tls_context(ca_file: str | None = None, verify: bool = True) -> ssl.SSLContext:
    """The client side of TLS: the system's CAs, or only ``ca_file``'s; ``verify=False`` checks nothing."""
    ctx = ssl.create_default_context(cafile=ca_file)
    if not verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


class Connection:
    """One keep-alive connection to ``base_url`` (http or https), reopened when needed.

    ``ca_file`` and ``verify`` are the endpoint's TLS settings (``endpoint.tls``); plain http ignores them."""

    def __init__(self, base_url: str, *, ca_file: str | None = None, verify: bool = True) -> None:
        u = urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"expected an http(s) URL, got {base_url!r}")
        self.tls = u.scheme == "https"
        self.ca_file = ca_file
        self.verify = verify
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
            try:
                sock = tls_context(self.ca_file, self.verify).wrap_socket(sock, server_hostname=self.host)
            except BaseException:
                sock.close()  # a no-op once the TLS socket took the descriptor (it closes that itself)
                raise
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


def stream_request(conn: Connection, path: str, head: bytes, body: bytes, timeouts: Timeouts, *,
                   max_line_bytes: int = DEFAULT_MAX_LINE, intended_start: float | None = None,
                   keep_text: bool = False, tracker: OutputTracker | None = None,
                   body_parser: BodyParser | None = None) -> RequestRecord:
    """Send one streaming request and read it to the end; never raises for network or protocol trouble.

    ``path`` is unused: the request line in ``head`` carries it (kept for the callers in ``harness.load``).
    """
    start = time.perf_counter()
    real_minus_perf = time.time() - start
    if tracker is not None:
        tracker.start = start  # the API's tracker, made by the caller: times count from here
    reader = ResponseReader(start, max_line_bytes=max_line_bytes, intended_start=intended_start,
                            wall_start=start + real_minus_perf, keep_text=keep_text, tracker=tracker,
                            body_parser=body_parser)
    payload = head + body
    while True:
        reused = conn.sock is not None
        if _send(conn, payload, timeouts, start, reader):
            _receive(conn, reader, timeouts, start, reused, real_minus_perf)
        if reader.over or not reused:
            break
        # Not over on a reused socket: the server had closed it (the send failed, or EOF before any byte).
        # Once more on a new socket, which cannot be stale: two rounds at most.
        conn.close()
    if not reader.reusable:
        conn.close()
    return reader.record


def _send(conn: Connection, payload: bytes, timeouts: Timeouts, start: float, reader: ResponseReader) -> bool:
    """Send on the kept-alive socket or a new one; False when that failed (recorded in ``reader`` unless the socket
    was a reused one, which the caller retries)."""
    reused = conn.sock is not None
    if not reused:
        try:
            conn.open(timeouts.connect_s)
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
        except (OSError, UnicodeError) as exc:  # UnicodeError: a host name IDNA cannot encode
            reader.fail("connect_error", f"cannot connect to {conn.host}:{conn.port}: {exc}", time.perf_counter())
            return False
    sock = conn.sock
    assert sock is not None
    sock.settimeout(max(start + timeouts.total_s - time.perf_counter(), 0.001))  # a server that never reads
    try:
        sock.sendall(payload)
    except TimeoutError:
        conn.close()
        reader.fail("total_timeout", f"sending the request took over {timeouts.total_s} s", time.perf_counter())
        return False
    except OSError as exc:
        conn.close()
        if not reused:
            reader.fail("reset", f"send failed: {exc}", time.perf_counter())
        return False
    finally:
        with contextlib.suppress(OSError):  # already closed on failure
            sock.settimeout(None)
    return True


def _handshake_failure(conn: Connection, exc: ssl.SSLError) -> str:
    reason = _SSL_LOCATION.sub("", str(exc.args[1] if len(exc.args) > 1 else exc))
    detail = f"TLS handshake with {conn.host}:{conn.port} failed: {reason}"
    if exc.reason in ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG"):
        detail += " (the server does not speak TLS here: is it plain http://?)"
    return detail


def _receive(conn: Connection, reader: ResponseReader, timeouts: Timeouts, start: float, reused: bool,
             real_minus_perf: float) -> None:
    """Feed ``reader`` every receive, stamped, until it is over, or, on a ``reused`` socket, until it turns out
    stale (closed or reset before any byte of the answer)."""
    sock = conn.sock
    assert sock is not None
    deadline = Deadline(sock, start, timeouts.ttft_s, timeouts.idle_s, timeouts.total_s)
    cooperative = conn.cooperative
    if cooperative:
        watchdog.watch(deadline)
    try:
        _recv_loop(sock, conn.kernel_ts, cooperative, deadline, reader, reused, real_minus_perf)
    finally:
        watchdog.forget(deadline)


def _recv_loop(sock: socket.socket, kernel_ts: bool, cooperative: bool, deadline: Deadline, reader: ResponseReader,
               reused: bool, real_minus_perf: float) -> None:
    # The per-token hot path: one recv, one timestamp, one feed. Everything else happens once per request.
    perf = time.perf_counter
    feed, chunk_times = reader.feed, reader.chunk_times
    while True:
        if not cooperative:  # plain sockets: a per-read timeout is free, no watchdog
            sock.settimeout(max(deadline.next()[0] - perf(), 1e-6))
        try:
            if kernel_ts:
                data, anc, _, _ = sock.recvmsg(_RECV, _CMSG_SPACE)
            else:
                data, anc = sock.recv(_RECV), None
        except TimeoutError:  # the per-read timeout, i.e. the earliest deadline (nothing moved it since)
            deadline.expired = deadline.expired or deadline.next()[1]
            _expired(deadline, reader)
            return
        except OSError as exc:
            if deadline.expired:  # the watchdog shut the socket down
                _expired(deadline, reader)
            elif reader.bytes_in or not reused:  # else a stale socket: the caller retries
                reader.fail("reset", f"connection error after {len(chunk_times)} content chunks: {exc}", perf())
            return
        if deadline.expired:
            _expired(deadline, reader)
            return
        t = perf()
        if anc and anc[0][1] == _SO_TIMESTAMPNS:
            # The kernel's receive time (CLOCK_REALTIME) on our clock: the moment the bytes arrived, however
            # late this greenlet got to read them (a burst of streams is read one after another).
            sec, nsec = struct.unpack("qq", anc[0][2][:16])
            t = min(t, sec + nsec * 1e-9 - real_minus_perf)
        deadline.last = t
        if not data:
            if reader.bytes_in or not reused:  # else a stale socket: the caller retries
                reader.close(t)
            return
        if feed(data, t):
            return
        if not deadline.first:
            deadline.first = bool(chunk_times)


def _expired(deadline: Deadline, reader: ResponseReader) -> None:
    kind = deadline.expired or "reset"
    now = time.perf_counter()
    reader.fail(kind, f"{kind.replace('_', ' ')} after {now - reader.start:.3f} s "
                      f"({len(reader.chunk_times)} content chunks)", now)
