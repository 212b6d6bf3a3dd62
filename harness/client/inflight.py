"""One request being read: a receive on its ready socket in, stamped bytes into its ``ResponseReader`` out.

The per-token hot path, shared by the worker's one reader (``client/mux.py``, gevent) and the plain blocking
loop (``client/transport.py``, threads and scripts). ``pump()`` is called only when the socket is readable
(non-blocking sockets: a spurious wake costs one ``EAGAIN``) and never blocks.

Every receive is stamped before any parsing. On Linux the stamp is the kernel's own receive time
(``SO_TIMESTAMPNS``), so a reader draining a burst of streams one after another does not add its reading
order to their times; elsewhere it is ``time.perf_counter`` at ``recv``. TLS is decrypted here from a memory
BIO (``ssl.SSLObject``), so TLS streams keep the kernel's stamp too.

A receive's stamp is the arrival of the last segment it returns, so a reader that comes late (the worker busy
starting 32 requests at once, another process on its core) would date every event waiting at the last one's
arrival. With kernel stamps, ``pump()`` first peeks at what waits and receives it in pieces that end where an
event (or a TLS record) ends (``client/cuts.py``): each event gets the time of the segment that completed it.
An on-time reader pays one peek more per receive (~1.5 µs against ~30 µs of parsing an event). When one receive
still completes several content chunks that may have come in different segments (no kernel stamps here, or a
framing the cuts do not know), all but the last are counted in the record's ``shared_stamps``: their times may
be late.
"""

from __future__ import annotations

import socket
import ssl
import struct
import sys
import time

from harness.client.cuts import EventCuts, RecordCuts
from harness.client.deadline import Deadline
from harness.client.reader import ResponseReader

__all__ = ["RECV_BYTES", "SO_TIMESTAMPNS", "InFlight"]

RECV_BYTES = 65536
# Python does not export it; 35 is SO_TIMESTAMPNS (= SCM_TIMESTAMPNS) in Linux's asm-generic socket.h.
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35 if sys.platform == "linux" else None)
_CMSG_SPACE = socket.CMSG_SPACE(16) if hasattr(socket, "CMSG_SPACE") else 0
_unpack = struct.Struct("qq").unpack_from
_MSG_PEEK = socket.MSG_PEEK


class InFlight:
    """The read side of one request on ``sock`` (``tls``: its ``SSLObject`` and incoming BIO, or None).

    ``reused``: the socket carried an earlier response, so an EOF or reset before any byte means the server
    had closed it (``stale``: the caller sends again on a new one) rather than a failure of this request."""

    __slots__ = ("chunk_times", "cuts", "deadline", "fd", "feed", "kernel_ts", "reader", "real_minus_perf",
                 "reused", "sock", "stale", "tls", "waiter")

    def __init__(self, sock: socket.socket, tls: tuple[ssl.SSLObject, ssl.MemoryBIO] | None, kernel_ts: bool,
                 reader: ResponseReader, deadline: Deadline, reused: bool, real_minus_perf: float) -> None:
        self.sock, self.tls, self.kernel_ts = sock, tls, kernel_ts
        self.fd = sock.fileno()
        self.reader, self.deadline, self.reused = reader, deadline, reused
        self.real_minus_perf = real_minus_perf
        """``time.time() - time.perf_counter()``: puts the kernel's CLOCK_REALTIME stamps on our clock."""
        self.feed, self.chunk_times = reader.feed, reader.chunk_times
        self.stale = False
        self.cuts: EventCuts | RecordCuts | None = (EventCuts() if tls is None else RecordCuts()) if kernel_ts else None
        """Where the waiting bytes are cut so each event keeps its own segment's stamp; None: one receive each."""
        self.waiter: object = None
        """Whoever waits for this request to end (the mux's use)."""

    def pump(self) -> bool:
        """Receive what waits, fed to the reader; True once reading is over (the reader is over, or ``stale``)."""
        cuts = self.cuts
        try:
            waiting = self.sock.recv(RECV_BYTES, _MSG_PEEK if cuts is not None else 0)
            if cuts is None or not waiting:  # received whole, or the end of the stream
                return self._take(waiting, None, False)
        except BlockingIOError:  # woken for nothing (another reader took the bytes, or a TLS record is partial)
            return False
        except OSError as exc:
            return self._lost(f"connection error after {len(self.chunk_times)} content chunks: {exc}")
        start = 0
        ends = cuts(waiting)
        if not ends or ends[-1] != len(waiting):
            ends.append(len(waiting))  # the rest: part of an event, received now (level-triggered: it would wake us)
        for end in ends:
            try:
                data, anc, _, _ = self.sock.recvmsg(end - start, _CMSG_SPACE)
            except OSError as exc:
                return self._lost(f"connection error after {len(self.chunk_times)} content chunks: {exc}")
            short = len(data) != end - start
            start = end
            if self._take(data, anc, not short):
                return True
            if short:  # not what the peek saw: from now on this socket is received whole
                self.cuts = None
                return False
        return False

    def _take(self, data: bytes, anc: list | None, cut: bool) -> bool:
        """One receive's bytes, stamped: the kernel's time from ``anc`` if it gave one, else now. ``cut``: the
        receive ended where an event ended (``pump``'s pieces)."""
        t = time.perf_counter()
        stamped = False
        if anc and anc[0][1] == SO_TIMESTAMPNS:
            # The kernel's receive time on our clock: when the bytes arrived, however late we read them.
            sec, nsec = _unpack(anc[0][2])
            t = min(t, sec + nsec * 1e-9 - self.real_minus_perf)
            stamped = True
        self.deadline.last = t
        before = len(self.chunk_times)
        if self.tls is not None:
            over = self._tls(data, t)
        elif not data:
            return self._eof(t)
        else:
            over = self.feed(data, t)
            if not over and not self.deadline.first:
                self.deadline.first = bool(self.chunk_times)
        # Several content chunks from one receive share its stamp. A TLS record that carried several arrived as
        # one; otherwise (no kernel stamp, or a piece that should have held one event) they may have come apart.
        if len(self.chunk_times) - before > 1 and not (stamped and cut and self.tls is not None):
            self.reader.shared_stamps(len(self.chunk_times) - before - 1)
        return over

    def expire(self, kind: str, now: float) -> None:
        """A deadline of kind ``kind`` passed at ``now``: the request ends with that error class."""
        self.deadline.expired = kind
        self.reader.fail(kind, f"{kind.replace('_', ' ')} after {now - self.reader.start:.3f} s "
                               f"({len(self.chunk_times)} content chunks)", now)

    def _tls(self, data: bytes, t: float) -> bool:
        obj, incoming = self.tls  # type: ignore[misc]
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
