"""One request's receives (``client/inflight.py``) on scripted bytes and kernel stamps: the time each output chunk
gets, and the record's count of chunks that shared a receive's time. The socket is a script (the I/O seam): what
the kernel returns for each receive, the bytes and the SCM_TIMESTAMPNS stamp of the newest segment in them."""

from __future__ import annotations

import struct
import time

import pytest

from harness.client.deadline import Deadline
from harness.client.inflight import SO_TIMESTAMPNS, InFlight
from harness.client.reader import ResponseReader

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: 100000\r\n\r\n"


def event(text: str) -> bytes:
    return b'data: {"id":"x","choices":[{"index":0,"delta":{"content":"%b"},"finish_reason":null}]}\n\n' % text.encode()


class ScriptedSocket:
    """Each ``recvmsg`` returns the next (bytes, kernel time on the wall clock) of the script."""

    def __init__(self, receives: list[tuple[bytes, float]]) -> None:
        self.receives = receives

    def fileno(self) -> int:
        return -1

    def recvmsg(self, size: int, ancsize: int):
        data, wall = self.receives.pop(0)
        sec = int(wall)
        stamp = struct.pack("qq", sec, round((wall - sec) * 1e9))
        return data, [(1, SO_TIMESTAMPNS, stamp)], 0, None

    def recv(self, size: int) -> bytes:
        return self.receives.pop(0)[0]


def read(receives: list[tuple[bytes, float]], *, kernel_ts: bool = True, behind: float | None = None,
         passes: list[float] | None = None) -> tuple[list[float], int]:
    """Pump the script through (``behind``: as the mux says when the bytes waited while it was away, since then;
    ``passes``: when the mux's pass that reads each receive began; both on the wall clock); the output chunks' times
    (on the wall clock) and the record's shared stamps."""
    start = time.perf_counter()
    real_minus_perf = time.time() - start
    reader = ResponseReader(start)
    st = InFlight(ScriptedSocket(receives), None, kernel_ts, reader, Deadline(start, 60, 60, 60), False,
                  real_minus_perf)
    for i in range(len(receives)):
        st.pump(None if behind is None else behind - real_minus_perf,
                None if passes is None else passes[i] - real_minus_perf)
    return [start + t + real_minus_perf for t in reader.chunk_times], reader.record.shared_stamps


def test_one_chunk_a_receive_each_keeps_its_own_kernel_time():
    now = time.time()
    times, shared = read([(HEAD, now - 0.05), (event("a"), now - 0.04), (event("b"), now - 0.03)])
    assert times == pytest.approx([now - 0.04, now - 0.03], abs=2e-6)
    assert shared == 0


def test_chunks_of_a_late_receive_share_its_time_and_the_record_counts_all_but_the_last():
    now = time.time()
    times, shared = read([(HEAD + event("a"), now - 0.05), (event("b") + event("c") + event("d"), now - 0.01),
                          (event("e"), now - 0.005)])
    assert times == pytest.approx([now - 0.05, now - 0.01, now - 0.01, now - 0.01, now - 0.005], abs=2e-6)
    assert shared == 2  # read 10 ms after d arrived: b and c may have arrived long before it, their times late


def test_chunks_of_a_receive_on_time_arrived_together_and_are_not_counted():
    """A server that writes several chunks at once: read right away, they share a time because they shared it."""
    now = time.time()
    times, shared = read([(HEAD + event("a") + event("b"), now)])
    assert len(times) == 2 and times[0] == times[1] and shared == 0
    _, shared = read([(HEAD + event("a") + event("b"), now)], behind=now - 0.005)  # unless the reader was away
    assert shared == 1
    _, shared = read([(HEAD + event("a") + event("b"), now)], behind=now - 0.0005)  # and left before they could come
    assert shared == 0


def test_a_chunk_completed_across_two_receives_is_one_chunk_not_shared():
    now = time.time()
    a = event("a")
    times, shared = read([(HEAD + a[:30], now - 0.02), (a[30:] + event("b")[:10], now - 0.01)])
    assert times == pytest.approx([now - 0.01], abs=2e-6) and shared == 0


def test_without_kernel_stamps_the_time_is_the_read_and_a_late_one_is_counted():
    before = time.time()
    times, shared = read([(HEAD, 0.0), (event("a") + event("b"), 0.0)], kernel_ts=False, behind=before - 0.002)
    assert len(times) == 2 and times[0] == times[1] and times[0] >= before - 1e-3
    assert shared == 1


def test_in_a_pass_a_receive_read_late_is_dated_by_when_its_bytes_came_not_when_it_was_read():
    """The mux read other streams first (a pass of 10 ms): bytes that came as the pass began woke it and came
    together, so their shared time is theirs; bytes that came 5 ms into the pass may have come in pieces meanwhile."""
    now = time.time()
    script = [(HEAD + event("a") + event("b"), now - 0.0102)]
    _, shared = read(script, passes=[now - 0.0105])
    assert shared == 0  # read 10 ms after it came (the old rule counted it), but it woke the pass
    _, shared = read([(HEAD + event("a") + event("b"), now - 0.005)], passes=[now - 0.0105])
    assert shared == 1
    _, shared = read([(HEAD + event("a") + event("b"), now - 0.0102)], passes=[now - 0.0105], behind=now - 0.02)
    assert shared == 1  # it was in the socket when the reader came back from elsewhere: it may have waited
