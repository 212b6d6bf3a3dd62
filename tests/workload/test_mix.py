"""Weighted mixes of request classes (``workload/mix.py``): the scenario block and the picker. Pure."""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest
import yaml

from harness.scenario import ScenarioError, parse_scenario
from harness.workload.mix import ClassPicker, FixedUsers

MIX = """
name: mixed
endpoint: {api: chat, model: base, extra_body: {temperature: 0}, headers: {X-Team: infra}}
workload:
  seed: 4
  mix:
    - {name: chat, weight: 3, input_tokens: 500, output_tokens: 200}
    - name: rag
      weight: 1
      input_tokens: {dist: lognormal, median: 6000, sigma: 0.3}
      output_tokens: 100
      shared_prefix_tokens: 1000
      endpoint: {model: rag-lora, extra_body: {top_p: 0.9}, headers: {X-Class: rag}, ignore_eos: false}
      slo: {ttft: ["p(95)<3000"], error_rate: "rate<0.01"}
"""


def _parse(text: str):
    return parse_scenario(yaml.safe_load(text))


def test_a_mix_gives_each_class_its_lengths_endpoint_and_slo():
    s = _parse(MIX)
    chat, rag = s.workload.mix
    assert s.workload.class_names == ("chat", "rag") and (chat.weight, rag.weight) == (3.0, 1.0)
    assert chat.workload.input_tokens is not None and chat.workload.joint is None and chat.workload.seed == 4
    assert rag.workload.input_tokens is not None and rag.workload.shared_prefix_tokens == 1000
    assert [t.text for t in rag.slo] == ["ttft: p(95)<3000", "error_rate: rate<0.01"] and chat.slo == ()
    ep = s.class_endpoint(rag)
    assert (ep.model, ep.ignore_eos) == ("rag-lora", False)
    assert ep.extra_body == {"temperature": 0, "top_p": 0.9} and ep.headers == {"X-Team": "infra", "X-Class": "rag"}
    assert s.class_endpoint(chat) == s.endpoint  # no overrides: the scenario's endpoint as it is


@pytest.mark.parametrize("mix, message", [
    ("[]", "workload.mix: expected a list of classes"),
    ("[{name: a, input_tokens: 5, output_tokens: 5}]", "workload.mix.a: missing required key 'weight'"),
    ("[{weight: 1, input_tokens: 5, output_tokens: 5}]", "workload.mix[0]: missing required key 'name'"),
    ("[7]", "workload.mix[0]: expected a mapping, got an integer"),
    ("[{name: a, weight: 0, input_tokens: 5, output_tokens: 5}]", "workload.mix.a.weight: must be > 0, got 0"),
    ("[{name: a, weight: 1, input_tokens: 5}]", "workload.mix.a: missing required key 'output_tokens'"),
    ("[{name: a, weight: 1, input_tokens: 5, output_tokens: 5}, {name: a, weight: 1, input_tokens: 5, "
     "output_tokens: 5}]", "workload.mix.a: a second class named 'a'"),
    ("[{name: a, weight: 1, input_tokens: 5, output_tokens: 5, endpoint: {api: completions}}]",
     "workload.mix.a.endpoint: unknown key 'api'"),
    ("[{name: a, weight: 1, input_tokens: 5, output_tokens: 5, endpoint: {headers: {Host: x}}}]",
     "workload.mix.a.endpoint.headers.Host: kneecap sets this header itself"),
    ("[{name: a, weight: 1, input_tokens: 5, output_tokens: 5, slo: {itl: ['p(99)<50']}}]",
     "workload.mix.a.slo.itl: not judged per class"),
    ("[{name: a, weight: 1, input_tokens: 5, output_tokens: 5, slo: {ttft: 'p(95)<x'}}]", "workload.mix.a.slo.ttft"),
    ("[{name: a, weight: 1, sessions: {turns: 2}}]", "workload.mix.a.sessions: missing required key "
                                                      "'first_input_tokens'"),
    ("[{name: a, weight: 1, sessions: {turns: 2, first_input_tokens: 9, turn_input_tokens: 9, output_tokens: 9}, "
     "input_tokens: 5}]", "workload.mix.a: sessions set their own lengths"),
    ("[{name: a, weight: 1, batch: 2, input_tokens: 5, output_tokens: 5}]", "workload.mix.a.batch: batch within a "
                                                                            "mix class is not supported yet"),
    ("[{name: a, weight: 1, input_tokens: 5, output_tokens: 5, wieght: 2}]",
     "workload.mix.a: unknown key 'wieght'; did you mean 'weight'?"),
    ("[{name: a, input_tokens: 5, output_tokens: 5}]", "workload.mix.a: missing required key 'weight' (a share of "
                                                         "the requests; or users: a fixed number of users)"),
    ("[{name: a, weight: 1, users: 2, input_tokens: 5, output_tokens: 5}]",
     "workload.mix.a: give weight (a share of the requests) or users (a fixed number of users), not both"),
    ("[{name: a, users: 0, input_tokens: 5, output_tokens: 5}, {name: b, weight: 1, input_tokens: 5, "
     "output_tokens: 5}]", "workload.mix.a.users"),
    ("[{name: a, users: 2, input_tokens: 5, output_tokens: 5}]",
     "workload.mix: every class has fixed users: give at least one class a weight"),
])
def test_a_malformed_mix_names_the_key(mix, message):
    with pytest.raises(ScenarioError) as err:
        _parse(f"name: x\nworkload: {{mix: {mix}}}\n")
    assert message in str(err.value), str(err.value)


