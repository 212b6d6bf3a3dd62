"""One request being read: a receive on its ready socket in, stamped bytes into its ``ResponseReader`` out.

The per-token hot path, shared by the worker's one reader (``client/mux.py``, gevent) and the plain blocking
loop (``client/transport.py``, threads and scripts). ``pump()`` is called only when the socket is readable
(non-blocking sockets: a spurious wake costs one ``EAGAIN``) and never blocks.

Every receive is stamped before any parsing. On Linux the stamp is the kernel's own receive time
(``SO_TIMESTAMPNS``), so a reader draining a burst of streams one after another does not add its reading
order to their times; elsewhere it is ``time.perf_counter`` at ``recv``. TLS is decrypted here from a memory
BIO (``ssl.SSLObject``), so TLS streams keep the kernel's stamp too.

A receive's stamp is the arrival of the newest byte it returns, and Linux keeps no more than that: segments
that wait in a socket's receive queue are merged, each merge keeping the newer time (``tcp_try_coalesce``), so
not even a receive cut at each event's end could date the earlier ones (tried: every piece came back with the
newest time). A receive's bytes arrived between the last moment its socket was known empty and its stamp. When
that window may pass ``LATE_S`` and the receive completes several output chunks, all but the last are counted in the
record's ``shared_stamps``: their times may be late by more than ``LATE_S``. The window is known to be short when
the bytes woke a reader that was waiting for them (the mux's pass began within ``LATE_S`` of the stamp); it may be
long when they waited while the reader was away (``behind``: the mux found the socket ready when it came back, and
the newest came more than ``LATE_S`` after it left), when the pass began long after them (the loop was busy with
another greenlet, or off the CPU), or when they came long after the pass began (the reader was busy with other
streams). Without a pass (one socket, blocking),
a read more than ``LATE_S`` after the stamp. Several chunks that came together on time (a server or a gateway that
writes them at once) are not counted: they shared a time because they arrived together.

How the chunks came is counted too: the receives that brought any (``RequestRecord.receives``), and those that
ended inside an event whose rest came more than ``LATE_S`` later (``held``): a server writes whole events (one or
several a write), so a cut event left waiting was held on the path (a gateway's buffer, filled and sent on by
size). Plain HTTP only: a TLS record's plaintext ends where the record does.
"""

from __future__ import annotations

import _socket
import socket
import ssl
import struct
import sys
import time

from harness.client.deadline import HANGUPS, Deadline
from harness.client.reader import ResponseReader

__all__ = ["LATE_S", "RECV_BYTES", "SO_TIMESTAMPNS", "InFlight"]

LATE_S = 0.001
"""A receive this late may carry chunk times off by more than this (the 1 ms bound timing promises)."""

RECV_BYTES = 65536
# Python does not export it; 35 is SO_TIMESTAMPNS (= SCM_TIMESTAMPNS) in Linux's asm-generic socket.h.
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35 if sys.platform == "linux" else None)
_CMSG_SPACE = socket.CMSG_SPACE(16) if hasattr(socket, "CMSG_SPACE") else 0
_unpack = struct.Struct("qq").unpack_from
_EVENT_ENDS = (b"\n\n\r\n", b"\n\n", b"\r\n\r\n")
"""How a receive that ends at an event boundary ends: an event's blank line, in a chunked HTTP body or not."""


