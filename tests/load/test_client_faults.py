"""Hostile endpoints against real Locust processes: rate limits, a dead port, a bug in the request path, TLS.

The servers are threads of this test (``tests/kit/servers.py``), so requests are counted on the server's
side; Locust runs headless in its own process for a few seconds (``kneecap run`` for the TLS cases, which
also shows what the console says).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tests.kit.run import kneecap_run, write_scenario
from tests.kit.servers import RATE_LIMITED, USAGE_AS_STRINGS, CannedServer, closed_port, sse_reply, tls_server

pytestmark = pytest.mark.integration
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LOCUSTFILE = os.path.join(ROOT, "locustfile.py")
SMALL = {"endpoint.metrics": "off", "workload.input_tokens": 20, "workload.output_tokens": 3,
         "endpoint.timeouts": {"connect_s": 2, "ttft_s": 2, "idle_s": 2, "total_s": 5}}


def locust(tmp_path, host: str, *, users: int = 2, seconds: int = 4, overrides: dict | None = None,
           locustfile: str = LOCUSTFILE, args: tuple[str, ...] = ()) -> tuple[list[dict], str]:
    """A headless local Locust run; its saved request records and its output."""
    saved = tmp_path / "requests.jsonl"
    cmd = [sys.executable, "-m", "locust", "-f", locustfile, "--headless", "-u", str(users), "-r", "100", "-t",
           f"{seconds}s", "--host", host, "--save-requests", str(saved), "--results-dir", str(tmp_path),
           "--overrides", json.dumps({**SMALL, **(overrides or {})}), "--only-summary", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=ROOT)
    records = [json.loads(line) for line in saved.read_text().splitlines()] if saved.exists() else []
    return records, proc.stdout + proc.stderr


@pytest.mark.timing
def test_429_with_retry_after_makes_each_user_wait(tmp_path):
    """Issue 11: 2 users against 429 + Retry-After: 2 sent 2,735 requests in 3.5 s. Now one per second each."""
    with CannedServer(RATE_LIMITED) as srv:
        records, output = locust(tmp_path, srv.url)
    assert 2 * 2 <= srv.requests <= 2 * 6, (srv.requests, output[-2000:])  # 4 s: at 0, 1, 2, 3 (and 4) s
    # each user waits the second it was told between requests (a 429 closes its connection, so the server cannot
    # tell the users apart): no three requests within a second. A busy machine may start the users late (6
    # requests in a full-suite run), never send them sooner.
    times = srv.arrivals
    assert all(times[i + 2] - times[i] >= 0.98 for i in range(len(times) - 2)), (
        [round(t - times[0], 3) for t in times], output[-2000:])
    assert {r["error"] for r in records} == {"http_429"} and len(records) == srv.requests  # every one still counts
    assert {r["retry_after_s"] for r in records} == {1.0}
    assert "Traceback" not in output


@pytest.mark.timing  # Locust's -t 2s counts from its start: beside other tests the users' start ate it (0 records)
def test_a_long_retry_after_is_capped_and_does_not_hold_up_the_end(tmp_path):
    """Retry-After: 3600 waits 30 s at most, and a user waiting is stopped at once when the run ends (-t 2s)."""
    hour = RATE_LIMITED.replace(b"retry-after: 1", b"retry-after: 3600")
    with CannedServer(hour) as srv:
        t0 = time.monotonic()
        records, output = locust(tmp_path, srv.url, seconds=2)
        took = time.monotonic() - t0
    assert srv.requests == 2 and [r["retry_after_s"] for r in records] == [3600.0, 3600.0], output[-2000:]
    assert took < 10, took  # Locust's start and shutdown, not the wait


@pytest.mark.timing
def test_retry_after_ignore_goes_on_at_once(tmp_path):
    with CannedServer(RATE_LIMITED) as srv:
        _, output = locust(tmp_path, srv.url, seconds=2, overrides={"endpoint.retry_after": "ignore"})
    assert srv.requests > 100, output[-2000:]


@pytest.mark.timing
def test_a_closed_port_backs_off_to_a_few_requests_per_second(tmp_path):
    records, output = locust(tmp_path, f"http://127.0.0.1:{closed_port()}")
    # per user: attempts at 0, 0.05, 0.15, 0.35, 0.75, 1.55, 3.15 s (doubling from 50 ms, at most 2 s apart)
    assert 2 * 5 <= len(records) <= 2 * 9, (len(records), output[-2000:])
    assert {r["error"] for r in records} == {"connect_error"}
    assert "Connection refused" in records[0]["error_detail"] and "Traceback" not in output


@pytest.mark.timing
def test_usage_counts_as_strings_are_bad_responses_not_a_stuck_worker(tmp_path):
    """Issue 11: a TypeError in prompts.py on every request, the pipe filled, 0 requests. Now each is classified."""
    with CannedServer(USAGE_AS_STRINGS) as srv:
        records, output = locust(tmp_path, srv.url, seconds=2)
    assert srv.requests > 20 and srv.requests - 2 <= len(records) <= srv.requests, output[-2000:]  # 2 in flight
    assert {r["error"] for r in records} == {"bad_response"} and {r["prompt_tokens"] for r in records} == {None}
    assert records[0]["error_detail"].startswith("server chunk's usage.prompt_tokens is 'fifty', expected an integer")
    assert "Traceback" not in output


FLAKY = '''
import harness.load.locustfile  # noqa: F401 - kneecap's options and listeners
from harness.load import user


class FlakyUser(user.LLMUser):
    """Sampling raises at every 2nd request (ZeroDivisionError) and every 4th (KeyError): a bug in the request path."""

    def on_start(self):
        super().on_start()
        inner, calls = self.sampler, [0]

        class Flaky:
            def builder(self, class_index):
                return inner.builder(class_index)

            def next(self):
                calls[0] += 1
                if calls[0] % 4 == 2:
                    raise ZeroDivisionError("float division by zero")
                if calls[0] % 4 == 0:
                    raise KeyError("lengths")
                return inner.next()

        self.sampler = Flaky()
'''


@pytest.mark.timing
def test_an_exception_in_the_request_path_is_a_client_error_logged_once_per_type(tmp_path):
    locustfile = tmp_path / "flaky.py"
    locustfile.write_text(FLAKY)
    with CannedServer(sse_reply()) as srv:
        records, output = locust(tmp_path, srv.url, seconds=3, locustfile=str(locustfile))
    errors = [r for r in records if r["error"]]
    assert {r["error"] for r in errors} == {"client_error"} and len(errors) > 20, output[-3000:]
    details = {r["error_detail"] for r in errors}
    assert any(d.startswith("ZeroDivisionError: float division by zero") for d in details), details
    assert any(d.startswith("KeyError: 'lengths'") for d in details), details
    ok = [r for r in records if r["ok"]]
    # every request the server answered is a record, but for the 2 users' last ones, cut in flight by the stop
    assert len(ok) <= srv.requests <= len(ok) + 2 and len(ok) >= len(errors) - 2  # the users went on between failures
    logged = [line for line in output.splitlines() if "ERROR/kneecap" in line and "client_error:" in line]
    assert len(logged) == 2, output[-3000:]  # once per exception type, for both users, not once per request
    assert output.count("Traceback") == 2


SCENARIO = """
name: tls-test
endpoint: {{host: "{host}", api: chat, model: m, metrics: "off", timeouts: {{connect_s: 2, ttft_s: 2, idle_s: 2}}{tls}}}
workload: {{input_tokens: 20, output_tokens: 3}}
load: {load}
"""
CONSTANT = "{mode: constant, users: 2, duration_s: 3, step: {warmup_s: 0.5}}"
# long enough for a worker report (3 s) and a judged step, so the console has failures to show
STAIRS = "{users: {start: 2, step: 2, max: 4}, step: {warmup_s: 0.5, min_duration_s: 4, min_requests: 5}}"


def tls_scenario(tmp_path, host: str, tls: str = "", load: str = CONSTANT):
    return write_scenario(tmp_path, SCENARIO.format(host=host, tls=tls, load=load))


@pytest.fixture(scope="module")
def https(tmp_path_factory):
    with tls_server(tmp_path_factory.mktemp("tls")) as (srv, cert):
        yield srv, cert


def test_kneecap_run_against_a_self_signed_server_says_tls_error_and_how_to_fix_it(tmp_path, https):
    srv, _ = https
    r = kneecap_run(tls_scenario(tmp_path, srv.url, load=STAIRS), out=tmp_path / "out")
    code, summary, output = r.code, r.summary, r.output
    step = summary["steps"][0]
    assert set(step["failures"]) == {"tls_error"} and step["ok"] == 0, output
    sample = f"certificate verify failed: self-signed certificate (server 127.0.0.1:{srv.port})"
    assert f"tls_error 100%: {sample}" in output
    assert "endpoint.tls.ca_file" in output and "--insecure" in output  # the hint
    assert code == 4 and "Traceback" not in output


@pytest.mark.parametrize("how", ["--insecure", "ca_file"])
def test_kneecap_run_trusts_the_server_with_ca_file_or_insecure(tmp_path, https, how):
    srv, cert = https
    args, tls = (("--insecure",), "") if how == "--insecure" else ((), f", tls: {{ca_file: \"{cert}\"}}")
    r = kneecap_run(tls_scenario(tmp_path, srv.url, tls=tls), *args, out=tmp_path / "out")
    code, summary, output = r.code, r.summary, r.output
    step = summary["steps"][0]
    assert step["ok"] > 20 and not step["failures"], output
    # one 4 s step: a busy machine's loop lag may unjudge it (exit 4), and then the console says so
    assert (code == 0 if step["generator"]["reliable"] else "UNRELIABLE: step 0" in output), output[-2000:]
    assert "Traceback" not in output


_REFUSED = json.dumps({"error": {"message": "Unrecognized request argument supplied: continuous_usage_stats",
                                 "type": "invalid_request_error", "param": "stream_options.continuous_usage_stats"}}
                      ).encode()
REFUSES_USAGE = (b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%b"
                 % (len(_REFUSED), _REFUSED))


def test_an_endpoint_refusing_per_chunk_usage_is_asked_once_and_the_run_goes_on(tmp_path, monkeypatch):
    """Issue 13: continuous_usage auto asks for usage on every chunk; a server that refuses it (400 naming the
    field, as strict OpenAI-compatible gateways do) gets the request again without it, and no more asks. The
    endpoint's own headers (a value, a secret from the environment) go with every request."""
    def answer(n: int) -> bytes:
        _head, body = srv.received[n - 1]
        return REFUSES_USAGE if b"continuous_usage_stats" in body else sse_reply()

    monkeypatch.setenv("KNEECAP_TEST_GATEWAY", "s3cret")
    with CannedServer(answer) as srv:
        # 5 s: a lane's busy machine started the user late (one request in a 3 s run, in a fresh-clone CI run)
        records, output = locust(tmp_path, srv.url, users=1, seconds=5, overrides={
            "endpoint.headers": {"X-Team": "perf", "X-Gateway-Key": {"env": "KNEECAP_TEST_GATEWAY"}}})
    asked = [b"continuous_usage_stats" in body for _, body in srv.received]
    assert asked[0] and not any(asked[1:]) and len(asked) >= 3, (asked, output[-2000:])  # asked once, then never
    assert records and all(r["ok"] for r in records), output[-2000:]  # the refusal was not the endpoint failing
    assert "answered HTTP 400 to stream_options.continuous_usage_stats" in output
    heads = [head.decode().lower() for head, _ in srv.received]
    assert all("x-team: perf" in h and "x-gateway-key: s3cret" in h for h in heads)
