"""The closed-loop user's wait after each request, on plain records: Retry-After, exponential backoff, the caps."""

from __future__ import annotations

import pytest

from harness.client.backoff import CONNECT_FIRST_S, CONNECT_MAX_S, RETRY_AFTER_MAX_S, Backoff
from harness.metrics.record import RequestRecord


def rec(error: str | None = None, *, status: int | None = None, headers_s: float | None = None,
        retry_after_s: float | None = None) -> RequestRecord:
    return RequestRecord(start=0.0, error=error, status=status, headers_s=headers_s, retry_after_s=retry_after_s)


OK = rec(status=200, headers_s=0.01)
RATE_LIMITED = rec("http_429", status=429, headers_s=0.01, retry_after_s=1.0)


def test_the_documented_numbers():
    assert (CONNECT_FIRST_S, CONNECT_MAX_S, RETRY_AFTER_MAX_S) == (0.05, 2.0, 30.0)


def test_success_and_answers_from_the_server_never_wait():
    b = Backoff()
    for r in (OK, rec("http_5xx", status=503, headers_s=0.01), rec("truncated", status=200, headers_s=0.01),
              rec("reset", status=200, headers_s=0.01), rec("http_429", status=429, headers_s=0.01),
              rec("ttft_timeout", status=200, headers_s=0.01), rec("idle_timeout")):
        assert b.after(r) == 0.0


def test_retry_after_is_honoured_and_capped():
    b = Backoff()
    assert b.after(RATE_LIMITED) == 1.0
    assert b.after(rec("http_429", status=429, headers_s=0.01, retry_after_s=3600.0)) == RETRY_AFTER_MAX_S
    assert b.after(rec("http_429", status=429, headers_s=0.01, retry_after_s=0.0)) == 0.0


def test_retry_after_ignored_when_asked():
    assert Backoff(honor_retry_after=False).after(RATE_LIMITED) == 0.0


@pytest.mark.parametrize("failure", [rec("connect_error"), rec("connect_timeout"), rec("tls_error"), rec("reset"),
                                     rec("client_error"), rec("client_error", status=200, headers_s=0.01)])
def test_connection_failures_double_from_50_ms_to_2_s_and_reset_on_an_answer(failure):
    b = Backoff()
    waits = [b.after(failure) for _ in range(9)]
    assert waits == [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0, 2.0]
    assert b.after(RATE_LIMITED) == 1.0  # the server answered: the next failure starts small again
    assert b.after(failure) == 0.05
    b.after(failure)
    assert b.after(OK) == 0.0 and b.after(failure) == 0.05


def test_a_dead_endpoint_costs_few_requests():
    """What the cap buys: against a closed port, ~2 attempts per user in the first second, then one per 2 s."""
    b, t, attempts = Backoff(), 0.0, 0
    while t < 60:
        attempts += 1
        t += b.after(rec("connect_error"))
    assert attempts <= 6 + 60 / CONNECT_MAX_S + 1
