"""Malformed input of every kind (scenario keys, flags, traces, fit logs, summaries) is refused the same way:
exit 2, one message naming the file and the key, no traceback, within 5 s (issue 11, "Inputs that crash or hang").

Each case is a set of files and a command line, run in-process with click's CliRunner; ``kneecap run`` refuses
a bad scenario or ``--host`` before it starts any process. One case runs the real command in a subprocess.
"""

from __future__ import annotations

import gzip
import json
import pathlib
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field

import certifi
import pytest
from click.testing import CliRunner

from harness.analysis.plan import StepPlan
from harness.cli import main
from harness.spec.load import level_count
from tests.kit.run import kneecap_run
from tests.kit.summaries import break_, written

GOOD = "name: x\nworkload: {input_tokens: 5, output_tokens: 5}\n"
OPEN = "name: x\nworkload: {input_tokens: 5, output_tokens: 5}\nload: {mode: open_staircase, rate: {start: 1, " \
       "step: 1, max: 4}, arrival: {process: trace, file: trace.csv, column: TIMESTAMP}}\n"
GZIP = gzip.compress(b"TIMESTAMP\n1\n2\n3\n")
NOT_UTF8 = b"prompt_tokens,completion_tokens\n10,20\n\xff\xfe,3\n"


@dataclass
class Case:
    id: str
    argv: list[str]
    """``{d}`` is the case's folder."""
    expect: list[str]
    """Substrings of the output: the file, the key, what is wrong."""
    files: dict[str, str | bytes | dict | list] = field(default_factory=dict)
    """Relative path -> text, bytes, or a value written as JSON."""
    absent: str | None = None
    """A file the command must not have written."""


def scenario(name: str, text: str | bytes, expect: list[str], **files: str | bytes) -> Case:
    """``kneecap run s.yaml``: refused while validating, before any process starts."""
    return Case(name, ["run", "{d}/s.yaml", "--out", "{d}/out"], ["s.yaml", *expect], {"s.yaml": text, **files})


def report(name: str, summary: object, expect: list[str], **files: str | bytes) -> Case:
    return Case(name, ["report", "{d}/run"], ["run/summary.json", *expect], {"run/summary.json": summary, **files},
                absent="run/report.html")


def compare(name: str, other: object, expect: list[str]) -> Case:
    return Case(name, ["compare", "{d}/a", "{d}/b", "--out", "{d}/cmp.html"], expect,
                {"a/summary.json": written(), "b/summary.json": other}, absent="cmp.html")


SESSIONS = "name: s\nworkload:\n  sessions: "

