"""The user's hang-ups in the client: the deadline that says when, the reader that records it cancelled. Pure."""

from __future__ import annotations

import math

import pytest

from harness.client.deadline import Deadline
from tests.kit.wire import ROLE, SSE_HEAD, START, A, B, chunked, read


def test_a_cancel_comes_whatever_arrived_and_patience_only_before_content():
    d = Deadline(0.0, ttft_s=5.0, idle_s=1.0, total_s=10.0, cancel_at=0.7, patience_at=0.4)
    assert d.next() == (0.4, "patience") and d.hangup_at() == 0.4
    d.first = True  # content came: patience no longer applies, the cancel still does
    assert d.next() == (0.7, "cancel") and d.hangup_at() == 0.7
    assert d.due(0.69) is None and d.due(0.7) == "cancel"


def test_a_timeout_before_the_hangup_wins_and_none_means_never():
    d = Deadline(0.0, ttft_s=0.3, idle_s=1.0, total_s=10.0, cancel_at=2.0, patience_at=0.5)
    assert d.next() == (0.3, "ttft_timeout")
    plain = Deadline(0.0, ttft_s=5.0, idle_s=1.0, total_s=10.0)
    assert plain.hangup_at() == math.inf and plain.next() == (1.0, "idle_timeout")


def test_a_cancelled_stream_keeps_its_ttft_and_tokens_so_far_and_is_neither_ok_nor_failed():
    reader = read((0.01, SSE_HEAD + chunked(ROLE)), (0.05, chunked(A)), (0.08, chunked(B)))
    assert not reader.over
    assert reader.cancel("cancel", START + 0.2)
    rec = reader.record
    assert (rec.cancelled, rec.error, rec.ok) == ("cancel", None, False)
    assert (rec.ttft_s, rec.e2e_s) == (pytest.approx(0.05), pytest.approx(0.2))
    assert rec.output_tokens == 2 and rec.output_tokens_counted
    assert rec.tpot_s is None and rec.tokens_per_s is None  # a stream cut short has no speed to speak of
    assert not reader.reusable  # the connection is closed, never reused
    assert reader.cancel("patience", START + 0.3) and rec.cancelled == "cancel"  # once over, nothing changes


def test_patience_before_any_token_leaves_no_ttft():
    reader = read((0.01, SSE_HEAD + chunked(ROLE)))
    reader.cancel("patience", START + 1.5)
    rec = reader.record
    assert (rec.cancelled, rec.ttft_s, rec.output_tokens, rec.e2e_s) == ("patience", None, None, pytest.approx(1.5))
