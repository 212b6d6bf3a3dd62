"""``kneecap worker``: it becomes plain ``locust --worker`` (exec, no parent left), and refuses bad input with exit 2.

The real thing joins a master across namespaces in ``tests/load/test_multihost.py``; here its command line."""

from __future__ import annotations

import os
import sys

import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.run import LOCUSTFILE


class Exec(Exception):
    """Raised instead of replacing the test process."""


@pytest.fixture
def execs(monkeypatch):
    calls: list[list[str]] = []

    def fake(path: str, argv: list[str]) -> None:
        calls.append([path, *argv])
        raise Exec

    monkeypatch.setattr(os, "execv", fake)
    return calls


def test_it_execs_locust_worker_with_kneecaps_locustfile(execs):
    r = CliRunner().invoke(main, ["worker", "--master", "10.1.2.3", "--master-port", "6000", "--processes", "4"])
    assert isinstance(r.exception, Exec), r.output
    assert execs == [[sys.executable, sys.executable, "-m", "locust", "-f", LOCUSTFILE, "--worker", "--master-host",
                      "10.1.2.3", "--master-port", "6000", "--processes", "4"]]


def test_a_locustfile_of_ones_own(execs, tmp_path):
    mine = tmp_path / "mine.py"
    mine.write_text("")
    r = CliRunner().invoke(main, ["worker", "--master", "master.internal", "-f", str(mine)])
    assert isinstance(r.exception, Exec), r.output
    assert execs[0][5] == str(mine) and execs[0][-1] == "5557"


@pytest.mark.parametrize("args, says", [
    ([], "Missing option '--master'"),
    (["--master", "http://10.0.0.5:5557"], "host name or IP address"),
    (["--master", ""], "host name or IP address"),
    (["--master", "m", "--master-port", "70000"], "70000 is not in the range"),
    (["--master", "m", "-f", "/nonexistent/locustfile.py"], "does not exist"),
])
def test_bad_input_is_a_usage_error(execs, args, says):
    r = CliRunner().invoke(main, ["worker", *args])
    assert r.exit_code == 2 and says in r.output and not execs, r.output
