"""Small keep-alive HTTP/1.1 servers for client tests: canned answers in a thread on a free loopback port, with TLS
when asked, counting the requests they answer (the server's side of "how many requests did the client send").

Also a self-signed certificate for 127.0.0.1, made with the ``openssl`` command line.
"""

from __future__ import annotations

import contextlib
import json
import pathlib
import socket
import socketserver
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from tests.kit.procs import free_port

__all__ = ["RATE_LIMITED", "USAGE_AS_STRINGS", "CannedServer", "closed_port", "self_signed", "sse_reply",
           "tls_server", "tls_server_context"]


def _chunked(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


def _event(obj: dict | str) -> bytes:
    return b"data: " + (obj if isinstance(obj, str) else json.dumps(obj)).encode() + b"\n\n"


def sse_reply(usage: dict | None = None, tokens: int = 3) -> bytes:
    """A streamed chat completion of ``tokens`` one-token chunks, its usage and [DONE], chunked, kept alive."""
    usage = usage if usage is not None else {"prompt_tokens": 10, "completion_tokens": tokens}
    events = [_event({"id": "c1", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})]
    events += [_event({"id": "c1", "choices": [{"index": 0, "delta": {"content": "a"},
                                                 "finish_reason": "length" if i == tokens - 1 else None}]})
               for i in range(tokens)]
    events += [_event({"id": "c1", "choices": [], "usage": usage}), _event("[DONE]")]
    return (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
            + b"".join(map(_chunked, events)) + b"0\r\n\r\n")


USAGE_AS_STRINGS = sse_reply({"prompt_tokens": "fifty", "completion_tokens": "three"})
_SLOW_DOWN = b'{"error": {"message": "rate limit reached, retry in 1s", "type": "rate_limit"}}'
RATE_LIMITED = (b"HTTP/1.1 429 Too Many Requests\r\nretry-after: 1\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\n\r\n%b" % (len(_SLOW_DOWN), _SLOW_DOWN))


class CannedServer:
    """Answers every request with ``answer`` (bytes, or a function of the request count); ``requests`` counts them.

    Use::

        with CannedServer(RATE_LIMITED) as srv:
            ... srv.url ... srv.requests
    """

    def __init__(self, answer: bytes | Callable[[int], bytes], *, tls: ssl.SSLContext | None = None,
                 close_after_each: bool = False) -> None:
        self.answer = answer if callable(answer) else (lambda _n: answer)
        self.tls = tls
        self.close_after_each = close_after_each
        """Close the connection after each answer, whatever the answer's headers say (llama.cpp's server does)."""
        self.requests = 0
        self.connections = 0
        """Connections accepted."""
        self.sockets: list[socket.socket] = []
        """The server's side of each connection, in accept order (a test may write to an idle one)."""
        self.received: list[tuple[bytes, bytes]] = []
        """(head, body) of every request, in arrival order."""
        self.arrivals: list[float] = []
        """``time.monotonic()`` of every request, in arrival order."""
        self.handshake_errors: list[str] = []
        self._lock = threading.Lock()
        outer = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                sock = self.request
                with outer._lock:
                    outer.connections += 1
                    outer.sockets.append(sock)
                if outer.tls is not None:
                    try:
                        sock = outer.tls.wrap_socket(sock, server_side=True)
                    except (ssl.SSLError, OSError) as exc:  # the client refused our certificate
                        outer.handshake_errors.append(str(exc))
                        return
                with contextlib.suppress(OSError):
                    outer._serve(sock)

        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)

    def _serve(self, sock: socket.socket) -> None:
        buf = b""
        while True:
            while b"\r\n\r\n" not in buf:
                data = sock.recv(65536)
                if not data:
                    return
                buf += data
            head, _, buf = buf.partition(b"\r\n\r\n")
            length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            while len(buf) < length:
                data = sock.recv(65536)
                if not data:
                    return
                buf += data
            body, buf = buf[:length], buf[length:]
            with self._lock:
                self.requests += 1
                n = self.requests
                self.received.append((head, body))
                self.arrivals.append(time.monotonic())
            sock.sendall(self.answer(n))
            if self.close_after_each:
                return  # the handler's socket closes on return

    def __enter__(self) -> CannedServer:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    return free_port()


def self_signed(folder: pathlib.Path) -> tuple[str, str]:
    """(certificate, key) PEM files: a self-signed certificate for IP 127.0.0.1, also usable as its own CA."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True, timeout=30)
    return str(cert), str(key)


def tls_server_context(cert: str, key: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    return ctx


@contextmanager
def tls_server(folder: pathlib.Path, answer: bytes = b"") -> Iterator[tuple[CannedServer, str]]:
    """A TLS server with a fresh self-signed certificate; yields it and the certificate's path."""
    cert, key = self_signed(folder)
    with CannedServer(answer or sse_reply(), tls=tls_server_context(cert, key)) as srv:
        yield srv, cert