CASES = [
    # sessions: every problem at once, with its key path
    scenario("sessions-bad-keys", SESSIONS + "{turns: 0.5, first_input_tokens: 100, output_tokens: 5, think_tim_s: 1}",
             ["workload.sessions: missing required key 'turn_input_tokens'", "did you mean 'think_time_s'",
              "workload.sessions.turns: expected a distribution"]),
    scenario("sessions-with-lengths", "name: s\nworkload: {input_tokens: 5, sessions: {log: log.jsonl}}",
             ["sessions set their own lengths", "remove input_tokens"],
             **{"log.jsonl": '{"session_id": "a", "turn": 1, "input_tokens": 10, "output_tokens": 2}\n'}),
    scenario("sessions-log-garbage", SESSIONS + "{log: log.jsonl}", ["workload.sessions.log", "log.jsonl:2"],
             **{"log.jsonl": '{"session_id": "a", "turn": 1, "input_tokens": 10, "output_tokens": 2}\n{oops\n'}),
    scenario("session-knee-without-sessions", GOOD + "load: {knee: {metric: session_ttft}}",
             ["load.knee.metric: session_ttft needs workload.sessions"]),
    # huge plans: refused by the limit, before a level list could be built
    scenario("users-max-float", GOOD + "load: {users: {max: 1.0e+20}}",
             ["load.users.max: must be <= 1,000,000, got 1e+20", "a typo"]),
    scenario("users-max-yaml-text", GOOD + "load: {users: {max: 1e20}}",  # YAML 1.1 reads 1e20 as a string
             ["load.users.max: must be <= 1,000,000, got 1e20"]),
    scenario("users-too-many-levels", GOOD + "load: {users: {start: 1, step: 1, max: 1000000}}",
             ["load.users.step: the staircase 1, 2, ... up to 1,000,000 has 1,000,000 levels", "use a step of"]),
    scenario("rate-tiny-step", GOOD + "load: {mode: open_staircase, rate: {start: 0.001, step: 0.001, max: 500}}",
             ["load.rate.step:", "500,000 levels, more than the 10,000"]),
    scenario("rate-max", GOOD + "load: {mode: open_staircase, rate: {start: 1, step: 1000, max: 5.0e+6}}",
             ["load.rate.max: must be <= 1,000,000"]),
    scenario("constant-users", GOOD + "load: {mode: constant, users: 2000000000}",
             ["load.users.start: must be <= 1,000,000"]),
    scenario("users-quoted", GOOD + "load: {users: {max: '64'}}", ["load.users.max: expected an integer, got the "
                                                                   "string '64'"]),
    # the host
    scenario("cost-flat-twice", GOOD + "cost: {per_hour: 4.2, per_month: 4999, currency: INR}",
             ["cost: give per_hour or per_month, not both"]),
    scenario("cost-negative-quoted", GOOD + "cost: {input_per_mtok: -0.5, output_per_mtok: '1.5'}",
             ["cost.input_per_mtok: must be >= 0, got -0.5",
              "cost.output_per_mtok: expected a number, got the string"]),
    scenario("host-empty-authority", GOOD + "endpoint: {host: 'http://'}", ["endpoint.host: expected a host name"]),
    scenario("host-no-scheme", GOOD + "endpoint: {host: not-a-url}",
             ["endpoint.host: expected a URL starting with http:// or https://", "did you mean 'http://not-a-url'"]),
    scenario("host-bad-port", GOOD + "endpoint: {host: 'http://127.0.0.1:99999'}", ["endpoint.host: bad port"]),
    scenario("host-ipv6-unclosed", GOOD + "endpoint: {host: 'http://[::1'}", ["endpoint.host:", "Invalid IPv6"]),
    scenario("host-ipv6-bare", GOOD + "endpoint: {host: 'http://::1:8000'}", ["endpoint.host:", "in brackets"]),
    scenario("host-credentials", GOOD + "endpoint: {host: 'https://me:secret@llm.example.com'}",
             ["endpoint.host: credentials in the URL", "api_key_env"]),
    scenario("host-query", GOOD + "endpoint: {host: 'https://h/v1?api-version=2'}", ["endpoint.host:", "?query"]),
    scenario("metrics-url", GOOD + "endpoint: {metrics: 'ftp://h/metrics'}", ["endpoint.metrics: expected auto"]),
    # TLS and Retry-After
    scenario("tls-verify-text", GOOD + "endpoint: {tls: {verify: 'no'}}",
             ["endpoint.tls.verify: expected true or false, got a string 'no'"]),
    scenario("tls-typo", GOOD + "endpoint: {tls: {verfy: false}}", ["endpoint.tls: unknown key 'verfy'; did you mean "
                                                                    "'verify'?"]),
    scenario("tls-ca-missing", GOOD + "endpoint: {tls: {ca_file: ca.pem}}",
             ["endpoint.tls.ca_file: file not found: ca.pem"]),
    scenario("tls-ca-not-pem", GOOD + "endpoint: {tls: {ca_file: ca.pem}}",
             ["endpoint.tls.ca_file: ca.pem is not a PEM bundle"], **{"ca.pem": "hello\n"}),
    scenario("tls-ca-and-no-verify", GOOD + "endpoint: {tls: {ca_file: ca.pem, verify: false}}",
             ["endpoint.tls: ca_file says which certificates to trust, verify: false trusts any"],
             **{"ca.pem": "see the test"}),
    scenario("tls-not-mapping", GOOD + "endpoint: {tls: true}", ["endpoint.tls: expected a mapping, got a boolean"]),
    scenario("retry-after-word", GOOD + "endpoint: {retry_after: obey}",
             ["endpoint.retry_after: must be one of honor, ignore; got 'obey'"]),
    scenario("retry-after-bool", GOOD + "endpoint: {retry_after: true}",
             ["endpoint.retry_after: expected a non-empty string, got a boolean True"]),
    # files that are not UTF-8 text
    scenario("scenario-latin1", (GOOD + "description: 'caf\xe9'\n").encode("latin-1"),
             ["the file is not UTF-8 text (byte 0xe9 at offset", "line 3", "Save it as UTF-8"]),
    scenario("scenario-utf16", GOOD.encode("utf-16"), ["the file is not UTF-8 text (byte 0xff at offset 0, line 1)"]),
    scenario("scenario-binary", b"\x00\x01\x02name: x", ["the file is not text (a NUL byte at offset 0)"]),
    scenario("arrival-trace-gzip", OPEN, ["load.arrival.file:", "trace.csv is not UTF-8 text (byte 0x8b at offset 1"],
             **{"trace.csv": GZIP}),
    scenario("arrival-trace-nul", OPEN, ["load.arrival.file:", "trace.csv is not text (a NUL byte at offset 12)"],
             **{"trace.csv": b"TIMESTAMP\n1\n\x00\x00\n"}),
    scenario("empirical-trace-latin1",
             "name: x\nworkload: {input_tokens: {dist: empirical, file: log.csv, column: prompt_tokens}, "
             "output_tokens: 5}\n",
             ["workload.input_tokens.file:", "log.csv is not UTF-8 text (byte 0xff at offset 38, line 3)"],
             **{"log.csv": NOT_UTF8}),
    scenario("joint-trace-binary",
             "name: x\nworkload: {joint: {file: log.csv, input: prompt_tokens, output: completion_tokens}}\n",
             ["workload.joint.file:", "log.csv is not UTF-8 text"], **{"log.csv": GZIP}),
    scenario("trace-csv-huge-field", OPEN, ["load.arrival.file:", "trace.csv:2: not valid CSV (field larger than"],
             **{"trace.csv": "TIMESTAMP\n\"" + "1" * 200_000 + "\"\n"}),
    # kneecap run --host
    Case("flag-host-empty", ["run", "--host", "http://"], ["Invalid value for '--host'", "expected a host name"]),
    Case("flag-host-no-scheme", ["run", "--host", "not-a-url"], ["Invalid value for '--host'", "did you mean"]),
    Case("flag-host-port", ["run", "--host", "http://127.0.0.1:65536"], ["Invalid value for '--host'", "bad port"]),
    # kneecap fit
    Case("fit-not-utf8", ["fit", "{d}/log.csv"], ["log.csv is not UTF-8 text (byte 0xff at offset 38, line 3)"],
         {"log.csv": NOT_UTF8}),
    Case("fit-gzip-jsonl", ["fit", "{d}/log.jsonl"], ["log.jsonl is not UTF-8 text (byte 0x8b"], {"log.jsonl": GZIP}),
    Case("fit-nul", ["fit", "{d}/log.csv"], ["log.csv is not text (a NUL byte"],
         {"log.csv": b"prompt_tokens,completion_tokens\n1,2\n\x00"}),
    Case("fit-one-row", ["fit", "{d}/log.csv"], ["log.csv: need at least 2 rows"],
         {"log.csv": "prompt_tokens,completion_tokens\n10,20\n"}),
    Case("fit-bad-jsonl-line", ["fit", "{d}/log.jsonl"], ["log.jsonl:2: invalid JSON"],
         {"log.jsonl": '{"prompt_tokens": 1, "completion_tokens": 2}\n{"prompt_tokens": \n'}),
    Case("fit-text-count", ["fit", "{d}/log.csv"], ["log.csv:3: column 'prompt_tokens' is 'fifty'"],
         {"log.csv": "prompt_tokens,completion_tokens\n10,20\nfifty,3\n"}),
    # kneecap report
    report("report-empty-object", {}, ["schema: missing required key"]),
    report("report-latency-list", break_("steps.2.latency_ms", []), ["steps[2].latency_ms: expected a mapping, got a "
                                                                     "list"]),
    report("report-knee-text", break_("knee.found", "yes"), ["knee.found: expected true or false"]),
    report("report-steps-null", break_("steps", None), ["steps: expected a list, got null"]),
    report("report-not-utf8", b'{"schema": "\xff"}', ["is not UTF-8 text (byte 0xff at offset 12, line 1)"]),
    report("report-truncated", json.dumps(written())[:500], ["is not valid JSON"]),
    report("report-newer-schema", break_("schema", "kneecap.summary/9"), ["schema: expected kneecap.summary/1 or "
                                                                         "kneecap.summary/2 or kneecap.summary/3"]),
    Case("report-records-not-objects", ["report", "{d}/run"], ["run/requests.jsonl:2: expected a request record"],
         {"run/summary.json": written(), "run/requests.jsonl": '{"ok": true}\n[1, 2]\n'}, absent="run/report.html"),
    Case("report-no-summary", ["report", "{d}/run"], ["run has no summary.json: not a run folder"],
         {"run/other.txt": ""}),
    # kneecap compare
    compare("compare-empty-object", {}, ["b/summary.json: schema: missing required key"]),
    compare("compare-wrong-type", break_("steps.0.throughput.requests_per_s", "fast"),
            ["b/summary.json: steps[0].throughput.requests_per_s: expected a number, got a string 'fast'"]),
    compare("compare-binary", GZIP, ["b/summary.json is not UTF-8 text"]),
    Case("sweep-binary", ["sweep", "{d}/sw.yaml"], ["sw.yaml: the sweep file is not UTF-8 text"], {"sw.yaml": GZIP}),
    Case("sweep-bad-yaml", ["sweep", "{d}/sw.yaml"], ["sw.yaml: line 2, column 1: not valid YAML (expected ',' or ']'"],
         {"sw.yaml": "name: [x\n"}),
    Case("sweep-not-a-mapping", ["sweep", "{d}/sw.yaml"], ["sw.yaml: 1 problem", "expected a mapping, got a list"],
         {"sw.yaml": "- name: x\n"}),
    Case("sweep-no-scenario-file", ["sweep", "{d}/sw.yaml"], ["base.yaml: cannot read the scenario file"],
         {"sw.yaml": "name: x\nscenario: base.yaml\n"}),
    Case("sweep-axis-typo", ["sweep", "{d}/sw.yaml"], ["cell 1 (input_token.median=8)", "did you mean 'input_tokens'"],
         {"sw.yaml": "name: x\nscenario: s.yaml\nmatrix: {workload.input_token.median: [8]}\n", "s.yaml": GOOD}),
    compare("compare-open-vs-closed", written("open"), ["cannot compare closed-loop runs (users) with open-loop",
                                                        "b (open loop)"]),
]


