"""A master that dies mid-run (SIGKILL): ``kneecap run`` keeps the steps judged so far (its last checkpoint) as an
incomplete summary and exits 7; a worker started on its own stops its load and exits 7 within 10 s, which the
simulator's own trace confirms (no request arrives after it)."""

from __future__ import annotations

import json
import pathlib
import signal
import subprocess
import time

import psutil
import pytest

from harness import exitcodes
from tests.kit.fleet import LOCUST, SHAPE
from tests.kit.procs import free_port
from tests.kit.run import KNEECAP, start_kneecap_run
from tests.kit.scenarios import STAIRS, scenario
from tests.kit.sim import start_sim

pytestmark = pytest.mark.integration
LONG = STAIRS.replace("max: 16", "max: 64")  # more levels than the test waits for


def _complete_steps(path: pathlib.Path, at_least: int, within_s: float) -> int:
    """Wait until the checkpoint holds ``at_least`` complete steps; how many it holds."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            steps = [s for s in json.loads(path.read_text())["steps"] if s["complete"]]
        except (OSError, ValueError):  # not yet written
            steps = []
        if len(steps) >= at_least:
            return len(steps)
        time.sleep(0.2)
    raise AssertionError(f"{path}: fewer than {at_least} complete steps after {within_s} s")


def _master_of(proc: subprocess.Popen) -> psutil.Process:
    kids = psutil.Process(proc.pid).children(recursive=True)
    return next(p for p in kids if "--master" in p.cmdline())


def test_a_run_whose_master_is_killed_keeps_the_steps_judged_so_far(tmp_path):
    out = tmp_path / "out"
    with start_sim("--preset", "tiny") as sim:
        proc = start_kneecap_run(scenario(tmp_path, LONG), workers=2, host=sim.url, out=out)
        try:
            judged = _complete_steps(out / "checkpoint.json", 1, within_s=60)
            everyone = psutil.Process(proc.pid).children(recursive=True)
            _master_of(proc).kill()
            output, _ = proc.communicate(timeout=60)
        finally:
            proc.kill()
        assert proc.returncode == exitcodes.MASTER_LOST, output
        _, alive = psutil.wait_procs(everyone, timeout=5)
        assert alive == [], alive  # the workers went with the run
    summary = json.loads((out / "summary.json").read_text())
    assert summary["exit_code"] == exitcodes.MASTER_LOST
    assert "the master was lost (killed by SIGKILL)" in summary["incomplete"], summary["incomplete"]
    assert sum(s["complete"] for s in summary["steps"]) >= judged
    assert not (out / "checkpoint.json").exists()
    assert "MASTER LOST: the master was lost (killed by SIGKILL)" in output, output
    report = subprocess.run([*KNEECAP, "report", str(out)], capture_output=True, text=True, timeout=60)
    assert report.returncode == 0, report.stderr
    assert "INCOMPLETE: the master was lost" in (out / "report.html").read_text()


def test_a_worker_whose_master_died_stops_its_load_within_10_s(tmp_path):
    results, port, trace = tmp_path / "out", free_port(), tmp_path / "trace.jsonl"
    with start_sim("--preset", "tiny", "--trace-file", str(trace)) as sim:
        master = subprocess.Popen(
            [*LOCUST[:-1], f"{LOCUST[-1]},{SHAPE}", "--headless", "--master", "--expect-workers", "1",
             "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port), "--scenario",
             str(scenario(tmp_path, LONG)), "--host", sim.url, "--results-dir", str(results)],
            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        worker = subprocess.Popen([*LOCUST, "--worker", "--master-host", "127.0.0.1", "--master-port", str(port)],
                                  cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            _complete_steps(results / "checkpoint.json", 1, within_s=60)
            master.send_signal(signal.SIGKILL)
            killed = time.time()
            output, _ = worker.communicate(timeout=20)
            stopped = time.time()
        finally:
            for p in (master, worker):
                p.kill()
                p.wait()
    assert worker.returncode == exitcodes.MASTER_LOST, output
    assert stopped - killed < 10.0, (stopped - killed, output)
    assert "lost the master" in output and "refuses connections" in output, output
    arrivals = [json.loads(line)["arrival_wall"] for line in trace.read_text().splitlines()]
    assert killed - 1.0 < max(arrivals) < killed + 10.0, max(arrivals) - killed  # on until the kill, off within 10 s
