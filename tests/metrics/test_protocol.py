"""The worker <-> master protocol (harness/metrics/protocol.py): golden bytes, round trips, clear refusals."""

from __future__ import annotations

import dataclasses
import struct

import msgpack
import pytest

from harness.metrics.aggregate import Bucket, CacheCounts
from harness.metrics.protocol import PROTOCOL_VERSION, GeneratorSample, ProtocolError, Report, StepMessage
from harness.metrics.record import RequestRecord
from harness.metrics.row_columns import RowColumns
from harness.metrics.row_sample import RowSample
from harness.metrics.rows import ROW_FIELDS
from harness.metrics.sessions import SessionStats
from harness.metrics.sketch import Sketch

# msgpack.packb(Report.to_wire()) of ``_report()``: the bytes kneecap 0.1 (first landing) sent for the same data.
# Never edit: a change here means master and workers of two versions no longer understand each other, so
# bump PROTOCOL_VERSION and keep this payload readable or refused with a clear message.
GOLDEN_V1_MSGPACK = bytes.fromhex(
    "85a17601a47374657002a76275636b657473919302a76d6561737572658ca2736b86a4747466748aa17601a5616c706861cb"
    "3f847ae147ae147ba16e01a373756dcb3fa999999999999aa36d696ecb3fa999999999999aa36d6178cb3fa999999999999a"
    "a47a65726f00a86f766572666c6f7700a46b65797391d1ff6ba6636f756e74739101a36532658aa17601a5616c706861cb3f"
    "847ae147ae147ba16e01a373756dcb3fd0000000000000a36d696ecb3fd0000000000000a36d6178cb3fd0000000000000a4"
    "7a65726f00a86f766572666c6f7700a46b65797391d0bba6636f756e74739101a474706f748aa17601a5616c706861cb3f84"
    "7ae147ae147ba16e01a373756dcb3fb999999999999aa36d696ecb3fb999999999999aa36d6178cb3fb999999999999aa47a"
    "65726f00a86f766572666c6f7700a46b65797391d08da6636f756e74739101ac746f6b656e735f7065725f738aa17601a561"
    "6c706861cb3f847ae147ae147ba16e01a373756dcb4024000000000000a36d696ecb4024000000000000a36d6178cb402400"
    "0000000000a47a65726f00a86f766572666c6f7700a46b6579739174a6636f756e74739101a369746c8aa17601a5616c7068"
    "61cb3f847ae147ae147ba16e02a373756dcb3fc999999999999aa36d696ecb3fb9999999999999a36d6178cb3fb999999999"
    "999aa47a65726f00a86f766572666c6f7700a46b65797391d08da6636f756e74739102a969746c5f746f6b656e8aa17601a5"
    "616c706861cb3f847ae147ae147ba16e02a373756dcb3fc999999999999aa36d696ecb3fb9999999999999a36d6178cb3fb9"
    "99999999999aa47a65726f00a86f766572666c6f7700a46b65797391d08da6636f756e74739102a16e02a26f6b01a4676f6f"
    "6401a46661696c81a8687474705f35787801a36f757403a2696e64a7636f756e74656400a470657272cb3fb745d1745d1746"
    "a2706e01a361727203a464726f7001a367656e82a36c61678aa17601a5616c706861cb3f847ae147ae147ba16e01a373756d"
    "cb3f60624dd2f1a9fca36d696ecb3f60624dd2f1a9fca36d6178cb3f60624dd2f1a9fca47a65726f00a86f766572666c6f77"
    "00a46b65797391d1fecaa6636f756e74739101a3637075cb4044c00000000000a77265636f7264739181a26f6bc3"
)

