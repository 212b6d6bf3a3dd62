"""Cost of drawing request lengths and building prompts: ``python -m benchmarks.workload_sampling``.

Protects: a length sample < 5 µs (it must not show up in a per-request profile); a prompt build of a
few thousand tokens well under a millisecond. Reference in the same run: one ``random.random()``
call. One JSON line per case.
"""

from __future__ import annotations

import json
import random
import subprocess
import time
from collections.abc import Callable

from harness.workload.lengths import Empirical, Gamma, JointEmpirical, LogNormal, Mixture, Normal, QuantileCurve
from harness.workload.prompts import PromptBuilder
from harness.workload.traces import read_columns


def per_call_us(fn: Callable[[], object], n: int) -> float:
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n * 1e6


def main() -> None:
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                         check=False).stdout.strip()
    rng = random.Random(1)
    ref = per_call_us(rng.random, 200_000)
    cols = read_columns("scenarios/traces/azure-code-2023.csv", ["ContextTokens", "GeneratedTokens"])
    cases = {
        "lognormal": LogNormal(900, 0.8).bounded(16, 8000),
        "normal_truncated": Normal(4000, 1000).bounded(1500, 7000),
        "gamma": Gamma.from_mean_std(250, 120),
        "mixture": Mixture([(0.8, LogNormal(20, 0.5)), (0.2, LogNormal(200, 0.5))]),
        "empirical_8819": Empirical(cols["GeneratedTokens"]),
        "quantile_curve": QuantileCurve([(0, 100), (0.5, 1500), (0.9, 4000), (1, 7000)]),
        "joint_8819_jitter": JointEmpirical(list(zip(cols["ContextTokens"], cols["GeneratedTokens"], strict=True)),
                                            0.05),
    }
    for name, dist in cases.items():
        us = per_call_us(lambda d=dist: d.sample(rng), 100_000)
        print(json.dumps({"name": "workload_sampling", "case": name, "us_per_sample": round(us, 3),
                          "ratio_vs_random_random": round(us / ref, 1), "goal_us": 5, "git": rev}))
    builder = PromptBuilder(api="chat", shared_prefix_tokens=500, seed=1)
    for tokens in (100, 1000, 4000):
        us = per_call_us(lambda t=tokens: builder.build(t, rng), 5_000)
        print(json.dumps({"name": "workload_sampling", "case": f"prompt_build_{tokens}_tokens",
                          "us_per_prompt": round(us, 2), "ratio_vs_random_random": round(us / ref, 1), "git": rev}))


if __name__ == "__main__":
    main()