def test_lengths_beside_a_mix_are_refused():
    with pytest.raises(ScenarioError, match="with mix, each class sets its own lengths: move input_tokens"):
        _parse("name: x\nworkload: {input_tokens: 5, mix: [{name: a, weight: 1, input_tokens: 5, output_tokens: 5}]}")


@pytest.mark.parametrize("seed", range(20))
def test_the_picker_keeps_every_class_within_two_picks_of_its_share(seed):
    rng = random.Random(seed)
    weights = [rng.choice([0.05, 0.3, 1, 2.5, 7]) for _ in range(rng.randint(1, 5))]
    picker, counts, total = ClassPicker(weights, start=seed), Counter(), sum(weights)
    for n in range(1, 2001):
        counts[picker.pick()] += 1
        for i, w in enumerate(weights):
            assert abs(counts[i] - n * w / total) < 2, (n, i, counts, weights)
    for i, w in enumerate(weights):  # at 2,000 picks: within one of the share
        assert abs(counts[i] - 2000 * w / total) <= 1, (counts, weights)


def test_the_picker_spreads_a_class_out_and_refuses_bad_weights():
    p = ClassPicker([1, 1, 2])
    picks = [p.pick() for _ in range(8)]
    assert picks.count(2) == 4 and all(a != b or a == 2 for a, b in itertools.pairwise(picks))
    assert "2, 2, 2" not in ", ".join(map(str, picks))
    with pytest.raises(ValueError, match="positive weights"):
        ClassPicker([1, 0])


def test_fixed_users_open_loop_is_refused():
    with pytest.raises(ScenarioError, match=r"workload\.mix\.batch\.users: open loop has no users to fix"):
        _parse("name: x\nworkload: {mix: [{name: batch, users: 2, input_tokens: 5, output_tokens: 5}, "
               "{name: chat, weight: 1, input_tokens: 5, output_tokens: 5}]}\n"
               "load: {mode: open_staircase, rate: {start: 2, step: 2, max: 4}}\n")
    s = _parse("name: x\nworkload: {mix: [{name: batch, users: 2, input_tokens: 5, output_tokens: 5}, "
               "{name: chat, weight: 1, input_tokens: 5, output_tokens: 5}]}\n")
    assert [(c.name, c.users, c.weight) for c in s.workload.mix] == [("batch", 2, 0.0), ("chat", None, 1.0)]


