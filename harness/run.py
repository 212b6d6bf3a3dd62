"""``kneecap run``: a headless Locust master and N local workers running a scenario's plan, then the verdict.

Processes: the built-in simulator (only when no host is given anywhere), one Locust master with the
knee-seeking shape, N workers, all owned by this process (``procs.py``: their own sessions, dead with it,
output in RESULTS/NAME.log). Ctrl-C, SIGTERM and SIGHUP reach only this process, which asks the master
to stop (SIGTERM: it ends the plan) and so still gets a valid, partial summary. The same files come out
of a plain ``locust --master``/``--worker`` run (README); ``processes.json`` (each process's CPU, the
client's cost per streamed token, ``analysis/cost.py``) only from ``kneecap run``, which reaps them.
"""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from harness import exitcodes
from harness.analysis.cost import RoleCpu, cost_line, processes_block, step_totals
from harness.procs import Child, LogRelay, start_child, stop_child
from harness.scenario import Scenario, default_scenario, load_scenario
from harness.sim.presets import DEFAULT_PRESET, PRESETS

__all__ = ["RunOptions", "run"]

HERE = os.path.dirname(os.path.abspath(__file__))
LOCUSTFILE = os.path.join(HERE, "load", "locustfile.py")
SHAPEFILE = os.path.join(HERE, "load", "shape_file.py")
_ENDING_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
GRACE_S = 60.0
"""How long the master may take to end the plan and write its partial summary after an interrupt."""
_LOG_PREFIX = re.compile(r"^\[[^]]+\] [^/]+/\w+/kneecap: (kneecap: )?")


