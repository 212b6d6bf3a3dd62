"""No secret in any file kneecap writes: one run with an API key, a secret gateway header and an InfluxDB token
set, every request saved, the report built; then every byte of every file of the run, the run store's index and
what reached the database is searched for each secret (plain, and as the base64 of ``user:secret`` a Basic
header would carry). The secrets are first shown to have been used (the target and the database received them),
so the search cannot pass for want of them."""

from __future__ import annotations

import base64
import pathlib
import textwrap

import pytest

from tests.kit.run import kneecap_run, write_scenario
from tests.kit.servers import CannedServer, sse_reply
from tests.sinks.test_slow_influx import slow_db

pytestmark = pytest.mark.integration
SECRETS = {"KNEECAP_TEST_API_KEY": "sk-kneecap-test-4f1c9e2a", "KNEECAP_TEST_GATEWAY": "gw-kneecap-test-7d3b0a61",
           "KNEECAP_TEST_INFLUX": "influx-kneecap-test-90e2c5f4"}


def _forms(secret: str) -> list[bytes]:
    return [secret.encode(), base64.b64encode(f"user:{secret}".encode()), base64.b64encode(secret.encode())]


def test_no_file_of_a_run_holds_its_key_headers_or_database_token(tmp_path):
    with CannedServer(sse_reply()) as target, slow_db() as db:
        db.first = -1e9  # every write answered at once
        path = write_scenario(tmp_path, textwrap.dedent(f"""
            name: secrets
            endpoint:
              host: "{target.url}"
              api: chat
              model: m
              metrics: "off"
              api_key_env: KNEECAP_TEST_API_KEY
              headers: {{X-Gateway-Key: {{env: KNEECAP_TEST_GATEWAY}}}}
            workload: {{input_tokens: 20, output_tokens: 3}}
            load: {{mode: constant, users: 2, duration_s: 3, step: {{warmup_s: 0.5}}}}
            sinks:
              results_dir: "{tmp_path}"
              influxdb: {{url: "http://127.0.0.1:{db.server_address[1]}", token_env: KNEECAP_TEST_INFLUX,
                          org: o, bucket: b, window_s: 1}}
        """))
        r = kneecap_run(path, "--save-requests", out=tmp_path / "out", workers=2, env=SECRETS, report=True)
        heads = b"\n".join(head for head, _ in target.received)
        assert db.phase() == "fast"
    assert r.code == 0, r.output
    assert f"Bearer {SECRETS['KNEECAP_TEST_API_KEY']}".encode() in heads  # the key and the header were sent...
    assert SECRETS["KNEECAP_TEST_GATEWAY"].encode() in heads
    assert db.tokens == {f"Token {SECRETS['KNEECAP_TEST_INFLUX']}"}, db.tokens  # ...and the token used
    files = [p for p in tmp_path.rglob("*") if p.is_file()]  # the scenario too: it names the variables only
    names = {p.name for p in files}
    assert {"summary.json", "requests.jsonl", "report.html", "processes.json", "master.log", "index.jsonl",
            "run.json"} <= names, names
    found = [(str(p.relative_to(tmp_path)), name) for p in files for name, secret in SECRETS.items()
             for form in _forms(secret) if form in pathlib.Path(p).read_bytes()]
    found += [("the database", name) for name, secret in SECRETS.items() for form in _forms(secret)
              if form.decode() in "\n".join(db.lines)]
    found += [("the console", name) for name, secret in SECRETS.items() if secret in r.output]
    assert found == [], found