@pytest.mark.parametrize("workers", [1, 2, 3, 5])
def test_fixed_users_are_dealt_to_the_fleet_and_held_by_the_first_users_to_ask(workers):
    counts = [3, None, 2]  # 3 users on class 0, 2 on class 2, the rest weighted
    fleet = [FixedUsers(counts, w) for w in range(workers)]
    held = {}
    for w, f in enumerate(fleet):  # 6 users a worker (as many as its places at most), each asking twice: kept
        for u in range(6):
            first = f.pick(u, workers)
            assert f.pick(u, workers) == first
            held[(w, u)] = first
    got = Counter(c for c in held.values() if c is not None)
    assert got == Counter({0: 3, 2: 2}), (workers, held)
    # a stopped user's place goes to the next user to ask; one without a place stays weighted
    w, u = next(k for k, c in held.items() if c == 0)
    fleet[w].release(u)
    assert fleet[w].pick(99, workers) == 0
    others = [k for k, c in held.items() if c is None and k[0] == w]
    assert all(fleet[k[0]].pick(k[1], workers) is None for k in others)


def test_a_grown_fleet_takes_back_the_places_its_worker_no_longer_has():
    f = FixedUsers([4, None], worker=0)
    assert [f.pick(u, 1) for u in range(5)] == [0, 0, 0, 0, None]
    # two workers now: worker 0 has places 0 and 2 of the 4; two of its users give theirs up as they ask
    assert sorted(f.pick(u, 2) is None for u in range(4)) == [False, False, True, True]
    assert [f.pick(u, 2) for u in range(4)].count(0) == 2


def test_a_class_of_sessions_beside_a_class_of_requests():
    s = _parse("""
name: x
endpoint: {api: chat, model: base}
workload:
  mix:
    - {name: agent, weight: 1, sessions: {turns: 3, first_input_tokens: 900, turn_input_tokens: 50,
       output_tokens: 40, think_time_s: 0.2}, endpoint: {model: agent-lora}}
    - {name: chat, weight: 3, input_tokens: 300, output_tokens: 60}
""")
    agent, chat = s.workload.mix
    assert agent.workload.sessions is not None and agent.workload.input_tokens is None
    assert chat.workload.sessions is None and chat.workload.input_tokens is not None
    assert s.class_endpoint(agent).model == "agent-lora"


@pytest.mark.parametrize("extra, message", [
    ("cancel: {share: 0.5, after_s: 1}", "workload.cancel: applies to every class without its own, and agent runs "
                                         "sessions, which take no cancel yet"),
    ("images: {count: 1, width: 64, height: 64}", "workload.images: applies to every class"),
])
def test_the_workloads_hangups_and_images_are_refused_beside_a_class_of_sessions(extra, message):
    with pytest.raises(ScenarioError) as err:
        _parse(f"""
name: x
endpoint: {{api: chat, model: base}}
workload:
  {extra}
  mix:
    - {{name: agent, weight: 1, sessions: {{turns: 3, first_input_tokens: 900, turn_input_tokens: 50,
       output_tokens: 40}}}}
    - {{name: chat, weight: 3, input_tokens: 300, output_tokens: 60}}
""")
    assert message in str(err.value), str(err.value)


def test_session_metrics_and_embeddings_see_a_class_of_sessions():
    base = """
name: x
endpoint: {api: %s, model: base}
workload:
  mix:
    - {name: agent, weight: 1, sessions: {turns: 3, first_input_tokens: 900, turn_input_tokens: 50, output_tokens: 40}}
    - {name: chat, weight: 3, input_tokens: 300, output_tokens: 60}
slo: {session_ttft: ["p(95)<5000"]}
"""
    assert _parse(base % "chat").slo[0].metric == "session_ttft"  # a class's sessions make the session metrics
    with pytest.raises(ScenarioError, match=r"workload\.mix\.agent\.sessions: embeddings have no conversations"):
        _parse(base % "embeddings")
