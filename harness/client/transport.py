"""Streaming one request over a keep-alive HTTP/1.1 connection, timing every receive as it arrives.

The I/O half of the client: connect, send, and reading the answer, each receive stamped and handed to
``reader.ResponseReader`` (pure: HTTP, SSE and the API's parsing, the outcome). Sockets are the C-level
non-blocking ones (``_socket``), the same with or without gevent:

- **gevent (inside Locust):** connect and send wait cooperatively (``gevent.socket.wait_write``); the answer is
  read by the worker's one reader (``client/mux.py``), which drains every ready stream per wake and keeps
  the deadlines. The request's greenlet waits once per request, not once per token.
- **plain (threads, scripts):** each request waits for its socket with ``select.poll``, the timeout being the
  next deadline.

Keep-alive: the host is resolved once per process (``resolve``; again after a failed connect). Before a
kept-alive socket is reused, a non-blocking peek checks the server has not closed it (llama.cpp's server
says ``Keep-Alive: timeout=5`` and closes after every streamed response) and that its ``Keep-Alive`` timeout
has not run out; a ``Connection: close`` answer closes it at once. So a closed connection is reopened inside
the next request's time (a real client pays that connect: ``RequestRecord.new_connection``), and a stale
socket is not written to. The server may still close in the instant between the check and the send: then
the request is sent once more on a new socket (two rounds at most).

TLS (https URLs): the system's CAs by default, or only those of ``ca_file`` (a private CA); ``verify=False``
accepts any certificate and any host name. One ``ssl.SSLContext`` per setting and process (``tls_context``):
loading the system's CA bundle takes milliseconds. TLS runs over memory BIOs on the same socket, so TLS
streams keep the kernel's receive stamps. A handshake that fails is ``tls_error`` with the reason
("certificate verify failed: self-signed certificate (server 127.0.0.1:8443)").

Errors: ``stream_request`` turns network, HTTP and stream trouble into a ``RequestRecord`` with its error
class (``metrics.record.ERROR_CLASSES``) and does not raise for it. ``Connection`` raises ``ValueError``
for a URL that is not http(s). What is not about the exchange passes through: ``GreenletExit`` (Locust
stopping a user mid-request), ``KeyboardInterrupt``, bugs.
"""

from __future__ import annotations

import _socket
import contextlib
import errno
import functools
import math
import os
import re
import select
import socket
import ssl
import sys
import time
from urllib.parse import urlsplit

from harness.client.deadline import Deadline
from harness.client.inflight import RECV_BYTES, SO_TIMESTAMPNS, InFlight
from harness.client.reader import BodyParser, ResponseReader
from harness.client.sse import DEFAULT_MAX_LINE
from harness.client.stream import OutputTracker
from harness.client.timeouts import Timeouts
from harness.metrics.record import RequestRecord
from harness.workload.prompts import SplicedBody

__all__ = ["Connection", "Timeouts", "resolve", "stream_request", "tls_context"]

_SSL_LOCATION = re.compile(r"^\[SSL: \w+\] | \(_ssl\.c:\d+\)$")  # "[SSL: X] reason (_ssl.c:1006)" -> "reason"
_KEEP_ALIVE_TIMEOUT = re.compile(r"timeout\s*=\s*(\d+(?:\.\d+)?)", re.I)
_RESOLVED: dict[tuple[str, int], list[tuple]] = {}
_IOV_MAX = 1024  # Linux's limit on buffers per sendmsg
_TLS_SLICE = 1 << 18


@functools.lru_cache(maxsize=8)
def tls_context(ca_file: str | None = None, verify: bool = True) -> ssl.SSLContext:
    """The client side of TLS: the system's CAs, or only ``ca_file``'s; ``verify=False`` checks nothing."""
    ctx = ssl.create_default_context(cafile=ca_file)
    if not verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def cooperative() -> bool:
    """True when gevent has patched the socket module (inside Locust): waits must go through its hub."""
    monkey = sys.modules.get("gevent.monkey")
    return monkey is not None and monkey.is_module_patched("socket")


