"""``kneecap run`` owns its processes: SIGTERM ends it like Ctrl-C, SIGKILL takes the whole run down within 5 s,
and no request reaches the target after that (the simulator's own trace says when each one arrived)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import psutil
import pytest

from harness.run import LOCUSTFILE, SHAPEFILE
from tests.kit.run import start_kneecap_run
from tests.kit.scenarios import STAIRS, scenario
from tests.kit.sim import start_sim

pytestmark = pytest.mark.integration
LONG = STAIRS.replace("max_duration_s: 5", "max_duration_s: 60").replace("min_requests: 60", "min_requests: 100000")


def _start_run(tmp_path, host: str) -> tuple[subprocess.Popen, list[psutil.Process]]:
    """A run at its first step (its progress line seen), and every process under it."""
    proc = start_kneecap_run(scenario(tmp_path, LONG), workers=2, host=host, out=tmp_path / "out")
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("step 0 |"):  # the first progress line: load is on
            break
    else:
        raise AssertionError("".join(seen))
    children = psutil.Process(proc.pid).children(recursive=True)
    assert len(children) >= 3, children  # master + 2 workers
    return proc, children


def _all_gone(procs: list[psutil.Process], within_s: float) -> list[psutil.Process]:
    _, alive = psutil.wait_procs(procs, timeout=within_s)
    for p in alive:
        p.kill()
    return alive


def test_sigkill_takes_the_whole_run_down_and_the_load_stops(tmp_path):
    trace = tmp_path / "trace.jsonl"
    with start_sim("--preset", "tiny", "--trace-file", str(trace)) as sim:
        proc, children = _start_run(tmp_path, sim.url)
        proc.kill()
        killed = time.time()
        proc.wait()
        assert _all_gone(children, 5.0) == []
    arrivals = [json.loads(line)["arrival_wall"] for line in trace.read_text().splitlines()]
    assert arrivals and max(arrivals) < killed + 1.0, max(arrivals) - killed


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_end_the_run_like_ctrl_c(tmp_path, sig):
    with start_sim("--preset", "tiny") as sim:
        proc, children = _start_run(tmp_path, sim.url)
        proc.send_signal(sig)
        output, _ = proc.communicate(timeout=60)
        assert _all_gone(children, 5.0) == []
    out = tmp_path / "out"
    summary = json.loads((out / "summary.json").read_text())
    assert "interrupted" in output and summary["stop_reason"] == "interrupted" and summary["steps"][0]["requests"] > 0
    assert (out / "report.html").is_file() and "knee:" in output and "Traceback" not in output
    assert {p.name for p in out.glob("*.log")} >= {"master.log", "worker-0.log", "worker-1.log"}


def test_a_second_interrupt_stops_at_once(tmp_path):
    with start_sim("--preset", "tiny") as sim:
        proc, children = _start_run(tmp_path, sim.url)
        proc.send_signal(signal.SIGINT)
        for line in proc.stdout:
            if line.startswith("interrupted: stopping the run"):
                break
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=20)
        assert _all_gone(children, 5.0) == []
    assert "interrupted again: stopping now" in output and "Traceback" not in output


def test_a_master_still_waiting_for_its_workers_ends_on_sigterm(tmp_path):
    """Locust's wait for ``--expect-workers`` looks at no signal: a master whose ``kneecap run`` was SIGKILLed before
    its workers connected (its parent-death SIGTERM) waited forever, an orphan (a CI run of 2026-12-07 left three)."""
    from tests.kit.procs import free_port

    master = subprocess.Popen([sys.executable, "-m", "locust", "-f", f"{LOCUSTFILE},{SHAPEFILE}", "--headless",
                               "--master", "--expect-workers", "1", "--master-bind-host", "127.0.0.1",
                               "--master-bind-port", str(free_port()), "--host", "http://127.0.0.1:9",
                               "--results-dir", str(tmp_path / "out")], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        for line in master.stdout:  # type: ignore[union-attr]
            if "Waiting for workers to be ready" in line:
                break
        master.send_signal(signal.SIGTERM)
        output, _ = master.communicate(timeout=10)
    finally:
        master.kill()
    assert master.returncode == 4 and "SIGTERM before the run began (0 workers connected)" in output, output