@dataclass
class RunOptions:
    scenario: str | None
    host: str | None = None
    workers: int = max(1, os.cpu_count() or 1)
    out: str | None = None
    save_requests: bool = False
    insecure: bool = False
    """Accept any TLS certificate (Locust's --insecure, on the master; workers get it at test start)."""
    seed: int | None = None
    sim_args: tuple[str, ...] = ()
    influx_args: tuple[str, ...] = ()
    """Locust options for the InfluxDB sink (--influx-url URL, --influx-org ...), passed to the master."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_sim(model: str, extra: tuple[str, ...], out: str, say: Callable[[str], None]) -> tuple[Child, str]:
    preset = model[4:] if model.startswith("sim-") and model[4:] in PRESETS else DEFAULT_PRESET
    cmd = [sys.executable, "-m", "harness.cli", "sim", "--port", "0", "--preset", preset, "--model", model, *extra]
    sim = start_child("sim", cmd, os.path.join(out, "sim.log"), stdout=subprocess.PIPE, text=True)
    line = sim.proc.stdout.readline() if sim.proc.stdout else ""
    m = re.search(r"(http://[\d.]+:\d+)", line)
    if not m:
        stop_child(sim)
        raise RuntimeError(f"the built-in simulator did not start: {line.strip()!r} (see {out}/sim.log)")
    say(f"no host given: started the built-in simulator (preset {preset}) at {m.group(1)}")
    return sim, m.group(1)


def run(opts: RunOptions, say: Callable[[str], None] = print) -> int:
    """Run the plan; returns the exit code (``harness.exitcodes``): the summary's, or NO_VALID_RESULT without one.

    Ctrl-C, SIGTERM and SIGHUP end the plan the same way: the master writes a partial summary, then the
    verdict and the report follow. The children die with this process even when it is SIGKILLed (procs.py)."""
    overrides = {"workload.seed": opts.seed} if opts.seed is not None else {}
    sc: Scenario = load_scenario(opts.scenario, overrides) if opts.scenario else default_scenario(overrides)
    run_id = time.strftime("%Y%m%d-%H%M%S")
    out = opts.out or os.path.join(sc.results_dir, f"{sc.name}-{run_id}")
    os.makedirs(out, exist_ok=True)
    sim = master = None
    workers: list[Child] = []
    relay: LogRelay | None = None
    interrupted = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: interrupted.set()) for sig in _ENDING_SIGNALS}
    try:
        host = opts.host or sc.endpoint.host
        if host is None:
            sim, host = _start_sim(sc.endpoint.model, opts.sim_args, out, say)
        port = _free_port()
        common = ["--host", host, "--run-id", run_id, "--results-dir", out]
        if opts.scenario:
            common += ["--scenario", opts.scenario]
        if overrides:
            common += ["--overrides", json.dumps(overrides)]
        if opts.save_requests:
            common += ["--save-requests", os.path.join(out, "requests.jsonl")]
        if opts.insecure:
            common += ["--insecure"]
        common += list(opts.influx_args)
        say(f"kneecap run {run_id}: scenario {sc.name}, {sc.load.mode} plan, {opts.workers} workers -> {host}")
        master = start_child("master", [sys.executable, "-m", "locust", "-f", f"{LOCUSTFILE},{SHAPEFILE}", "--headless",
                                        "--master", "--expect-workers", str(opts.workers), "--master-bind-host",
                                        "127.0.0.1", "--master-bind-port", str(port), "--only-summary", "--loglevel",
                                        "INFO", *common], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        workers = [start_child(f"worker-{i}", [sys.executable, "-m", "locust", "-f", LOCUSTFILE, "--worker",
                                               "--master-host", "127.0.0.1", "--master-port", str(port), "--loglevel",
                                               "WARNING"], os.path.join(out, f"worker-{i}.log"))
                   for i in range(opts.workers)]
        relay = LogRelay(workers, say).start()
        master_relay = threading.Thread(target=_relay, args=(master.proc, os.path.join(out, "master.log"), say),
                                        daemon=True)
        master_relay.start()
        asked = None  # when the master was asked to end the plan
        while master.poll() is None:
            if interrupted.is_set():
                interrupted.clear()
                if asked is None:
                    say("interrupted: stopping the run, writing partial results (interrupt again to stop at once)")
                    master.proc.send_signal(signal.SIGTERM)
                    asked = time.monotonic()
                else:
                    say("interrupted again: stopping now, without results")
                    master.proc.kill()
            elif asked is not None and time.monotonic() - asked > GRACE_S:
                say(f"the master did not finish within {GRACE_S:g} s: stopping it")
                master.proc.kill()
            time.sleep(0.2)
        master_relay.join(timeout=5)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        stop_child(master)
        for w in workers:
            stop_child(w)
        stop_child(sim)
        if relay is not None:
            relay.stop()
    report_cpu: list[float] = []
    code = _verdict(out, say, report_cpu)
    _processes(out, [c for c in (master, *workers, sim) if c is not None], report_cpu, say)
    return code


def _thread_cpu() -> tuple[float, float]:
    """This thread's user and system CPU seconds (the whole process's off Linux)."""
    ru = resource.getrusage(getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF))
    return ru.ru_utime, ru.ru_stime


def _processes(out: str, children: list[Child], report_cpu: list[float], say: Callable[[str], None]) -> None:
    """Write OUT/processes.json (CPU per role, the client's µs per streamed token) and say its line."""
    from harness.sinks.files import write_json_atomic

    me = resource.getrusage(resource.RUSAGE_SELF)
    rep_user, rep_sys = report_cpu if report_cpu else (0.0, 0.0)
    roles = [RoleCpu(role="parent", user_s=me.ru_utime - rep_user, sys_s=me.ru_stime - rep_sys,
                     max_rss_mb=round(me.ru_maxrss / 1024, 1))]
    roles += [RoleCpu(role=c.name, user_s=c.rusage.ru_utime, sys_s=c.rusage.ru_stime,
                      max_rss_mb=round(c.rusage.ru_maxrss / 1024, 1)) for c in children if c.rusage is not None]
    if report_cpu:
        roles.append(RoleCpu(role="report", user_s=rep_user, sys_s=rep_sys))
    try:
        with open(os.path.join(out, "summary.json"), encoding="utf-8") as f:
            steps = json.load(f).get("steps") or []
    except (OSError, ValueError, AttributeError):
        steps = []
    tokens, in_steps = step_totals(steps)
    block = processes_block(roles, output_tokens=tokens, workers_cpu_in_steps=in_steps)
    try:
        write_json_atomic(os.path.join(out, "processes.json"), block)
    except OSError as exc:
        say(f"processes.json not written: {exc}")
    say(cost_line(block))


def _relay(master: subprocess.Popen, log_path: str, say: Callable[[str], None]) -> None:
    """Pass the master's kneecap progress lines and any error on (Locust's tables only go to master.log)."""
    assert master.stdout is not None
    with open(log_path, "a", encoding="utf-8") as log:
        for line in master.stdout:
            log.write(line)
            log.flush()
            line = line.rstrip()
            if "/kneecap:" in line:
                say(_LOG_PREFIX.sub("", line))
            elif "ERROR" in line or "Traceback" in line or "CRITICAL" in line:
                say(line)


def _verdict(out: str, say: Callable[[str], None], report_cpu: list[float] | None = None) -> int:
    """The run's last lines from its summary, and the report; ``report_cpu`` gets the report build's user and
    system CPU seconds."""
    path = os.path.join(out, "summary.json")
    try:
        with open(path, encoding="utf-8") as f:
            summary = json.load(f)
    except (OSError, ValueError):
        say(f"no valid summary was written ({path}); see the messages above")
        return exitcodes.NO_VALID_RESULT
    knee = summary.get("knee", {})
    if knee.get("found"):
        level = f"{knee['users']:g} users" if "users" in knee else f"{knee['rate_rps']:g} req/s"
        say(f"knee: {level} ({knee['confidence']} confidence) - {knee['reason']}")
    else:
        say(f"knee: not found ({knee.get('reason', '')})")
    events = summary.get("fleet_events") or []
    if events:
        lost = [e for e in events if e.get("kind") == "lost"]
        steps = sorted({i for e in events for i in e.get("steps", ())})
        say(("DEGRADED: " if lost else "fleet: ") + f"{len(lost)} worker(s) lost, {len(events) - len(lost)} joined; "
            f"steps {', '.join(map(str, steps)) or 'none'} not judged (their levels were re-run)")
    slo = summary.get("slo", {})
    if slo.get("thresholds"):
        verdict = "PASSED" if slo.get("passed") else "FAILED"
        say(f"SLO {verdict} up to the knee; largest load within SLO: {slo.get('max_load_within_slo')}")
    cost = summary.get("cost") or {}
    if cost.get("line"):  # the master logged it mid-output; the verdict's lines are where a user looks
        say(cost["line"])
    t0 = _thread_cpu()
    try:
        from harness.report.html import write_report  # here: its imports count as the report's cost

        say(f"results: {path}, report: {write_report(out)}")
    except Exception as exc:  # the summary is the result: a report failure must not hide it or the exit code
        say(f"results: {path} (report not written: {type(exc).__name__}: {exc}; try: kneecap report {out})")
    if report_cpu is not None:
        t1 = _thread_cpu()
        report_cpu[:] = [t1[0] - t0[0], t1[1] - t0[1]]
    return int(summary.get("exit_code", exitcodes.NO_VALID_RESULT))