def _materialise(case: Case, root) -> list[str]:
    for rel, content in case.files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        elif isinstance(content, str):
            path.write_text(content, encoding="utf-8")
        else:
            path.write_text(json.dumps(content), encoding="utf-8")
    if case.id == "tls-ca-and-no-verify":  # a real CA bundle, so the only problem is the combination
        shutil.copy(certifi.where(), root / "ca.pem")
    return [a.replace("{d}", str(root)) for a in case.argv]


def test_there_are_enough_cases():
    assert len(CASES) >= 30 and len({c.id for c in CASES}) == len(CASES)


def _no_process(*args: object, **kwargs: object) -> None:
    raise AssertionError(f"the input was accepted: a process was started ({args[0] if args else kwargs})")


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_malformed_input_is_refused_with_exit_2_naming_file_and_key(tmp_path, monkeypatch, case):
    # an input wrongly accepted by `kneecap run` must fail here, not start a simulator and a fleet that outlive the test
    monkeypatch.setattr(subprocess, "Popen", _no_process)
    argv = _materialise(case, tmp_path)
    began = time.monotonic()
    result = CliRunner().invoke(main, argv)
    took = time.monotonic() - began
    output = result.output  # stdout and stderr together
    assert result.exit_code == 2, (result.exit_code, output, result.exception)
    assert "Error: " in result.stderr and "Traceback" not in output, output
    for text in case.expect:
        assert text in output, output
    assert took < 5, f"took {took:.1f} s"
    if case.absent:
        assert not (tmp_path / case.absent).exists()


