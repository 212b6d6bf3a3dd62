"""Scenario files: the shipped ones load; malformed ones get one error naming file, key path and fix."""

from __future__ import annotations

import glob
import os
import shutil
import textwrap

import certifi
import pytest

from harness.scenario import ScenarioError, load_scenario, parse_scenario, url_problem

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOOD = """
name: ok
workload:
  input_tokens: {dist: lognormal, median: 900, sigma: 0.8}
  output_tokens: 100
"""


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(ROOT, "scenarios", "*.yaml"))))
def test_shipped_scenarios_load(path):
    s = load_scenario(path)
    assert s.name and s.load.mode in ("staircase", "constant", "open_staircase")
    for w in [c.workload for c in s.workload.mix] or [s.workload]:  # each class of a mix has its own lengths
        assert w.joint is not None or w.sessions is not None or w.trace is not None or (w.input_tokens and
                                                                                           w.output_tokens)


def write(tmp_path, text: str) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(textwrap.dedent(text))
    (tmp_path / "log.csv").write_text("prompt_tokens,completion_tokens\n10,20\n30,40\n")
    return str(path)


MALFORMED = [
    ("name: [unclosed", "line 1, column 16: not valid YAML (expected ',' or ']'"),
    ("- just\n- a list", "(top level): expected a mapping, got a list"),
    ("workload: {input_tokens: 5, output_tokens: 5}", "(top level): missing required key 'name'"),
    ("name: 'has space'\nworkload: {input_tokens: 5, output_tokens: 5}", "name: names use letters, digits"),
    (GOOD + "lod: {}", "(top level): unknown key 'lod'; did you mean 'load'?"),
    ("name: x\nworkload: {input_tokens: 5}", "workload: missing required key 'output_tokens'"),
    ("name: x\nworkload: {input_tokens: {dist: lognormal, median: 900, sigma: -1}, output_tokens: 5}",
     "workload.input_tokens.sigma: must be >= 0, got -1"),
    ("name: x\nworkload: {input_tokens: {dist: lognormal, median: 0, sigma: 1}, output_tokens: 5}",
     "workload.input_tokens.median: must be > 0, got 0"),
    ("name: x\nworkload: {input_tokens: {dist: weibull, k: 1}, output_tokens: 5}",
     "workload.input_tokens.dist: must be one of fixed, uniform, normal, lognormal, gamma, mixture, empirical"),
    ("name: x\nworkload: {input_tokens: {dist: uniform, min: 50, max: 10}, output_tokens: 5}",
     "workload.input_tokens: min (50) must be <= max (10)"),
    ("name: x\nworkload: {input_tokens: {dist: normal, mean: 5, stdev: 1}, output_tokens: 5}",
     "workload.input_tokens: unknown key 'stdev'; did you mean 'std'?"),
    ("name: x\nworkload: {input_tokens: {dist: gamma, mean: 5, std: 1, shape: 2}, output_tokens: 5}",
     "give either mean/std or shape/scale, not both"),
    ("name: x\nworkload: {input_tokens: 'many', output_tokens: 5}", "workload.input_tokens: expected a distribution"),
    ("name: x\nworkload: {input_tokens: {dist: empirical, file: nope.csv, column: a}, output_tokens: 5}",
     "workload.input_tokens.file: file not found: nope.csv"),
    ("name: x\nworkload: {input_tokens: {dist: empirical, file: log.csv, column: tokens}, output_tokens: 5}",
     "no column 'tokens'; columns are prompt_tokens, completion_tokens"),
    ("name: x\nworkload: {input_tokens: {dist: empirical, quantiles: [[0.1, 5], [1, 9]]}, output_tokens: 5}",
     "q must increase strictly from 0 to 1"),
    ("name: x\nworkload: {input_tokens: {dist: empirical, values: [1, -2]}, output_tokens: 5}",
     "workload.input_tokens.values: expected a non-empty list of integers >= 0"),
    ("name: x\nworkload: {input_tokens: {dist: mixture, components: [{dist: fixed, value: 3}]}, output_tokens: 5}",
     "workload.input_tokens.components[0]: missing required key 'weight'"),
    ("name: x\nworkload: {joint: {file: log.csv, input: prompt_tokens}}",
     "workload.joint: missing required key 'output'"),
    ("name: x\nworkload: {joint: {file: log.csv, input: a, output: b}, input_tokens: 4}",
     "give either joint or input_tokens + output_tokens, not both"),
    (GOOD + "endpoint: {host: '127.0.0.1:8000'}", "endpoint.host: expected a URL starting with http://"),
    (GOOD + "endpoint: {host: 'http://'}", "endpoint.host: expected a host name after http://"),
    (GOOD + "endpoint: {host: 'https://h:0'}", "endpoint.host: bad port in 'https://h:0': expected 1-65535, got 0"),
    (GOOD + "endpoint: {tls: {ca_file: log.csv}}", "endpoint.tls.ca_file: log.csv is not a PEM bundle"),
    (GOOD + "endpoint: {tls: {verify: 0}}", "endpoint.tls.verify: expected true or false, got an integer 0"),
    (GOOD + "endpoint: {retry_after: honour}", "endpoint.retry_after: must be one of honor, ignore; got 'honour'"),
    (GOOD + "load: {users: {max: 1.0e+7}}", "load.users.max: must be <= 1,000,000, got 10000000.0"),
    (GOOD + "load: {users: {start: 1, step: 1, max: 20000}}", "load.users.step: the staircase 1, 2, ... up to "
                                                             "20,000 has 20,000 levels, more than the 10,000"),
    (GOOD + "endpoint: {api: response}", "endpoint.api: must be one of chat, completions, responses, messages, "
                                          "embeddings; got 'response'"),
    (GOOD + "endpoint: {headers: {Host: x}}", "endpoint.headers.Host: kneecap sets this header itself"),
    (GOOD + "endpoint: {headers: {'X Bad': x}}", "'X Bad' is not an HTTP header name"),
    (GOOD + "endpoint: {headers: {X-Key: {envv: K}}}", "endpoint.headers.X-Key: unknown key 'envv'"),
    (GOOD + "endpoint: {continuous_usage: always}", "endpoint.continuous_usage: must be one of auto, on, off"),
    (GOOD + "endpoint: {timeouts: {ttft_s: 0}}", "endpoint.timeouts.ttft_s: must be > 0, got 0"),
    (GOOD + "load: {mode: ramp}",
     "load.mode: must be one of staircase, constant, open_staircase, search, open_search; got 'ramp'"),
    (GOOD + "load: {users: {start: 64, step: 4, max: 8}}", "load.users: start (64) must be <= max (8)"),
    (GOOD + "load: {users: {start: 2.5}}", "load.users.start: expected an integer, got a number 2.5"),
    (GOOD + "load: {mode: staircase, rate: {start: 1}}", "load.rate: staircase mode is driven by users, not rate"),
    (GOOD + "load: {step: {min_duration_s: 60, max_duration_s: 30}}",
     "load.step: min_duration_s (60) must be <= max_duration_s (30)"),
    (GOOD + "slo: {ttft: ['p95<500']}", "slo.ttft[0]: 'p95<500' is not a threshold"),
    (GOOD + "slo: {error_rate: 'p(99)<0.1'}", "slo.error_rate: error_rate takes \"rate<X\""),
    (GOOD + "slo: {ttfb: ['p(95)<500']}", "slo: unknown key 'ttfb'; did you mean 'ttft'?"),
    (GOOD + "sinks: {influxdb: {url: 'http://x', org: o, bucket: b, token: secret}}",
     "secrets never go in the file: name the variable with token_env"),
    (GOOD + "sinks: {influxdb: {org: o, bucket: b}}", "sinks.influxdb: give exactly one of url or url_env"),
    (GOOD + "cost: {per_hour: 4.2, per_month: 4999}", "cost: give per_hour or per_month, not both"),
    (GOOD + "cost: {per_hour: -4.2}", "cost.per_hour: must be > 0, got -4.2"),
    (GOOD + "cost: {output_per_mtok: 1.5, input_per_mtk: 0.5}", "cost: unknown key 'input_per_mtk'; did you mean "
                                                                "'input_per_mtok'?"),
    (GOOD + "cost: {output_per_mtok: 1.5}", "cost: metered prices need both input_per_mtok and output_per_mtok"),
    (GOOD + "cost: {per_month: [4999]}", "cost.per_month: expected a number, got a list"),
    (GOOD + "verify: {check: {regex: '(a'}}", "verify.check.regex: not a regular expression: missing ), unterminated"),
    (GOOD + "verify: {check: {schema: {type: 7}}}", "verify.check.schema: not a valid JSON Schema: 7 is not valid"),
    (GOOD + "verify: {check: {jsn: true}}", "verify.check: unknown key 'jsn'; did you mean 'json'?"),
    (GOOD + "verify: {file: log.csv}", "verify.file: line 1: not JSON (Expecting value"),
    (GOOD + "verify: {}\nslo: {answers_failed_rate: 'rate<0.01'}", "slo.answers_failed_rate: needs answers to check"),
]


