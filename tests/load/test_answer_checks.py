"""``verify.check`` end to end: answers checked against a JSON Schema under load, on a simulator that cuts every
10th JSON answer short (``--malformed-json-share 0.1``: its JSON never closes), and the SLO on that share failing
the run. Counts, not time: it runs beside the other lanes."""

from __future__ import annotations

import json

import pytest

from tests.kit.run import kneecap_run, write_scenario

pytestmark = pytest.mark.integration

SCENARIO = """
    name: checks-test
    endpoint:
      api: chat
      model: sim-tiny
      extra_body: {response_format: {type: json_schema, json_schema: {name: answer, schema: {type: object}}}}
    workload: {input_tokens: 32, output_tokens: 12, seed: 3}
    load: {mode: constant, users: 8, duration_s: 4, step: {warmup_s: 0.5}}
    verify: {share: 1.0, check: {schema: schema.json}}
    slo: {answers_failed_rate: "rate<0.05"}
"""
SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"],
          "additionalProperties": False}


def test_a_schema_check_finds_the_tenth_of_answers_cut_short_and_fails_the_run(tmp_path):
    (tmp_path / "schema.json").write_text(json.dumps(SCHEMA))
    r = kneecap_run(write_scenario(tmp_path, SCENARIO), "--sim-arg=--malformed-json-share=0.1",
                    out=tmp_path / "out")
    v = r.summary["steps"][0]["verify"]
    assert v["checked"] >= 150, v  # every measured request asked a reference prompt and was checked
    assert v["failed_share"] == pytest.approx(0.10, abs=0.03), v
    assert set(v["failed_by"]) == {"json"}, v  # cut short: it does not parse, so the schema is never reached
    assert v["check_examples"] and all(not x["answer"].endswith('"}') for x in v["check_examples"]), v
    assert r.code == 3, r.output  # the SLO on the failed share
    assert "ANSWERS FAILED CHECKS: from 8 users on (step 0)" in r.output and "(json " in r.output, r.output


def test_a_runs_references_compare_another_deployment_with_it(tmp_path):
    """``answers.jsonl`` from one run is the next run's ``verify.file``: the same server gives the same answers, one
    whose greedy answers all change (``--changed-answers-share 1``) is named at every step."""
    def scenario(verify: str) -> str:
        return write_scenario(tmp_path, f"""
            name: compare-test
            endpoint: {{api: chat, model: sim-tiny}}
            workload: {{input_tokens: 40, output_tokens: 10, seed: 5}}
            load: {{mode: constant, users: 4, duration_s: 2, step: {{warmup_s: 0.5}}}}
            verify: {verify}
        """)

    first = kneecap_run(scenario("{share: 0.5, prompts: 5}"), out=tmp_path / "a")
    lines = [json.loads(x) for x in (tmp_path / "a" / "answers.jsonl").read_text().splitlines()]
    assert len(lines) == 5, (first.output, lines)
    # the references are written whatever the step's verdict: on a machine that starves the load generator (a
    # fresh-clone CI: its loop waited 0.8 s for a CPU in a 2 s step) the step is not judged, exit 4, and it says so
    assert first.code == 0 or (first.code == 4 and "UNRELIABLE: step 0" in first.output), first.output
    assert all(x["messages"][-1]["role"] == "user" and x["max_tokens"] == 10 and len(x["answer"].split()) == 10
               for x in lines), lines
    again = scenario(f"{{share: 0.5, file: {tmp_path / 'a' / 'answers.jsonl'}}}")
    same = kneecap_run(again, out=tmp_path / "b")
    v = same.summary["steps"][0]["verify"]
    assert v["verified"] >= 20 and v["changed"] == 0, v  # no reference asked: the file's are the references
    assert not (tmp_path / "b" / "answers.jsonl").exists()
    other = kneecap_run(again, "--sim-arg=--changed-answers-share=1", out=tmp_path / "c")
    v = other.summary["steps"][0]["verify"]
    assert v["verified"] >= 20 and v["changed_share"] == 1.0 and v["first_difference_median"] == 4, v
    assert "ANSWERS CHANGED: from 4 users on (step 0): 100.0%" in other.output, other.output


def test_a_mixs_classes_ask_with_their_own_endpoint_and_are_counted_apart(tmp_path):
    """Two classes, one asking JSON (its endpoint's ``response_format``) and one plain text: the re-asks of each
    class's reference prompts use that class's endpoint, so the JSON check fails every plain answer and a tenth of
    the JSON ones (the simulator cuts every 10th), each counted in its class."""
    (tmp_path / "schema.json").write_text(json.dumps(SCHEMA))
    r = kneecap_run(write_scenario(tmp_path, """
        name: classes-test
        endpoint: {api: chat, model: sim-tiny}
        workload:
          seed: 11
          mix:
            - {name: plain, weight: 1, input_tokens: 32, output_tokens: 12}
            - name: json
              weight: 1
              input_tokens: 32
              output_tokens: 12
              endpoint: {extra_body: {response_format: {type: json_object}}}
        load: {mode: constant, users: 6, duration_s: 3, step: {warmup_s: 0.5}}
        verify: {share: 1.0, prompts: 8, check: {schema: schema.json}}
    """), "--sim-arg=--malformed-json-share=0.1", out=tmp_path / "out")
    step = r.summary["steps"][0]
    by = {c["name"]: c["answers"] for c in step["classes"]}
    assert by["plain"] and by["json"], by  # 8 prompts drawn from two classes of equal weight: both have some
    assert by["plain"]["failed_share"] == 1.0, by  # words, not JSON
    assert by["json"]["failed_share"] == pytest.approx(0.1, abs=0.06), by
    v = step["verify"]
    assert v["checked"] == by["plain"]["checked"] + by["json"]["checked"], (v, by)
    assert v["changed"] == by["plain"]["changed"] + by["json"]["changed"], (v, by)
    assert "by class at that load: plain 100% of" in r.output, r.output