# msgpack.packb(Report.to_wire()) of ``_report()`` at protocol version 2 (sketches as packed bytes, request rows by
# column). Never edit either: both are read.
GOLDEN_V2_MSGPACK = bytes.fromhex(
    "85a17602a47374657002a76275636b657473919302a76d6561737572658ca2736b86a474746674c44802000000010000007b"
    "14ae47e17a843f01000000000000009a9999999999a93f9a9999999999a93f9a9999999999a93f0000000000000000000000"
    "00000000006bffffff01000000a3653265c44802000000010000007b14ae47e17a843f0100000000000000000000000000d0"
    "3f000000000000d03f000000000000d03f00000000000000000000000000000000bbffffff01000000a474706f74c4480200"
    "0000010000007b14ae47e17a843f01000000000000009a9999999999b93f9a9999999999b93f9a9999999999b93f00000000"
    "0000000000000000000000008dffffff01000000ac746f6b656e735f7065725f73c44802000000010000007b14ae47e17a84"
    "3f01000000000000000000000000002440000000000000244000000000000024400000000000000000000000000000000074"
    "00000001000000a369746cc44802000000010000007b14ae47e17a843f02000000000000009a9999999999c93f9999999999"
    "99b93f9a9999999999b93f000000000000000000000000000000008dffffff02000000a969746c5f746f6b656ec448020000"
    "00010000007b14ae47e17a843f02000000000000009a9999999999c93f999999999999b93f9a9999999999b93f0000000000"
    "00000000000000000000008dffffff02000000a16e02a26f6b01a4676f6f6401a46661696c81a8687474705f35787801a36f"
    "757403a2696e64a7636f756e74656400a470657272cb3fb745d1745d1746a2706e01a361727203a464726f7001a367656e82"
    "a36c6167c44802000000010000007b14ae47e17a843f0100000000000000fca9f1d24d62603ffca9f1d24d62603ffca9f1d2"
    "4d62603f00000000000000000000000000000000cafeffff01000000a3637075cb4044c00000000000a77265636f72647391"
    "81a26f6bc3"
)


def _report() -> Report:
    b = Bucket()
    b.add(RequestRecord(start=0.0, ttft_s=0.05, e2e_s=0.25, chunk_times=[0.05, 0.15, 0.25], output_tokens=3,
                        prompt_tokens=100, prompt_tokens_target=110))
    b.add(RequestRecord(start=0.0, error="http_5xx"))
    b.arrivals, b.dropped = 3, 1
    lag = Sketch()
    lag.add(0.002)
    return Report(step=2, buckets=[(2, "measure", b)], gen=GeneratorSample(lag, 41.5), records=[{"ok": True}])


def test_golden_payload_bytes():
    assert PROTOCOL_VERSION == 2 and GOLDEN_V2_MSGPACK != GOLDEN_V1_MSGPACK
    assert msgpack.packb(_report().to_wire()) == GOLDEN_V2_MSGPACK


@pytest.mark.parametrize("golden", [GOLDEN_V1_MSGPACK, GOLDEN_V2_MSGPACK], ids=["v1", "v2"])
def test_golden_payload_decodes(golden):
    r = Report.from_wire(msgpack.unpackb(golden, strict_map_key=False))
    assert r.step == 2 and r.records == [{"ok": True}] and r.gen is not None and r.gen.cpu == 41.5
    (step, phase, b), = r.buckets
    assert (step, phase) == (2, "measure")
    assert (b.requests, b.ok, b.good, b.failures, b.output_tokens, b.input_tokens) == (2, 1, 1, {"http_5xx": 1}, 3, 100)
    assert (b.arrivals, b.dropped, b.prompt_error_n) == (3, 1, 1)
    assert b.sketches["ttft"].quantile(0.5) == pytest.approx(0.05, rel=0.01)
    assert r.gen.lag.max == pytest.approx(0.002)