@pytest.mark.parametrize("text,message", MALFORMED, ids=[f"case{i}" for i in range(len(MALFORMED))])
def test_malformed_scenarios_name_the_problem(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    text = str(err.value)
    assert text.startswith(path + ": ")
    assert message in text, text


def test_every_problem_is_reported_at_once(tmp_path):
    path = write(tmp_path, "name: x\nworkload: {input_tokens: {dist: normal, mean: 1, std: -1}, output_tokens: -3}\n"
                           "load: {mode: nope}\nslo: {tpot: 'fast'}")
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert len(err.value.problems) == 4, err.value.problems


def test_missing_file_is_a_scenario_error(tmp_path):
    with pytest.raises(ScenarioError, match="cannot read the file"):
        load_scenario(str(tmp_path / "absent.yaml"))


def test_overrides_apply_before_validation(tmp_path):
    path = write(tmp_path, GOOD)
    s = load_scenario(path, {"load.users.max": 32, "endpoint.host": "http://127.0.0.1:9"})
    assert s.load.max == 32 and s.endpoint.host == "http://127.0.0.1:9"
    with pytest.raises(ScenarioError, match=r"load\.users\.max: must be > 0, got -1"):
        load_scenario(path, {"load.users.max": -1})


def test_values_and_defaults(tmp_path):
    slo = "slo: {ttft: ['p(95)<500', {threshold: 'p(99)<900', abort_on_fail: true}]}"
    s = load_scenario(write(tmp_path, GOOD + slo))
    assert [t.text for t in s.slo] == ["ttft: p(95)<500", "ttft: p(99)<900"] and s.slo[1].abort_on_fail
    assert s.endpoint.api == "chat" and s.endpoint.timeouts.ttft_s == 60 and s.load.step.min_requests == 200


def test_tls_and_retry_after(tmp_path):
    s = load_scenario(write(tmp_path, GOOD))
    assert s.endpoint.tls.ca_file is None and s.endpoint.tls.verify and s.endpoint.retry_after == "honor"
    shutil.copy(certifi.where(), tmp_path / "ca.pem")
    s = load_scenario(write(tmp_path, GOOD + "endpoint: {host: 'https://h', tls: {ca_file: ca.pem}, "
                                             "retry_after: ignore}"))
    # resolved against the scenario's folder: workers may run from another working directory
    assert s.endpoint.tls.ca_file == str(tmp_path / "ca.pem") and s.endpoint.tls.verify
    assert s.endpoint.retry_after == "ignore"
    assert load_scenario(write(tmp_path, GOOD + "endpoint: {tls: {verify: false}}")).endpoint.tls.verify is False


def test_a_trace_may_start_with_a_bom(tmp_path):
    path = write(tmp_path, GOOD.replace("output_tokens: 100", "output_tokens: {dist: empirical, file: bom.csv, "
                                                              "column: completion_tokens}"))
    (tmp_path / "bom.csv").write_bytes(b"\xef\xbb\xbfcompletion_tokens\n10\n20\n")  # Excel's CSV export
    assert load_scenario(path).workload.output_tokens is not None


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000", "https://llm.example.com", "http://[::1]:8000",
                                 "https://h/openai/deployments/x", "HTTP://Host:1", "http://h:65535/"])