@pytest.mark.integration
def test_the_real_command_refuses_a_bad_host_and_a_binary_scenario(tmp_path):
    """The same through the installed entry point (a subprocess): stderr has the message, never a traceback."""
    (tmp_path / "s.yaml").write_bytes(b"name: \xff\n")
    for argv, expect in ((["--host", "http://"], "Error: Invalid value for '--host'"),
                         ([str(tmp_path / "s.yaml")], "s.yaml: 1 problem\n  - the file is not UTF-8 text (byte 0xff")):
        began = time.monotonic()
        r = kneecap_run(None, *argv, out=tmp_path / "out", workers=None, timeout=30)  # as typed: no --workers
        assert r.code == 2 and expect in r.stderr and "Traceback" not in r.stderr + r.stdout, r
        assert time.monotonic() - began < 5
    assert not (tmp_path / "out").exists()  # refused before the results folder was made


def test_plan_levels_are_computed_on_demand():
    """users.max: 1e20 built the whole level list up front (6 GB in under a minute); a plan is now three numbers.
    (A million levels, not 1e20, so that a regression fails here instead of eating the machine's memory.)"""
    began = time.monotonic()
    plan = StepPlan.staircase(4, 4, 4_000_000, warmup_s=1, min_duration_s=1, min_requests=1, max_duration_s=2)
    assert sys.getsizeof(plan.levels) < 1000 and time.monotonic() - began < 0.05  # a tuple would be 8 MB
    assert plan.levels[0] == 4 and plan.level(999_999) == 4_000_000 and plan.level(10**6) is None
    assert level_count(4, 4, 1e20) > 10**19  # counted, never listed
    rates = StepPlan.staircase(0.1, 0.1, 0.5, warmup_s=1, min_duration_s=1, min_requests=1, max_duration_s=2)
    assert list(rates.levels) == [0.1, 0.2, 0.3, 0.4, 0.5] and rates.level(5) is None and rates.level(-1) is None
    assert rates.levels == (0.1, 0.2, 0.3, 0.4, 0.5) and rates.levels[-1] == 0.5 and rates.levels[1:3] == [0.2, 0.3]


@pytest.mark.integration
def test_plain_locust_refuses_a_bad_host(tmp_path):
    """``locust -f locustfile.py --host http://``: kneecap's init checks the host as the scenario's, exit 2."""
    locustfile = pathlib.Path(__file__).resolve().parent.parent / "locustfile.py"
    proc = subprocess.run([sys.executable, "-m", "locust", "-f", str(locustfile), "--headless", "-u", "1", "-t", "2s",
                           "--host", "http://"], capture_output=True, text=True, timeout=30, cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "--host: 1 problem" in out and "expected a host name" in out, out
    assert "Traceback" not in out
