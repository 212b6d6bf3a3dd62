"""Request deadlines on a fake clock: which limit is next, and when it is due."""

from __future__ import annotations

import pytest

from harness.client.deadline import Deadline

START = 50.0


def deadline(ttft_s: float = 2.0, idle_s: float = 0.5, total_s: float = 10.0) -> Deadline:
    return Deadline(START, ttft_s, idle_s, total_s)


def test_before_the_first_token_the_earliest_of_ttft_idle_and_total():
    d = deadline()
    assert d.next() == (START + 0.5, "idle_timeout")  # nothing has arrived since the start
    d.last = START + 1.8  # bytes (headers, a role chunk) but no content yet
    assert d.next() == (START + 2.0, "ttft_timeout")
    assert d.due(START + 1.99) is None and d.due(START + 2.0) == "ttft_timeout"


def test_after_the_first_token_idle_then_total():
    d = deadline()
    d.first, d.last = True, START + 3.0
    assert d.next() == (START + 3.5, "idle_timeout") and d.due(START + 3.4) is None
    d.last = START + 9.8
    assert d.next() == (START + 10.0, "total_timeout") and d.due(START + 10.0) == "total_timeout"


@pytest.mark.parametrize("ttft_s,idle_s,total_s,kind", [
    (5.0, 5.0, 1.0, "total_timeout"), (0.2, 5.0, 1.0, "ttft_timeout"), (5.0, 0.3, 1.0, "idle_timeout"),
])
def test_with_nothing_received_the_smallest_limit_wins(ttft_s, idle_s, total_s, kind):
    assert deadline(ttft_s, idle_s, total_s).next()[1] == kind
