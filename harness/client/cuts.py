"""Where to cut the bytes waiting on a socket so that each event is dated by the segment that carried it. Pure.

The kernel stamps a TCP receive with the arrival of the last segment it returns (``SO_TIMESTAMPNS``). A reader
that comes late finds several segments waiting; one receive of all of them would date every event in them at the
last one's arrival. So ``InFlight`` peeks at what waits, cuts it here, and receives it piece by piece: each piece
ends where an event ends, so its stamp is the arrival of the byte that completed that event.

- ``EventCuts``: plain HTTP. A piece ends after each blank line of the event stream (LF LF, CR CR, CRLF CRLF and
  their mixes; the end of the HTTP headers is one too). A cut that is not an event's end (a blank line inside
  HTTP chunk framing) only costs one more receive; an event end it misses is counted as a shared stamp.
- ``RecordCuts``: TLS. A piece ends after each whole TLS record (5-byte header, its length): a record is
  decrypted only once complete, and the events in it arrived with it.

Both carry state from one call to the next, because the bytes before a call have been received already.
"""

from __future__ import annotations

import re

__all__ = ["EventCuts", "RecordCuts"]

_BLANK = re.compile(rb"\r\n\r\n|\n\n|\r\r|\n\r\n|\r\n\n")
"""A line end followed by an empty line, in any mix of CR, LF and CRLF (the event stream's dispatch)."""
_TAIL = 3
"""Bytes of what was received before that a blank line ending in the next bytes may start with."""


class EventCuts:
    """Offsets in the waiting bytes just after each blank line; the bytes before are remembered across calls."""

    __slots__ = ("tail",)

    def __init__(self) -> None:
        self.tail = b""

    def __call__(self, data: bytes) -> list[int]:
        """The cuts in ``data`` (increasing, each in 1..len(data)), all of which the caller then receives."""
        tail = self.tail
        buf = tail + data if tail else data
        k = len(tail)
        cuts = [m.end() - k for m in _BLANK.finditer(buf) if m.end() > k]
        self.tail = buf[-_TAIL:]
        return cuts


class RecordCuts:
    """Offsets just after each TLS record that ends in the waiting bytes; a record's progress kept across calls."""

    __slots__ = ("head", "left")

    def __init__(self) -> None:
        self.left = 0
        """Bytes of the current record's body still to come (0: the next byte starts a header)."""
        self.head = b""
        """A header's first bytes, when the last call ended inside one."""

    def __call__(self, data: bytes) -> list[int]:
        """The cuts in ``data`` (increasing, each in 1..len(data)), all of which the caller then receives."""
        cuts: list[int] = []
        n, i, left = len(data), 0, self.left
        if self.head:
            need = 5 - len(self.head)
            if n < need:
                self.head += data
                return cuts
            left, i, self.head = int.from_bytes((self.head + data[:need])[3:5], "big"), need, b""
        while True:
            if left:
                if i + left > n:
                    self.left = left - (n - i)
                    return cuts
                i += left
                left = 0
                cuts.append(i)
            if i + 5 > n:
                self.left, self.head = 0, data[i:]
                return cuts
            left = int.from_bytes(data[i + 3:i + 5], "big")
            i += 5