def test_every_bucket_field_survives_the_wire_by_name():
    """Each counter gets a distinct value: a field swapped or dropped on the wire cannot go unnoticed."""
    fields = [f.name for f in dataclasses.fields(Bucket)
              if f.name not in ("sketches", "failures", "failure_samples", "cache", "sessions", "extra", "rows",
                                "cancelled")]
    sessions = SessionStats({"1": [31, 32, 33, 34, 35], "2-4": [41, 42, 43, 44, 45]}, 0.5, 51, 52, 53, 54, 55, 56, 57)
    b = Bucket(**{name: i + 2 for i, name in enumerate(fields)}, failures={"reset": 99},
               failure_samples={"reset": "connection reset by peer after 3 chunks"},
               cache=CacheCounts(21, 22, 23, 24),
               sessions=sessions, extra={"inputs": 61, "exact_chunks": 62}, cancelled={"cancel": 71, "patience": 72},
               rows=_sample([[1, None, 3, 4, 5, 6, None, 1, 2, 70, None, 0, 1, None, None, None, None, None],
                                   [9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 2, 1, 0, 5, 4, [120, 200], 3, 1]]))
    b.prompt_error_sum = 0.125
    back = Bucket.from_wire(msgpack.unpackb(msgpack.packb(b.to_wire()), strict_map_key=False))
    assert back == b and back.rows.joined()[1][ROW_FIELDS.index("gaps")] == (120, 200)
    wire = b.to_wire()
    wire["fail"]["reset"] = 0
    assert b.failures == {"reset": 99}  # the payload is a copy


def _sample(rows: list[list]) -> RowSample:
    out = RowSample(100)
    out.add(RowColumns.of(rows))
    return out


def test_report_without_health_or_records():
    r = Report(step=0)
    assert r.to_wire() == {"v": PROTOCOL_VERSION, "step": 0, "buckets": []}
    assert Report.from_wire(r.to_wire()) == r


def _rc(**values: object) -> list:
    """One request row by column on the wire (version 2: int32 numbers, None as int32's least; the gaps), fields
    replaced."""
    row = list(range(len(ROW_FIELDS)))
    row[ROW_FIELDS.index("gaps")] = None
    for name, v in values.items():
        row[ROW_FIELDS.index(name)] = v
    gaps = row.pop(ROW_FIELDS.index("gaps"))
    return ["i", struct.pack(f"<{len(row)}i", *(-(2 ** 31) if v is None else v for v in row)), [gaps]]