def resolve(host: str, port: int) -> list[tuple]:
    """``getaddrinfo`` for a stream socket, once per process (a literal address needs no lookup at all)."""
    key = (host, port)
    found = _RESOLVED.get(key)
    if found is None:
        for family in (_socket.AF_INET, _socket.AF_INET6):
            with contextlib.suppress(OSError):
                _socket.inet_pton(family, host)
                found = [(family, _socket.SOCK_STREAM, 0, "", (host, port))]
                break
        if found is None:  # gevent's resolver when patched: a name lookup must not block the hub
            found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        _RESOLVED[key] = found
    return found


def _wait(fd: int, write: bool, timeout: float, coop: bool) -> None:
    """Wait until ``fd`` is writable (else readable); ``TimeoutError`` after ``timeout`` seconds."""
    if timeout <= 0:
        raise TimeoutError("timed out")
    if coop:
        from gevent.socket import wait_read, wait_write

        (wait_write if write else wait_read)(fd, timeout=timeout)
        return
    p = select.poll()
    p.register(fd, select.POLLOUT if write else select.POLLIN)
    if not p.poll(max(1, math.ceil(timeout * 1000))):
        raise TimeoutError("timed out")


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
        self.tls_io: tuple[ssl.SSLObject, ssl.MemoryBIO, ssl.MemoryBIO] | None = None
        """TLS: the session and its incoming and outgoing BIOs."""
        self.kernel_ts = False
        """True when the kernel stamps each receive (SO_TIMESTAMPNS, Linux)."""
        self.cooperative = cooperative()
        """True under gevent (inside Locust)."""
        self.idle_until = math.inf
        """The server's ``Keep-Alive: timeout`` runs out about now: reopen rather than race its close."""
        self.last_failed = False
        """The last request on this connection object failed (the next one's ``after_error``)."""

    def open(self, timeout: float) -> socket.socket:
        """Connect (and shake hands over TLS) within ``timeout`` s. Raises ``TimeoutError``, ``OSError``,
        ``ssl.SSLError``."""
        self.close()
        until = time.perf_counter() + timeout
        coop = self.cooperative
        try:
            addrs = resolve(self.host, self.port)
        except UnicodeError as exc:  # a host name IDNA cannot encode
            raise OSError(f"host name {self.host!r} cannot be encoded: {exc}") from None
        last: OSError = OSError(f"no address for {self.host}")
        for family, _, proto, _, addr in addrs:
            sock = _socket.socket(family, _socket.SOCK_STREAM, proto)
            sock.setblocking(False)
            try:
                err = sock.connect_ex(addr)
                if err in (errno.EINPROGRESS, errno.EAGAIN, errno.EALREADY):
                    _wait(sock.fileno(), True, until - time.perf_counter(), coop)
                    err = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_ERROR)
                if err:
                    raise OSError(err, os.strerror(err))
            except BaseException as exc:
                sock.close()
                if not isinstance(exc, OSError) or isinstance(exc, TimeoutError):
                    raise
                last = exc
                continue
            break
        else:
            _RESOLVED.pop((self.host, self.port), None)  # look the name up again next time: it may have moved
            raise last
        sock.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
        self.kernel_ts = False
        if SO_TIMESTAMPNS is not None:
            try:
                sock.setsockopt(_socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
                self.kernel_ts = True
            except OSError:
                pass
        self.sock = sock  # type: ignore[assignment]
        self.idle_until = math.inf
        if self.tls:
            try:
                self._handshake(until)
            except BaseException:
                self.close()
                raise
        return sock  # type: ignore[return-value]

    def _handshake(self, until: float) -> None:
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        obj = tls_context(self.ca_file, self.verify).wrap_bio(incoming, outgoing, server_hostname=self.host)
        self.tls_io = (obj, incoming, outgoing)
        sock = self.sock
        assert sock is not None
        while True:
            try:
                obj.do_handshake()
                break
            except ssl.SSLWantReadError:
                self._send_raw([outgoing.read()], until)
                _wait(sock.fileno(), False, until - time.perf_counter(), self.cooperative)
                with contextlib.suppress(BlockingIOError):
                    data = sock.recv(RECV_BYTES)
                    if data:
                        incoming.write(data)
                    else:
                        incoming.write_eof()
        self._send_raw([outgoing.read()], until)

    def send(self, payload: bytes | list[bytes | memoryview], until: float) -> None:
        """All of ``payload`` (bytes, or buffers sent in order without joining them: a long prompt's body) by
        ``until`` (``TimeoutError``); ``OSError`` when the connection fails."""
        parts = [payload] if isinstance(payload, bytes) else payload
        if self.tls_io is None:
            self._send_raw(parts, until)
            return
        obj, _, outgoing = self.tls_io
        for part in parts:  # TLS must copy (it encrypts into its BIO): a slice at a time, never a whole 6 MB twice
            view = memoryview(part)
            for at in range(0, len(view), _TLS_SLICE):
                obj.write(view[at:at + _TLS_SLICE])
                self._send_raw([outgoing.read()], until)

    def _send_raw(self, parts: list[bytes | memoryview], until: float) -> None:
        """``sendmsg`` of the buffers (the kernel gathers them, nothing is joined here); a partial send, the usual
        case for megabytes, resumes inside the buffer it stopped in."""
        sock = self.sock
        assert sock is not None
        views = [memoryview(p) for p in parts if len(p)]
        i = 0
        while i < len(views):
            try:
                n = sock.sendmsg(views[i:i + _IOV_MAX])
            except BlockingIOError:
                _wait(sock.fileno(), True, until - time.perf_counter(), self.cooperative)
                continue
            while n:
                size = len(views[i])
                if n < size:
                    views[i] = views[i][n:]
                    break
                n -= size
                i += 1

    def alive(self) -> bool:
        """The kept-alive socket can carry a request: open, within the server's keep-alive timeout, and neither
        closed by the server nor holding bytes nobody asked for. Never blocks; closes the socket when not."""
        sock = self.sock
        if sock is None:
            return False
        if time.perf_counter() < self.idle_until:
            try:
                data = sock.recv(RECV_BYTES if self.tls_io else 1, 0 if self.tls_io else _socket.MSG_PEEK)
            except BlockingIOError:
                return True  # nothing to read: open
            except OSError:
                data = b""
            if data and self.tls_io is not None and self._tls_idle(data):
                return True
        self.close()  # EOF, a reset, an unasked answer (a 408), or the timeout about to close it
        return False

    def _tls_idle(self, data: bytes) -> bool:
        """TLS bytes on an idle connection: only records that carry no data (a session ticket) keep it usable."""
        obj, incoming, _ = self.tls_io  # type: ignore[misc]
        incoming.write(data)
        try:
            return not obj.read(RECV_BYTES)
        except ssl.SSLWantReadError:
            return True
        except ssl.SSLError:
            return False

    def kept(self, headers: dict[str, str], now: float) -> None:
        """The response ended with the connection kept: note the server's ``Keep-Alive: timeout`` if it gave one."""
        m = _KEEP_ALIVE_TIMEOUT.search(headers.get("keep-alive", ""))
        # Reopen a little before the server's timer (it started at its send, about our receive) fires.
        self.idle_until = now + max(0.0, float(m.group(1)) * 0.9 - 0.1) if m else math.inf

    def close(self) -> None:
        self.tls_io = None
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.close()
            self.sock = None


def stream_request(conn: Connection, path: str, head: bytes, body: bytes | SplicedBody, timeouts: Timeouts, *,
                   max_line_bytes: int = DEFAULT_MAX_LINE, intended_start: float | None = None,
                   keep_text: bool = False, tracker: OutputTracker | None = None,
                   body_parser: BodyParser | None = None) -> RequestRecord:
    """Send one request and read its answer to the end; never raises for network or protocol trouble.

    ``path`` is unused: the request line in ``head`` carries it (kept for the callers in ``harness.load``).
    A ``SplicedBody`` (a long prompt's) is sent as its buffers, the head joined to the first (small) one only.
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
            st = InFlight(conn.sock, conn.tls_io and conn.tls_io[:2], conn.kernel_ts, reader,  # type: ignore[arg-type]
                          Deadline(start, timeouts.ttft_s, timeouts.idle_s, timeouts.total_s), reused,
                          real_minus_perf)
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
