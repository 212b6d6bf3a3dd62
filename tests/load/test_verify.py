"""``verify:`` end to end: a staircase against a simulator whose greedy answers change above 8 requests in flight
(every 5th of them, from the 5th word on: ``--changed-answers-share 0.2 --changed-answers-above 8``)."""

from __future__ import annotations

import pytest

from tests.kit.run import kneecap_run, write_scenario

pytestmark = pytest.mark.integration

SCENARIO = """
    name: verify-test
    endpoint: {api: chat, model: sim-tiny}
    workload: {input_tokens: 100, output_tokens: 20, seed: 7}
    load:
      users: {start: 2, step: 2, max: 16}
      step: {warmup_s: 0.5, min_duration_s: 2, min_requests: 100, max_duration_s: 6}
    verify: {share: 0.3}
    slo: {answers_changed_rate: "rate<0.001"}
"""


def test_answers_that_change_above_8_in_flight_are_found_there_and_fail_the_run(tmp_path):
    r = kneecap_run(write_scenario(tmp_path, SCENARIO), "--sim-arg=--max-num-seqs=64",
                    "--sim-arg=--changed-answers-share=0.2", "--sim-arg=--changed-answers-above=8",
                    out=tmp_path / "out")
    steps = r.summary["steps"]
    seen = {s["users"]: s.get("verify") for s in steps}
    assert sorted(seen) == list(range(2, 17, 2)), seen  # no knee within 64 slots: every level ran
    for users, v in seen.items():
        assert v and v["verified"] >= 20, (users, v)  # ~30% of 100+ requests, the first step's references apart
        if users <= 8:  # never more than 8 in flight: the answers are the references' (the A/A half of the test)
            assert v["changed"] == 0, (users, v)
        else:  # every 5th greedy answer: 20% of the re-asks, give or take one of them
            assert abs(v["changed_share"] - 0.2) <= 0.05, (users, v)
            assert v["first_difference_median"] == 4 and v["examples"], v
            e = v["examples"][0]
            assert e["at"] == 4 and e["reference"].split()[2] != e["answer"].split()[2], e
    judged = {s["users"]: s["slo_passed"] for s in steps if s["counted"]}
    assert all(judged[u] for u in judged if u <= 8) and not any(judged[u] for u in judged if u > 8), judged
    assert r.code == 3, r.output  # the SLO failed at 10 users
    assert "ANSWERS CHANGED: from 10 users on" in r.output and "By load: 2: 0% of" in r.output, r.output
