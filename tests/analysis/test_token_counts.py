"""Whether the output tokens kneecap counted are the server's (``analysis/token_counts.py``), on summaries as the
master writes them with the server's own counter set by hand."""

from __future__ import annotations

import copy

import msgspec

from harness.analysis.token_counts import token_gap, token_line
from harness.summary import Summary
from tests.kit.summaries import written


def _step(server_tokens_per_s: float | None, usage_below_chunks: int = 0, index: int = 1):
    raw = copy.deepcopy(written())
    st = raw["steps"][index]
    if server_tokens_per_s is not None:
        st["server"]["generation_tokens_per_s"] = server_tokens_per_s
    if usage_below_chunks:
        st.setdefault("stream", {})["usage_below_chunks"] = usage_below_chunks
    return msgspec.convert(raw, Summary).steps[index]


def test_counts_that_agree_within_the_answers_in_flight_say_nothing():
    client = _step(None).throughput.output_tokens_per_s
    assert token_line(_step(None)) is None  # the server has no counter: nothing to compare
    # 100 successes with 8 running: up to 8% of the answers straddle the window's ends, +10%
    assert token_line(_step(client * 1.17)) is None
    assert abs(token_gap(_step(client * 1.17)) - 0.17 / 1.17) < 1e-9


def test_a_server_counting_more_or_fewer_tokens_than_kneecap_is_named_with_the_likely_reason():
    client = _step(None).throughput.output_tokens_per_s
    more = token_line(_step(client * 1.5))
    assert more and "33% apart (limit 18%)" in more and "another client on this server" in more, more
    fewer = token_line(_step(client * 0.5))
    assert fewer and "50% apart" in fewer and "one replica's behind a balancer" in fewer, fewer


def test_usage_below_the_chunks_streamed_is_named():
    line = token_line(_step(None, usage_below_chunks=12))
    assert line and line.startswith("12 answers' usage counted fewer output tokens than the chunks"), line
