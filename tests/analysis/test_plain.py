"""The knee in one sentence (``analysis.plain``), from a summary as the master writes it."""

from __future__ import annotations

import pytest

from harness.analysis.plain import figure, knee_sentence, knee_words, rounded
from harness.report.validate import as_summary
from tests.kit.summaries import written


def summary(**knee) -> object:
    s = written()  # the knee at 8 users; counted steps at 4 and 8 (12 lost a worker, 16 cut short)
    return as_summary({**s, "knee": {**s["knee"], **knee}})


def test_the_sentence_says_how_much_latency_rose_and_throughput_did_not():
    assert knee_sentence(summary()) == (
        "Past 8 users, TTFT p99 rose 11.2× (80.0 → 900 ms) while output throughput grew 1% (100 → 101 tokens/s): "
        "past it, more load adds latency, not throughput.")  # no counted step past it: no "at N users"


def test_throughput_that_still_grew_is_said_so():
    said = knee_sentence(summary(throughput_after=118.0))
    assert "grew 18% (100 → 118 tokens/s): past it, more load adds latency faster than throughput." in said
    assert "fell 10%" in knee_sentence(summary(throughput_after=90.0))


def test_the_next_counted_load_is_named_with_how_much_more_it_was():
    s = written()
    for st in s["steps"]:
        if st["index"] == 2:  # step 2 (12 users) counts now
            st.update(workers_lost=[], fleet_changed=False, counted=True, why=None)
    said = knee_sentence(as_summary(s))
    assert "(80.0 → 900 ms at 12 users, +50% load)" in said, said


@pytest.mark.parametrize("knee", [{"found": False}, {"p99_before_ms": None}, {"p99_before_ms": 0.0}])
def test_no_sentence_without_a_knee_or_its_figures(knee):
    assert knee_sentence(summary(**knee)) == ""


def test_figures_at_a_readers_precision():
    assert [figure(x) for x in (4806.659, 1051.22, 36.54, 8.944, -0.211)] == ["4,807", "1,051", "36.5", "8.94", "-0.21"]


def test_the_words_add_the_why_when_the_run_had_one():
    said = knee_words(summary(why="server: waiting requests 0 -> 37"))
    assert said.endswith("not throughput. Why: server: waiting requests 0 -> 37.") and said.startswith("Past 8 users")
    assert knee_words(summary()) == knee_sentence(summary())  # no why: the sentence alone
    assert knee_words(summary(found=False, why="x")) == ""


def test_rounded_is_figure_as_a_number():
    assert [rounded(x) for x in (4806.659, 36.54, 8.944, 0.0049, 7)] == [4807, 36.5, 8.94, 0.0, 7]
