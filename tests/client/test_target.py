"""The target a process's requests go to, resolved once (client/target.py): which host wins, what --insecure
overrides, where the key and headers come from."""

from __future__ import annotations

import dataclasses

from harness.checker import Checker
from harness.client.target import Target
from harness.endpoint import DEFAULT_HOST, Tls, parse_endpoint


def endpoint(**node):
    check = Checker()
    ep = parse_endpoint({"api": "chat", "model": "m", **node}, check)
    assert not check.problems, check.problems
    return ep


def test_host_flag_then_the_scenarios_host_then_the_default():
    ep = endpoint(host="https://llm.example:8443")
    assert Target.of(ep, "http://127.0.0.1:9000", insecure=False).base == "http://127.0.0.1:9000"
    assert Target.of(ep, None, insecure=False).base == "https://llm.example:8443"
    assert Target.of(endpoint(), None, insecure=False).base == DEFAULT_HOST
    assert Target.of(ep, None, insecure=False).https and not Target.of(endpoint(), None, insecure=False).https


def test_insecure_overrides_the_endpoints_verify_and_keeps_its_ca_file():
    ep = dataclasses.replace(endpoint(host="https://llm.example"), tls=Tls(ca_file="/etc/private-ca.pem"))
    strict, loose = Target.of(ep, None, insecure=False), Target.of(ep, None, insecure=True)
    assert (strict.verify, strict.ca_file) == (True, "/etc/private-ca.pem") and loose.verify is False
    assert loose.tls().verify_mode.name == "CERT_NONE"  # a context that checks nothing loads no CA file


def test_key_and_headers_from_the_environment():
    ep = endpoint(api_key_env="LLM_KEY", headers={"x-team": "a", "x-secret": {"env": "TEAM_SECRET"},
                                                  "x-gone": {"env": "UNSET_VAR"}})
    t = Target.of(ep, None, insecure=False, environ={"LLM_KEY": "k1", "TEAM_SECRET": "s"})
    assert t.api_key == "k1" and dict(t.headers) == {"x-team": "a", "x-secret": "s"}
    assert t.auth_headers() == {"x-team": "a", "x-secret": "s", "Authorization": "Bearer k1"}
    bare = Target.of(ep, None, insecure=False, environ={})
    assert bare.api_key is None and bare.auth_headers() == {"x-team": "a"}


def test_a_connection_to_the_base_with_its_tls_settings():
    conn = Target.of(endpoint(host="https://llm.example/v2", tls={"verify": False}), None, insecure=False).connection()
    assert (conn.tls, conn.host, conn.verify, conn.base_path) == (True, "llm.example", False, "/v2")
