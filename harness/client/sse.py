"""Server-sent events from timestamped byte chunks. Pure: no sockets, no clock.

``LineDecoder`` is a push parser on the per-token hot path: ``feed(chunk, t)`` returns the events
that chunk completed. It splits lines itself (LF, CRLF or CR, also when a line end is split across
chunks), keeps only what an OpenAI stream needs (``data`` and ``event``), and refuses a line longer
than ``max_line_bytes``. ``tests/client/test_sse.py`` checks it against sseclient-py, the reference
implementation, on the same awkward chunks.

An event's timestamp is the arrival time of the chunk that completed it (the blank line), which
for OpenAI-style streams is the chunk that carried its ``data:`` line.

A tracker may take common events straight from the bytes (``openai.StreamTracker.take_events``): ``idle`` says
the decoder holds nothing (the next chunk starts at an event boundary) and ``data_event_pattern`` frames a
payload pattern as one whole event, as this decoder would read it.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import KneecapError

__all__ = ["DEFAULT_MAX_LINE", "Event", "LineDecoder", "OversizedLine", "data_event_pattern"]

DEFAULT_MAX_LINE = 256 * 1024


class OversizedLine(KneecapError):
    """A line longer than the decoder's limit (a broken or hostile server)."""


@dataclass(slots=True)
class Event:
    t: float
    """Arrival of the chunk that completed the event."""
    data: str
    """The ``data:`` lines joined by newlines, decoded as UTF-8 (invalid bytes replaced)."""
    event: str = "message"
    """The ``event:`` field, "message" when absent."""


def data_event_pattern(payload: bytes) -> bytes:
    """A bytes regex for one whole event whose data is one line matching ``payload``: ``data:``, one optional space
    (the one the decoder strips), the payload, LF LF. Where ``payload`` can match no CR or LF, a match at the start
    of a chunk fed to an ``idle`` decoder is exactly one event ``feed`` would return, with the payload as its data
    and nothing left behind."""
    return rb"data: ?" + payload + rb"\n\n"


class LineDecoder:
    """``feed(chunk, t)`` → the events completed by that chunk. Use: ``for ev in dec.feed(data, t): ...``."""

    def __init__(self, max_line_bytes: int = DEFAULT_MAX_LINE) -> None:
        self.max_line = max_line_bytes
        self._held: list[bytes] = []  # the unfinished line's pieces, joined only once a line end arrives
        self._held_len = 0
        self._data: list[bytes] = []
        self._event = b""
        self._skip_lf = False  # the last chunk ended with CR: a leading LF is the rest of that CRLF
        self.idle = True
        """Nothing held over from the last chunk: the next chunk starts at an event boundary."""

    def feed(self, chunk: bytes, t: float) -> list[Event]:
        """The events ``chunk`` (arrived at ``t``) completed; raises ``OversizedLine`` past ``max_line_bytes``."""
        if self._skip_lf and chunk[:1] == b"\n":
            chunk = chunk[1:]
        self._skip_lf = False
        held = self._held
        if held:
            # Inside a long line that comes in small receives: keep the piece and scan only it. Joining (and
            # scanning) the whole line on every receive cost O(n^2): 1.3 s for a 160 kB line in 1-byte receives.
            if b"\n" not in chunk and b"\r" not in chunk:
                held.append(chunk)
                self._held_len += len(chunk)
                if self._held_len > self.max_line:
                    raise OversizedLine(f"SSE line longer than {self.max_line} bytes")
                return []
            held.append(chunk)
            buf = b"".join(held)
            held.clear()
        else:
            buf = chunk
        out: list[Event] = []
        start = 0
        n = len(buf)
        while start < n:
            lf = buf.find(b"\n", start)
            cr = buf.find(b"\r", start, lf if lf >= 0 else n)
            if cr >= 0:  # CR or CRLF ends this line
                end, nxt = cr, cr + 1
                if nxt < n and buf[nxt] == 10:
                    nxt += 1
                elif nxt == n:
                    self._skip_lf = True
            elif lf >= 0:
                end, nxt = lf, lf + 1
            else:
                break
            self._line(buf[start:end], t, out)
            start = nxt
        if start < n:
            if n - start > self.max_line:
                raise OversizedLine(f"SSE line longer than {self.max_line} bytes")
            held.append(buf[start:])
            self._held_len = n - start
        self.idle = not (held or self._data or self._event or self._skip_lf)
        return out

    def _line(self, line: bytes, t: float, out: list[Event]) -> None:
        if len(line) > self.max_line:
            raise OversizedLine(f"SSE line of {len(line)} bytes, longer than {self.max_line}")
        if not line:  # blank line: dispatch
            if self._data:
                out.append(Event(t, b"\n".join(self._data).decode("utf-8", "replace"),
                                 self._event.decode("utf-8", "replace") or "message"))
                self._data.clear()  # one list for the stream, not one per event
            self._event = b""
            return
        if line[:5] == b"data:":
            self._data.append(line[6:] if line[5:6] == b" " else line[5:])
        elif line[:6] == b"event:":
            self._event = line[6:].strip()
        elif line == b"data":
            self._data.append(b"")
        # comments (":...") and id/retry fields carry nothing we use
