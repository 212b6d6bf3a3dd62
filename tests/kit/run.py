"""``kneecap run`` as the tests start it: one command line, one default timeout, one way to read what it wrote.

    path = write_scenario(tmp_path, '''
        name: t
        workload: {input_tokens: 100, output_tokens: 20}
    ''')
    r = kneecap_run(path, "--save-requests", out=tmp_path / "out", sim_args=["--max-num-seqs=8"])
    assert r.code == 0, r.output
    r.summary["knee"], r.records[0]["ok"]

``start_kneecap_run`` is the same command as a running process, for the tests that signal it, take its database
down under it, or read its output as it comes.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

__all__ = ["DEFAULT_TIMEOUT_S", "KNEECAP", "ROOT", "RunResult", "kneecap_run", "start_kneecap_run",
           "write_scenario"]

KNEECAP = [sys.executable, "-m", "harness.cli"]
"""The CLI as the tests start it: this interpreter (the venv's), the package from the checkout."""
ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
"""The repository's root: every run starts there, wherever pytest was started."""
# 180 s: the longest any test allowed a run before the kit (test_apis_run, test_long_context; others had 90 or
# 120), so moving to the kit gives no run less time than it had. Under pytest, pyproject's per-test timeout
# (120 s) ends a hung test first; this bound is for when that is off (--timeout=0, a debugger): a hung run still
# ends, killed, with an assertion that shows its output. A test that means a shorter bound (a refusal must be
# quick) passes its own.
DEFAULT_TIMEOUT_S = 180.0
LANE_LAG_MS = 40.0
"""``load.step.max_lag_ms`` of the runs tests start (``--set``), unless a test asks for the scenario's own: three
lanes of real processes share two cores (README), and a step's loop lag there passed 10 ms in ~2 of ~90 runs of a
fresh-clone CI run (22 ms once), unjudging steps of tests about something else. Tests about the generator's own
timing run alone (marked ``timing``) and pass ``lag_limit_ms=None``."""


def write_scenario(tmp_path: pathlib.Path, text: str, name: str = "s.yaml") -> pathlib.Path:
    """``text`` dedented into ``tmp_path/name``; its path."""
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


@dataclass
class RunResult:
    """A finished ``kneecap run``: its exit code, what it wrote to stdout and stderr, and its results folder."""

    code: int
    stdout: str
    stderr: str
    out: pathlib.Path | None

    @property
    def output(self) -> str:
        """Its console: stdout then stderr."""
        return self.stdout + self.stderr

    def _file(self, name: str) -> pathlib.Path:
        assert self.out is not None, f"the run was given no --out; its output:\n{self.output}"
        path = self.out / name
        assert path.is_file(), f"the run wrote no {path} (exit {self.code}); its output:\n{self.output}"
        return path

    @cached_property
    def summary(self) -> dict:
        """``summary.json``, parsed."""
        return json.loads(self._file("summary.json").read_text())

    @cached_property
    def records(self) -> list[dict]:
        """``requests.jsonl`` (the run was given ``--save-requests``), one dict per request."""
        return [json.loads(line) for line in self._file("requests.jsonl").read_text().splitlines()]


def _command(scenario: str | os.PathLike | None, args: Sequence[str], *, out: pathlib.Path | None,
             workers: int | None, host: str | None, sim_args: Sequence[str], prefix: Sequence[str] = (),
             lag_limit_ms: float | None = LANE_LAG_MS, report: bool = True) -> list[str]:
    return [*prefix, *KNEECAP, "run", *([] if report else ["--no-report"]),
            *(["--set", f"load.step.max_lag_ms={lag_limit_ms:g}"] if lag_limit_ms is not None else []),
            *([str(scenario)] if scenario is not None else []),
            *(["--host", host] if host is not None else []),
            *(["--workers", str(workers)] if workers is not None else []),
            *(["--out", str(out)] if out is not None else []),
            *args, *(f"--sim-arg={a}" for a in sim_args)]


def _env(env: Mapping[str, str] | None) -> dict[str, str] | None:
    return None if env is None else {**os.environ, **env}


def kneecap_run(scenario: str | os.PathLike | None, *args: str, out: pathlib.Path | None, workers: int | None = 1,
                host: str | None = None, sim_args: Sequence[str] = (), timeout: float = DEFAULT_TIMEOUT_S,
                env: Mapping[str, str] | None = None, prefix: Sequence[str] = (),
                lag_limit_ms: float | None = LANE_LAG_MS, report: bool = False) -> RunResult:
    """``kneecap run SCENARIO [--host HOST] [--workers N] [--out OUT] ARGS... [--sim-arg=A]...`` to its end.

    ``None`` leaves a part out (no scenario, no ``--workers``, no ``--out``: the command as a user might mistype
    it). ``env``: variables set on top of this process's environment; ``prefix``: a command to run it under
    (``taskset -c 1``); ``lag_limit_ms``: ``LANE_LAG_MS``, or None for the scenario's own; ``report``: build
    report.html (``--no-report`` otherwise: ~1-2 s of CPU a run that most tests do not read). Past ``timeout`` the
    run is killed and the test fails with what it had written so far."""
    cmd = _command(scenario, args, out=out, workers=workers, host=host, sim_args=sim_args, prefix=prefix,
                   lag_limit_ms=lag_limit_ms, report=report)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=_env(env))
    except subprocess.TimeoutExpired as exc:
        so_far = "".join(s if isinstance(s, str) else s.decode(errors="replace")
                         for s in (exc.stdout, exc.stderr) if s)
        raise AssertionError(f"kneecap run did not end within {timeout:g} s (killed): {cmd}\n{so_far}") from None
    return RunResult(proc.returncode, proc.stdout, proc.stderr, out)


def start_kneecap_run(scenario: str | os.PathLike | None, *args: str, out: pathlib.Path | None,
                      workers: int | None = 1, host: str | None = None, sim_args: Sequence[str] = (),
                      env: Mapping[str, str] | None = None) -> subprocess.Popen:
    """The same command, started: its stdout and stderr together on ``proc.stdout`` (text). The caller waits for
    it (``communicate(timeout=...)``) or stops it."""
    return subprocess.Popen(_command(scenario, args, out=out, workers=workers, host=host, sim_args=sim_args),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT, env=_env(env))