def test_good_urls(url):
    assert url_problem(url) is None


@pytest.mark.parametrize("url,problem", [
    ("http://", "expected a host name"), ("not-a-url", "did you mean 'http://not-a-url'?"),
    ("ftp://h", "starting with http:// or https://"), ("http://h:65536", "bad port"), ("http://h:x", "bad port"),
    ("http://[::1", "Invalid IPv6 URL"), ("http://::1:80", "in brackets"), ("http://a b", "without spaces"),
    ("http://u:p@h", "credentials"), ("http://h/v1?x=1", "without ?query"), ("http://h#top", "#fragment"),
])
def test_bad_urls(url, problem):
    assert problem in (url_problem(url) or ""), url_problem(url)


def test_bare_on_and_off_are_the_choices_yaml_turned_into_booleans(tmp_path):
    """YAML 1.1 reads `continuous_usage: off` as false; where the choices are on/off, it means "off"."""
    s = load_scenario(write(tmp_path, GOOD + "endpoint: {continuous_usage: off, metrics: off}"))
    assert s.endpoint.continuous_usage == "off" and s.endpoint.metrics == "off"
    assert load_scenario(write(tmp_path, GOOD + "endpoint: {continuous_usage: on}")).endpoint.continuous_usage == "on"


def test_a_short_answer_slo_needs_requests_that_ask_for_an_exact_length():
    base = {"name": "t", "endpoint": {"host": "http://127.0.0.1:1", "model": "m", "ignore_eos": False},
            "workload": {"input_tokens": 10, "output_tokens": 10}, "slo": {"short_answer_rate": "rate<0.01"}}
    with pytest.raises(ScenarioError, match=r"slo\.short_answer_rate: no request asks for an exact output length"):
        parse_scenario(base, source="t.yaml")
    mix = {**base, "slo": {}, "workload": {"mix": [
        {"name": "a", "weight": 1, "input_tokens": 10, "output_tokens": 10, "slo": {"short_answer_rate": "rate<0.1"}},
        {"name": "b", "weight": 1, "input_tokens": 10, "output_tokens": 10, "endpoint": {"ignore_eos": True},
         "slo": {"short_answer_rate": "rate<0.1"}}]}}
    with pytest.raises(ScenarioError) as err:
        parse_scenario(mix, source="t.yaml")
    assert "workload.mix.a.slo.short_answer_rate" in str(err.value) and "mix.b" not in str(err.value)
    parse_scenario({**base, "endpoint": {**base["endpoint"], "ignore_eos": True}}, source="t.yaml")  # asks: fine