class InFlight:
    """The read side of one request on ``sock`` (``tls``: its ``SSLObject`` and incoming BIO, or None).

    ``reused``: the socket carried an earlier response, so an EOF or reset before any byte means the server
    had closed it (``stale``: the caller sends again on a new one) rather than a failure of this request."""

    __slots__ = ("chunk_times", "cut", "deadline", "fd", "feed", "kernel_ts", "reader", "real_minus_perf", "record",
                 "recv", "recvmsg", "reused", "sock", "stale", "tls", "waiter")

    def __init__(self, sock: _socket.socket, tls: tuple[ssl.SSLObject, ssl.MemoryBIO] | None, kernel_ts: bool,
                 reader: ResponseReader, deadline: Deadline, reused: bool, real_minus_perf: float) -> None:
        self.sock, self.tls, self.kernel_ts = sock, tls, kernel_ts
        # gevent's socket wraps the real one (``_sock``) in Python for its waiting; ours is non-blocking and read
        # only when ready, so the real one's methods do (a Python frame less per receive).
        raw = sock._sock if type(sock).__module__.startswith("gevent.") else sock  # type: ignore[attr-defined]
        self.recv, self.recvmsg = raw.recv, raw.recvmsg
        self.fd = sock.fileno()
        self.reader, self.deadline, self.reused = reader, deadline, reused
        self.real_minus_perf = real_minus_perf
        """``time.time() - time.perf_counter()``: puts the kernel's CLOCK_REALTIME stamps on our clock."""
        self.feed, self.chunk_times, self.record = reader.feed, reader.chunk_times, reader.record
        self.cut: tuple[float, int] | None = None
        """The last receive ended inside an event: its time and size."""
        self.stale = False
        self.waiter: object = None
        """Whoever waits for this request to end (the mux's use)."""

    def pump(self, behind: float | None = None, start: float | None = None) -> bool:
        """One receive, fed to the reader; True once reading is over (the reader is over, or ``stale``).
        ``behind``: the bytes waited in the socket while the reader was away (for more than ``LATE_S``) since this
        moment; ``start``: when the reader's pass over its ready sockets began (the mux knows both)."""
        deadline = self.deadline
        try:
            if self.kernel_ts:
                data, anc, _, _ = self.recvmsg(RECV_BYTES, _CMSG_SPACE)
            else:
                data, anc = self.recv(RECV_BYTES), None
        except BlockingIOError:  # woken for nothing (another reader took the bytes, or a TLS record is partial)
            return False
        except OSError as exc:
            return self._lost(f"connection error after {len(self.chunk_times)} content chunks: {exc}")
        t = now = time.perf_counter()
        if anc and anc[0][1] == SO_TIMESTAMPNS:
            # The kernel's receive time on our clock: when the bytes arrived, however late we read them.
            sec, nsec = _unpack(anc[0][2])
            t = min(now, sec + nsec * 1e-9 - self.real_minus_perf)
        deadline.last = t
        before = len(self.chunk_times)
        if self.tls is not None:
            over = self._tls(self.tls, data, t)
        elif not data:
            return self._eof(t)
        else:
            over = self.feed(data, t)
            if not over and not deadline.first:
                deadline.first = bool(self.chunk_times)
        n = len(self.chunk_times) - before
        if n:
            rec = self.record
            rec.receives += 1
            if n > 1 and (  # one time for several, which may have come long before it
                    (t - behind if behind is not None else now - t if start is None else abs(t - start)) > LATE_S):
                self.reader.shared_stamps(n - 1, before)
        if self.cut is not None:
            if t - self.cut[0] > LATE_S:  # the rest of a cut event came late: held on the way
                rec = self.record
                rec.held += 1
                rec.held_bytes = max(rec.held_bytes, self.cut[1])
            self.cut = None
        if n and not over and self.tls is None and not data.endswith(_EVENT_ENDS):
            self.cut = (t, len(data))
        return over

    def expire(self, kind: str, now: float) -> None:
        """A deadline of kind ``kind`` passed at ``now``: the request ends with that error class, or cancelled when
        it is the user's hang-up (``deadline.HANGUPS``)."""
        self.deadline.expired = kind
        if kind in HANGUPS:
            self.reader.cancel(kind, now)
            return
        self.reader.fail(kind, f"{kind.replace('_', ' ')} after {now - self.reader.start:.3f} s "
                               f"({len(self.chunk_times)} content chunks)", now)

    def _tls(self, tls: tuple[ssl.SSLObject, ssl.MemoryBIO], data: bytes, t: float) -> bool:
        obj, incoming = tls
        if data:
            incoming.write(data)
        else:
            incoming.write_eof()
        eof = not data
        while True:  # every whole record this receive completed; a partial one waits for more bytes
            try:
                plain = obj.read(RECV_BYTES)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:  # the server's close_notify
                eof = True
                break
            except ssl.SSLError as exc:
                if eof:  # closed without close_notify: an EOF like any other (the reader judges the response)
                    break
                return self._lost(f"TLS error after {len(self.chunk_times)} content chunks: {exc}")
            if not plain:
                eof = True
                break
            if self.feed(plain, t):
                return True
        if eof:
            return self._eof(t)
        if not self.deadline.first:
            self.deadline.first = bool(self.chunk_times)
        return False

    def _eof(self, t: float) -> bool:
        if self.reader.bytes_in or not self.reused:
            self.reader.close(t)
        else:
            self.stale = True  # a kept-alive socket the server had closed: the caller sends again
        return True

    def _lost(self, detail: str) -> bool:
        if self.reader.bytes_in or not self.reused:
            self.reader.fail("reset", detail, time.perf_counter())
        else:
            self.stale = True
        return True
