"""The web UI can start and stop load and has no login: kneecap refuses to open it beyond loopback unless told
(``--web-login`` with Locust's authentication set up, or ``--web-insecure``). Real ``locust`` processes."""

from __future__ import annotations

import socket
import subprocess
import time

import pytest

from harness import exitcodes
from harness.load.options import web_bind_problem
from tests.kit.fleet import LOCUST
from tests.kit.procs import free_port


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "[::1]", "localhost", "127.0.0.2"])
def test_loopback_needs_nothing(host):
    assert web_bind_problem(host, web_login=False, web_insecure=False) is None


@pytest.mark.parametrize("host", ["0.0.0.0", "*", "", None, "::", "10.1.2.3", "ui.example.com"])
def test_beyond_loopback_needs_a_login_or_a_word(host):
    problem = web_bind_problem(host, web_login=False, web_insecure=False)
    assert problem is not None and "--web-insecure" in problem and "--web-login" in problem, problem
    assert web_bind_problem(host, web_login=True, web_insecure=False) is None
    assert web_bind_problem(host, web_login=False, web_insecure=True) is None


@pytest.mark.integration
def test_locust_refuses_every_interface_without_a_login_and_listens_when_told(tmp_path):
    port = free_port()
    refused = subprocess.run([*LOCUST, "--web-host", "0.0.0.0", "--web-port", str(port)], cwd=tmp_path,
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == exitcodes.USAGE, refused.stderr
    assert "--web-host 0.0.0.0: the web UI would listen on every interface without a login" in refused.stderr
    assert "Traceback" not in refused.stderr, refused.stderr
    told = subprocess.Popen([*LOCUST, "--web-host", "0.0.0.0", "--web-port", str(port), "--web-insecure"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for line in told.stdout:  # type: ignore[union-attr]
            if "Starting web interface" in line:
                break
        else:
            raise AssertionError("locust --web-insecure did not start its web UI")
        deadline = time.monotonic() + 10  # Locust says "Starting web interface" just before it binds
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except ConnectionRefusedError:
                assert time.monotonic() < deadline and told.poll() is None, "the web UI never listened"
                time.sleep(0.05)
    finally:
        told.terminate()
        told.wait(timeout=30)
