"""One keep-alive HTTP/1.1 connection: connect, TLS, send, and whether a kept socket can carry the next request.

The socket seam of the client (``transport.stream_request`` runs one request over it). Sockets are the C-level
non-blocking ones (``_socket``), the same with or without gevent: under gevent (inside Locust) connect and send
wait cooperatively (``gevent.socket.wait_write``), else with ``select.poll``.

Keep-alive: the host is resolved once per process (``resolve``; again after a failed connect). Before a
kept-alive socket is reused, a non-blocking peek checks the server has not closed it (llama.cpp's server
says ``Keep-Alive: timeout=5`` and closes after every streamed response) and that its ``Keep-Alive`` timeout
has not run out; a ``Connection: close`` answer closes it at once. So a closed connection is reopened inside
the next request's time (a real client pays that connect: ``RequestRecord.new_connection``), and a stale
socket is not written to.

TLS (https URLs): the system's CAs by default, or only those of ``ca_file`` (a private CA); ``verify=False``
accepts any certificate and any host name. One ``ssl.SSLContext`` per setting and process (``tls_context``):
loading the system's CA bundle takes milliseconds. TLS runs over memory BIOs on the same socket, so TLS
streams keep the kernel's receive stamps.

``Connection`` raises ``ValueError`` for a URL that is not http(s); ``open`` and ``send`` raise ``OSError``,
``TimeoutError`` and ``ssl.SSLError``, which ``transport`` turns into error classes.
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

from harness.client.inflight import RECV_BYTES, SO_TIMESTAMPNS

__all__ = ["Connection", "cooperative", "resolve", "tls_context"]

_KEEP_ALIVE_TIMEOUT = re.compile(r"timeout\s*=\s*(\d+(?:\.\d+)?)", re.I)
_RESOLVED: dict[tuple[str, int], list[tuple]] = {}
_IOV_MAX = 1024  # Linux's limit on buffers per sendmsg
_TLS_SLICE = 1 << 18


@functools.lru_cache(maxsize=8)
def tls_context(ca_file: str | None = None, verify: bool = True) -> ssl.SSLContext:
    """The client side of TLS: the system's CAs, or only ``ca_file``'s; ``verify=False`` checks nothing (and loads
    no CA: the system bundle costs ~35 ms, a stall of every stream on the worker's loop)."""
    if not verify:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        return ctx
    return ssl.create_default_context(cafile=ca_file)


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
        self.sock: _socket.socket | None = None
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

    def open(self, timeout: float) -> _socket.socket:
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
        self.sock = sock
        self.idle_until = math.inf
        if self.tls:
            try:
                self._handshake(until)
            except BaseException:
                self.close()
                raise
        return sock

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
        parts: list[bytes | memoryview] = [payload] if isinstance(payload, bytes) else payload
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
            if data and self.tls_io is not None and self._tls_idle(self.tls_io, data):
                return True
        self.close()  # EOF, a reset, an unasked answer (a 408), or the timeout about to close it
        return False

    def _tls_idle(self, tls_io: tuple[ssl.SSLObject, ssl.MemoryBIO, ssl.MemoryBIO], data: bytes) -> bool:
        """TLS bytes on an idle connection: only records that carry no data (a session ticket) keep it usable."""
        obj, incoming, _ = tls_io
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
