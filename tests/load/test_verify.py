"""``verify:`` end to end: a staircase against a simulator whose greedy answers change above 8 requests in flight
(every 5th of them, from the 5th word on: ``--changed-answers-share 0.2 --changed-answers-above 8``).

Between 8 and 16 users the truth itself depends on the client: an answer changes only when its first token is made
in a batch of 9 or more, and a client slowed by a loaded machine keeps fewer of its users' requests in flight (at 10
users 13% changed in a fresh-clone CI of 2026-12-07, at 12 users 12-15% in three runs of five here, each of them
rightly counted), so the 20% is asked of 16 users, and of 12 only some. It runs alone (``timing``): its 16 users
beside other lanes' runs made one of theirs late (loop lag p99 61 ms, UNRELIABLE)."""

from __future__ import annotations

import pytest

from tests.kit.run import kneecap_run, write_scenario

pytestmark = [pytest.mark.integration, pytest.mark.timing]

SCENARIO = """
    name: verify-test
    endpoint: {api: chat, model: sim-tiny}
    workload: {input_tokens: 100, output_tokens: 20, seed: 7}
    load:
      users: {start: 8, step: 4, max: 16}
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
    assert sorted(seen) == [8, 12, 16], seen  # no knee within 64 slots: every level ran
    for users, v in seen.items():
        assert v and v["verified"] >= 20, (users, v)  # ~30% of 100+ requests, the first step's references apart
        if users <= 8:  # never a batch of more than 8: the answers are the references' (the A/A half of the test)
            assert v["changed"] == 0, (users, v)
            continue
        assert v["first_difference_median"] == 4 and v["examples"], v
        if users >= 16:  # every 5th greedy answer made in a batch of 9 or more: nearly all of them at 16 users
            assert abs(v["changed_share"] - 0.2) <= 0.05, (users, v)
        else:  # 12 users: in batches of 9 or more only while most of them are in flight
            assert 0 < v["changed_share"] <= 0.25, (users, v)
            e = v["examples"][0]
            assert e["at"] == 4 and e["reference"].split()[2] != e["answer"].split()[2], e
    judged = {s["users"]: s["slo_passed"] for s in steps if s["counted"]}
    assert all(judged[u] for u in judged if u <= 8) and not any(judged[u] for u in judged if u > 8), judged
    assert r.code == 3, r.output  # the SLO failed at 12 users
    assert "ANSWERS CHANGED: from 12 users on" in r.output and "By load: 8: 0% of" in r.output, r.output
