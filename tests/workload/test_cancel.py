"""Users who hang up (``workload/cancel.py``): the blocks, their refusals by key path, the draw. Pure."""

from __future__ import annotations

import random

import pytest

from harness.scenario import ScenarioError
from harness.workload.cancel import Cancel
from harness.workload.lengths import Duration, Fixed
from harness.workload.sampler import RequestSampler
from tests.kit.scenarios import SMALL, parse_with


def test_cancel_and_patience_parse_with_a_duration_distribution():
    w = parse_with("{cancel: {share: 0.1, after_s: {dist: uniform, min: 0.5, max: 3}}, patience: {ttft_s: 5}}").workload
    assert w.cancel.share == 0.1 and w.patience.ttft_s == 5.0
    rng = random.Random(1)
    assert all(0.5 <= w.cancel.after_s.sample(rng) <= 3 for _ in range(200))
    assert parse_with("{cancel: {share: 1, after_s: 0.2}}").workload.cancel.after_s.sample(rng) == 0.2


@pytest.mark.parametrize("extra, problem", [
    ("{cancel: {share: 0, after_s: 1}}", "workload.cancel.share: must be > 0, got 0"),
    ("{cancel: {share: 1.5, after_s: 1}}", "workload.cancel.share: must be <= 1, got 1.5"),
    ("{cancel: {share: '10%', after_s: 1}}", "workload.cancel.share: expected a number, got a string '10%'"),
    ("{cancel: {share: 0.1}}", "workload.cancel: missing required key 'after_s'"),
    ("{cancel: {after_s: 1}}", "workload.cancel: missing required key 'share'"),
    ("{cancel: {share: 0.1, after_s: -1}}", "workload.cancel.after_s.value: must be >= 0, got -1"),
    ("{cancel: {share: 0.1, after_s: soon}}", "workload.cancel.after_s: expected seconds (a number) or a distribution"),
    ("{cancel: {share: 0.1, after_s: {dist: zipf}}}", "workload.cancel.after_s.dist: must be one of fixed, uniform"),
    ("{cancel: {share: 0.1, after: 1}}", "workload.cancel: unknown key 'after'; did you mean 'after_s'?"),
    ("{cancel: 0.1}", "workload.cancel: expected a mapping, got a number"),
    ("{patience: {ttft_s: 0}}", "workload.patience.ttft_s: must be > 0, got 0"),
    ("{patience: {ttft_s: -2}}", "workload.patience.ttft_s: must be > 0, got -2"),
    ("{patience: {}}", "workload.patience: missing required key 'ttft_s'"),
    ("{patience: {ttfts: 3}}", "workload.patience: unknown key 'ttfts'; did you mean 'ttft_s'?"),
    ("{patience: 5}", "workload.patience: expected a mapping, got an integer"),
])
def test_a_malformed_block_names_the_key(extra, problem):
    with pytest.raises(ScenarioError) as err:
        parse_with(extra)
    assert any(p.startswith(problem) for p in err.value.problems), err.value.problems


def test_every_problem_at_once_in_a_class_by_its_name():
    text = SMALL.replace("  input_tokens: 100\n  output_tokens: 50\n", """  mix:
    - {name: chat, weight: 1, input_tokens: 10, output_tokens: 5, cancel: {share: 2, after_s: 1}}
    - {name: rag, weight: 1, input_tokens: 10, output_tokens: 5, patience: {ttft_s: 0}}
""")
    with pytest.raises(ScenarioError) as err:
        parse_with(text=text)
    assert err.value.problems == ["workload.mix.chat.cancel.share: must be <= 1, got 2",
                                  "workload.mix.rag.patience.ttft_s: must be > 0, got 0"]


def test_a_class_without_its_own_hangups_has_the_workloads():
    text = SMALL.replace("  input_tokens: 100\n  output_tokens: 50\n", """  cancel: {share: 0.2, after_s: 1}
  patience: {ttft_s: 4}
  mix:
    - {name: chat, weight: 1, input_tokens: 10, output_tokens: 5, patience: {ttft_s: 2}}
    - {name: rag, weight: 1, input_tokens: 10, output_tokens: 5}
""")
    chat, rag = parse_with(text=text).workload.mix
    assert (chat.workload.patience.ttft_s, rag.workload.patience.ttft_s) == (2.0, 4.0)
    assert chat.workload.cancel.share == rag.workload.cancel.share == 0.2


def test_refused_with_sessions_and_patience_without_streaming():
    text = SMALL.replace("  input_tokens: 100\n  output_tokens: 50\n", """  cancel: {share: 0.5, after_s: 1}
  sessions: {turns: 2, first_input_tokens: 10, turn_input_tokens: 5, output_tokens: 5}
""")
    with pytest.raises(ScenarioError) as err:
        parse_with(text=text)
    assert any(p.startswith("workload.cancel: not with sessions yet") for p in err.value.problems), err.value.problems
    with pytest.raises(ScenarioError) as err:
        parse_with("{patience: {ttft_s: 2}}", endpoint="{stream: false}")
    assert err.value.problems == ["workload.patience: needs a streamed answer: without streaming (stream: false, "
                                  "embeddings) no token comes before the whole answer; use cancel"]
    assert parse_with("{cancel: {share: 0.5, after_s: 1}}", endpoint="{stream: false}").workload.cancel.share == 0.5


def test_the_draw_keeps_the_share_and_leaves_the_lengths_alone():
    c = Cancel(0.3, Duration(Fixed(2)))
    rng = random.Random(5)
    draws = [c.draw(rng) for _ in range(10_000)]
    assert {d for d in draws if d is not None} == {2.0}
    assert abs(sum(d is not None for d in draws) / len(draws) - 0.3) < 0.02

    def plans(cancel):
        s = RequestSampler(input_tokens=Fixed(50), output_tokens=Duration(Fixed(7)).dist, joint=None, api="chat",
                           seed=3, worker=1, cancel=cancel)
        return [s.next() for _ in range(50)]

    plain, cancelling = plans(None), plans(Cancel(1.0, Duration(Fixed(0.25))))
    assert [p.prompt.text for p in plain] == [p.prompt.text for p in cancelling]
    assert {p.cancel_after_s for p in plain} == {None} and {p.cancel_after_s for p in cancelling} == {0.25}
