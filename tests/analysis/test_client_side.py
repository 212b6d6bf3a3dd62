"""The client's own side of a step: connections paid, worker CPU per token, GC pauses (analysis/steps.py). Pure."""

from __future__ import annotations

import msgpack

from harness.analysis.steps import StepInfo, connection_warning, step_result
from harness.metrics.aggregate import Bucket
from harness.metrics.record import RequestRecord


def _bucket(n: int, new: int, fail: int = 0) -> Bucket:
    b = Bucket()
    for i in range(n):
        b.add(RequestRecord(start=0.0, ttft_s=0.05, e2e_s=0.5, chunk_times=[0.05, 0.5], output_tokens=10,
                            new_connection=i < new))
    for _ in range(fail):  # a failed request that paid a connect counts too: the user waited for it
        b.add(RequestRecord(start=0.0, error="reset", new_connection=True))
    return b


def test_new_connections_are_counted_merged_and_shared():
    a, b = _bucket(10, 2), _bucket(10, 10, fail=5)
    assert (a.new_connections, b.new_connections) == (2, 15)
    a.merge(b)
    r = step_result(StepInfo(0, 4, 0.0), a, None, now=10.0)
    assert (r.requests, r.new_connections, r.new_connection_share) == (25, 17, 0.68)
    assert r.to_json()["new_connection_share"] == 0.68 and r.to_json()["new_connections"] == 17
    assert step_result(StepInfo(1, 4, 0.0), Bucket(), None, now=10.0).new_connection_share is None


def test_the_count_rides_the_wire_only_when_there_is_one():
    kept_alive = _bucket(5, 0)
    assert "conn" not in kept_alive.to_wire()  # older payloads keep their bytes
    closing = _bucket(5, 5)
    wire = msgpack.unpackb(msgpack.packb(closing.to_wire()), strict_map_key=False)
    assert wire["conn"] == 5 and Bucket.from_wire(wire).new_connections == 5
    assert Bucket.from_wire(kept_alive.to_wire()).new_connections == 0


def test_the_warning_only_when_most_requests_paid_a_connect():
    kept = [step_result(StepInfo(i, 4, 0.0), _bucket(100, 4), None, now=10.0) for i in range(3)]
    assert connection_warning(kept) is None
    closing = [step_result(StepInfo(i, 4, 0.0), _bucket(100, 97), None, now=10.0) for i in range(3)]
    text = connection_warning(closing)
    assert text.startswith("97% of requests paid a new connection") and "nothing to fix on the client" in text
    assert connection_warning([]) is None


def test_step_point_and_report_column():
    # imported here: at collection time influxdb_client would import ssl before Locust's tests monkey-patch it
    from harness.report.html import report_html
    from harness.sinks.points import step_points

    r = step_result(StepInfo(2, 8, 0.0), _bucket(10, 10), None, now=10.0)
    (line,) = [p for p in step_points(r, tags={"run": "x"}, ts_ms=1) if p.startswith("kneecap_step_client")]
    assert "new_connection_share=1" in line and "new_connections=10i" in line and "step=2" in line
    summary = {"mode": "closed", "steps": [r.to_json()], "knee": {"found": False, "reason": "-"}}
    page = report_html(summary)
    assert "<th>new conn</th>" in page and "<td>100.0%</td>" in page
