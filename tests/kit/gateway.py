"""A gateway between kneecap and a server, as users meet them: it passes requests on at once and holds responses in
a buffer of ``hold_bytes``, writing each full buffer as it fills and the rest when the response ends (an HTTP
message complete: chunked terminator or content-length reached), as a proxy with response buffering on does
(nginx's ``proxy_buffering``, a Go service's ``bufio.Writer``). ``hold_bytes=0`` passes every byte on as it comes.

    with start_sim() as sim, gateway(sim.url, hold_bytes=16384) as url:
        kneecap_run(path, host=url, ...)

One thread per direction per connection; everything ends with the context (sockets closed, threads joined).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from urllib.parse import urlsplit

import httptools

__all__ = ["gateway"]


class _MessageEnds:
    """httptools callbacks: counts the responses that ended in the bytes fed so far."""

    def __init__(self) -> None:
        self.ended = 0

    def on_message_complete(self) -> None:
        self.ended += 1


def _upstream_to_client(up: socket.socket, down: socket.socket, hold: int) -> None:
    ends = _MessageEnds()
    parser = httptools.HttpResponseParser(ends)
    buf = bytearray()
    with contextlib.suppress(OSError):
        while data := up.recv(65536):
            buf += data
            seen = ends.ended
            with contextlib.suppress(httptools.HttpParserUpgrade, httptools.HttpParserError):
                parser.feed_data(data)
            if ends.ended != seen and hold:  # a response ended: the parser starts over on the next one
                parser = httptools.HttpResponseParser(ends)
            if not hold or ends.ended != seen:
                down.sendall(bytes(buf))
                buf.clear()
                continue
            while len(buf) >= hold:
                down.sendall(bytes(buf[:hold]))
                del buf[:hold]
        if buf:
            down.sendall(bytes(buf))
    with contextlib.suppress(OSError):
        down.shutdown(socket.SHUT_WR)


def _client_to_upstream(down: socket.socket, up: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := down.recv(65536):
            up.sendall(data)
    with contextlib.suppress(OSError):
        up.shutdown(socket.SHUT_WR)


@contextlib.contextmanager
def gateway(upstream_url: str, hold_bytes: int = 0) -> Iterator[str]:
    """A gateway on a free loopback port in front of ``upstream_url`` (http); its base URL."""
    target = urlsplit(upstream_url)
    addr = (target.hostname or "127.0.0.1", target.port or 80)
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(128)
    threads: list[threading.Thread] = []
    socks: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                down, _ = srv.accept()
            except OSError:
                return
            try:
                up = socket.create_connection(addr)
            except OSError:
                down.close()
                continue
            for s in (down, up):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            socks.extend((down, up))
            for fn, args in ((_upstream_to_client, (up, down, hold_bytes)), (_client_to_upstream, (down, up))):
                t = threading.Thread(target=fn, args=args, daemon=True)
                t.start()
                threads.append(t)

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    try:
        yield f"http://127.0.0.1:{srv.getsockname()[1]}"
    finally:
        stop.set()
        with contextlib.suppress(OSError):
            srv.shutdown(socket.SHUT_RDWR)  # wakes the accept (closing alone does not, on Linux)
        srv.close()
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        acceptor.join(5)
        for t in threads:
            t.join(5)
