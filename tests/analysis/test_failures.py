"""Failures explained: the top classes with a sample each, the likely fix, and the error-storm stop line."""

from __future__ import annotations

from harness.analysis.failures import hint, top_failures
from harness.metrics.aggregate import Bucket
from harness.metrics.record import RequestRecord


def _bucket(*errors: tuple[str, str], ok: int = 0) -> Bucket:
    b = Bucket()
    for _ in range(ok):
        b.add(RequestRecord(start=0.0, ttft_s=0.1, e2e_s=0.2, chunk_times=[0.1, 0.2], output_tokens=2))
    for error, detail in errors:
        b.add(RequestRecord(start=0.0, error=error, error_detail=detail))
    return b


def test_top_failures_name_the_class_share_and_first_sample():
    refused = ("connect_error", "cannot connect to 127.0.0.1:9: Connection refused")
    b = _bucket(refused, refused, refused, ("http_5xx", "HTTP 503: overloaded"), ("http_5xx", "HTTP 500: x"), ok=5)
    assert top_failures(b) == ("connect_error 30%: cannot connect to 127.0.0.1:9: Connection refused; "
                               "http_5xx 20%: HTTP 503: overloaded")
    assert top_failures(b, 1).startswith("connect_error 30%") and top_failures(_bucket(ok=3)) == ""


def test_samples_survive_merge_and_the_wire():
    a, b = _bucket(("reset", "peer reset")), _bucket(("reset", "other"), ("tls_error", "certificate verify failed"))
    a.merge(Bucket.from_wire(b.to_wire()))
    assert a.failure_samples == {"reset": "peer reset", "tls_error": "certificate verify failed"}


def test_hints_name_the_option_that_fixes_the_usual_cause():
    assert "endpoint.api_key_env" in hint("http_4xx", "HTTP 401: invalid api key")
    assert "endpoint.model" in hint("http_4xx", "HTTP 404: model not found")
    assert "--insecure" in hint("tls_error") and "--host" in hint("connect_error")
    assert hint("http_4xx", "HTTP 418: teapot") is None and hint("truncated") is None