def test_verify_reads_its_prompt_file_and_schema_file_with_the_scenario(tmp_path):
    (tmp_path / "prompts.jsonl").write_text('{"prompt": "capital of France?", "max_tokens": 8, "answer": " Paris"}\n\n'
                                            '{"prompt": "two plus two?", "contains": "4"}\n')
    (tmp_path / "schema.json").write_text('{"type": "object", "required": ["answer"]}')
    s = load_scenario(write(tmp_path, GOOD + "verify: {file: prompts.jsonl, check: {schema: schema.json}}\n"
                                             "slo: {answers_failed_rate: 'rate<0.01'}"))
    v = s.verify
    assert v is not None and v.prompts == 2 and v.checks
    assert v.check.schema == {"type": "object", "required": ["answer"]}
    assert [(p.prompt, p.max_tokens, p.answer, p.contains) for p in v.file] == [
        ("capital of France?", 8, " Paris", None), ("two plus two?", None, None, "4")]
    (tmp_path / "bad.jsonl").write_text('{"prompt": ""}\n["x"]\n{"prompt": "p", "max_tokens": 0}\n'
                                        '{"prompt": "p", "q": 1}\n')
    with pytest.raises(ScenarioError) as err:
        load_scenario(write(tmp_path, GOOD + "verify: {file: bad.jsonl}"))
    assert 'line 1: "prompt" must be a non-empty string; line 2: expected an object, got list; line 3: "max_tokens" ' \
           "must be an integer >= 1, got 0; line 4: unknown key 'q'" in str(err.value), err.value
