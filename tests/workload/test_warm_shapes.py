"""The shape warm-up's requests (``RequestSampler.shapes``): the ends of every prompt-length bucket the workload
draws with the output lengths drawn with them, the same on every worker, and nothing for prompts that keep their own
lengths."""

from __future__ import annotations

from harness.workload.lengths import Fixed, Uniform
from harness.workload.sampler import RequestSampler, length_bucket


def _sampler(input_tokens, worker: int = -1, max_context: int | None = None) -> RequestSampler:
    return RequestSampler(input_tokens=input_tokens, output_tokens=Fixed(64), joint=None, api="chat", seed=7,
                          worker=worker, max_context=max_context)


def test_buckets_are_powers_of_two():
    assert [length_bucket(n) for n in (1, 2, 3, 4, 5, 8, 9, 16, 17, 1024, 1025)] == [0, 1, 2, 2, 3, 3, 4, 4, 5, 10, 11]


def test_each_bucket_drawn_sends_its_shortest_and_longest_prompt():
    shapes = _sampler(Uniform(100, 1000)).shapes()
    targets = [p.prompt.target_tokens for p in shapes]
    # 100-128, 129-256, 257-512, 513-1000: each bucket's ends among 2000 draws of the uniform
    by_bucket: dict[int, list[int]] = {}
    for t in targets:
        by_bucket.setdefault(length_bucket(t), []).append(t)
    assert sorted(by_bucket) == [7, 8, 9, 10], targets
    assert by_bucket[8][0] <= 131 and by_bucket[8][-1] >= 253 and by_bucket[10][-1] >= 995, by_bucket
    assert targets == sorted(targets) and all(p.max_tokens == 64 for p in shapes)
    assert [p.prompt.target_tokens for p in _sampler(Uniform(100, 1000)).shapes()] == targets  # every worker alike
    assert [p.prompt.target_tokens for p in _sampler(Fixed(300)).shapes()] == [300]


def test_a_context_limit_caps_the_prompts_and_a_prompt_file_sends_none():
    assert max(p.prompt.target_tokens for p in _sampler(Uniform(100, 5000), max_context=2048).shapes()) == 2048 - 64
    no_lengths = _sampler(Fixed(10))
    no_lengths._input = None  # a prompt file's own lengths: lengths() draws no input
    assert no_lengths.shapes(draws=10) == []