@pytest.mark.parametrize("payload, words", [
    ({"v": 3, "step": 0, "buckets": []}, "version 3, expected 2"),
    ({"v": [2], "step": 0, "buckets": []}, "version [2], expected 2"),
    ({"step": 0, "buckets": []}, "version None"),
    ("garbage", "version str"),
    ({"v": 1, "step": 0}, "KeyError"),
    ({"v": 1, "step": 0, "buckets": [[0, "measure", {"sk": {}}]]}, "cannot be read"),
    ({"v": 1, "step": 0, "buckets": [[0, "measure", {**Bucket().to_wire(), "sk": {"ttft": {"v": 9}}}]]},
     "SketchMismatch"),
    ({"v": 2, "step": 0, "buckets": [[0, "measure", {**Bucket().to_wire(), "rc": [[1]] * 19}]]},
     "[typecode 'i' or 'q', numbers as bytes, gaps]"),
    ({"v": 2, "step": 0, "buckets": [[0, "measure", {**Bucket().to_wire(), "rc": ["d", b"\0" * 144, [None]]}]]},
     "[typecode 'i' or 'q', numbers as bytes, gaps]"),  # float64 numbers: never shipped
    ({"v": 2, "step": 0, "buckets": [[0, "measure", {**Bucket().to_wire(), "rc": ["i", b"\0" * 8, [None]]}]]},
     "8 bytes of numbers for 1 rows, expected 72"),
    ({"v": 2, "step": 0, "buckets": [[0, "measure", {**Bucket().to_wire(), "rc": ["q", b"\0" * 72, [None]]}]]},
     "72 bytes of numbers for 1 rows, expected 144"),
    ({"v": 2, "step": 0, "buckets": [[0, "measure", {**Bucket().to_wire(), "rc": _rc(flags=None)}]]},
     "flags must be integers, got None"),
    ({"v": 2, "step": 0, "buckets": [[0, "measure", {**Bucket().to_wire(), "rc": _rc(gaps="ab")}]]},
     "gaps must be a list or None"),
    ({"v": 2, "step": 0, "buckets": [[0, "measure", {**Bucket().to_wire(), "rc": _rc(worker=None)}]]},
     "worker must be integers"),  # the analysis reads them as an integer array
    ({"v": 2, "step": 0, "buckets": [[0, "measure", {**Bucket().to_wire(), "rc": _rc(t_ms=None)}]]},
     "t_ms must be integers"),
({"v": 1, "step": 0, "buckets": [[0, "measure", {**Bucket().to_wire(), "rows": [[1] * 11 + ["w0"] + [1] * 7]}]]},
     "integer flags, send time and worker"),
    ({"v": 2, "step": 0, "buckets": [[0, "measure", {**Bucket().to_wire(), "n": "x", "out": -1}]]},
     "'n' must be an int >= 0, got 'x'; 'out' must be an int >= 0, got -1"),  # raised in the merge, halfway
    ({"v": 2, "step": 0, "buckets": [[0, "measure", {**Bucket().to_wire(), "fail": {"http_500": 1.5}}]]},
     "'fail'['http_500'] must be an int >= 0, got 1.5"),
    ({"v": 2, "step": 0, "buckets": [[0, "measure", {**Bucket().to_wire(), "fail": [1], "perr": float("nan")}]]},
     "'fail' must be a dict of failure class to count, got [1]; 'perr' must be a finite number >= 0, got nan"),
])
def test_unreadable_payloads_are_refused_by_name(payload, words):
    with pytest.raises(ProtocolError, match="worker w7") as err:
        Report.from_wire(payload, "w7")
    assert words in str(err.value)


@pytest.mark.parametrize("msg, wire", [
    (StepMessage(index=3), {"index": 3}),
    (StepMessage(index=3, rate=12.0, stride=2), {"index": 3, "rate": 12.0, "stride": 2}),
    (StepMessage(index=4, end=True), {"index": 4, "end": True}),
])
def test_step_messages(msg, wire):
    assert msg.to_wire() == wire
    assert StepMessage.from_wire(msgpack.unpackb(msgpack.packb(wire))) == msg


def test_worker_cpu_and_gc_pauses_ride_the_generator_sample():
    """CPU by step and GC pauses are optional keys: a payload without them keeps the golden bytes (above) and
    decodes to "not measured"; with them they survive msgpack."""
    lag = Sketch()
    lag.add(0.001)
    gen = GeneratorSample(lag, 55.0, cpu_s={3: 1.25, 4: 0.5}, gc=(0.004, 0.011, 12), wait_s={3: 0.75, 4: 2.5})
    wire = msgpack.unpackb(msgpack.packb(Report(step=4, gen=gen).to_wire()), strict_map_key=False)
    assert wire["gen"]["cpu_s"] == [[3, 1.25], [4, 0.5]] and wire["gen"]["gc"] == [0.004, 0.011, 12]
    assert wire["gen"]["wait_s"] == [[3, 0.75], [4, 2.5]]
    back = Report.from_wire(wire).gen
    assert back.cpu_s == {3: 1.25, 4: 0.5} and back.gc == (0.004, 0.011, 12) and back.cpu == 55.0
    assert back.wait_s == {3: 0.75, 4: 2.5}
    old = Report.from_wire(msgpack.unpackb(GOLDEN_V1_MSGPACK, strict_map_key=False)).gen
    assert old.cpu_s == {} and old.gc is None and old.wait_s == {}
    wire["gen"]["gc"] = [0.004]
    with pytest.raises(ProtocolError, match=r"gen\.gc has 3 numbers"):
        Report.from_wire(wire, "w1")

