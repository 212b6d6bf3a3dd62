"""``kneecap run``: a headless Locust master and N local workers running a scenario's plan, then the verdict.

Processes: the built-in simulator (only when no host is given anywhere), one Locust master with the
knee-seeking shape, N workers, all owned by this process (``procs.py``: their own process groups, dead with it,
output in RESULTS/NAME.log). Ctrl-C, SIGTERM and SIGHUP reach only this process, which asks the master
to stop (SIGTERM: it ends the plan) and so still gets a valid, partial summary. The same files come out
of a plain ``locust --master``/``--worker`` run (README); ``processes.json`` (each process's CPU, the
client's cost per streamed token, ``analysis/cost/client_cpu.py``) only from ``kneecap run``, which reaps them; and so
is the run's line in the run store (``run_store.py``: RESULTS/index.jsonl, and the run folder's run.json).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.load.options import KneecapOptions
from harness.outcome import keep_checkpoint, say_verdict, write_processes
from harness.procs import Child, LogRelay, free_port, start_child, stop_child
from harness.run_store import record_run, scenario_hash
from harness.scenario import Scenario, default_scenario, load_scenario
from harness.sim.presets import DEFAULT_PRESET, PRESETS
from harness.supervise import Supervisor

__all__ = ["RunOptions", "run"]

WORKERS_WAIT_S = 60.0
"""How long the master waits for its local workers to connect (they do in 1-5 s, a loaded machine's included):
then it gives up, and the run ends without a result rather than waiting forever (see the workers' logs)."""
HERE = os.path.dirname(os.path.abspath(__file__))
LOCUSTFILE = os.path.join(HERE, "load", "locustfile.py")
SHAPEFILE = os.path.join(HERE, "load", "shape_file.py")


@dataclass
class RunOptions:
    scenario: str | None
    host: str | None = None
    workers: int | None = None
    """Local worker processes; None: as many as the plan needs, at most one per core (``LoadPlan.local_workers``)."""
    out: str | None = None
    save_requests: bool = False
    insecure: bool = False
    """Accept any TLS certificate (Locust's --insecure, on the master; workers get it at test start)."""
    seed: int | None = None
    sim_args: tuple[str, ...] = ()
    influx: dict[str, Any] | None = None
    """The InfluxDB sink's options for the master (``KneecapOptions`` fields: influx_url, influx_org, ...)."""
    overrides: dict[str, Any] = field(default_factory=dict)
    """Scenario fields set by dotted key (``{"workload.input_tokens.median": 2048}``): a sweep's cell; ``seed`` wins."""
    labels: dict[str, str] = field(default_factory=dict)
    """``--label KEY=VALUE``: recorded with the run in the run store."""
    server: dict[str, Any] | None = None
    """What is known of the server (a sweep's launch command, its /version and /v1/models), for the run store."""
    report: bool = True
    """Build report.html at the end (``--no-report``: not; ``kneecap report DIR`` builds it later)."""


def _start_sim(sc: Scenario, extra: tuple[str, ...], out: str, say: Callable[[str], None]) -> tuple[Child, str]:
    """The built-in simulator serving the scenario's model, or a mix's models (each class's, at the same speed),
    unless ``--sim-arg=--serve-model=...`` says which it serves; and their LoRA adapters (``endpoint.adapters``)
    unless ``--sim-arg=--lora...`` does."""
    model = sc.endpoint.model
    preset = model[4:] if model.startswith("sim-") and model[4:] in PRESETS else DEFAULT_PRESET
    endpoints = [sc.endpoint, *(sc.class_endpoint(c) for c in sc.workload.mix)]
    models = list(dict.fromkeys(e.model for e in endpoints))
    if not any(a.startswith("--lora") for a in extra):
        loras = {f"--lora={name}@{e.model}": None for e in endpoints if e.adapters for name in e.adapters.names}
        extra = (*loras, *extra)
    if any(a.startswith("--serve-model") for a in extra):
        served: list[str] = []
    elif len(models) == 1:
        served = ["--model", model]
    else:
        served = [f"--serve-model={m}" for m in models]
    cmd = [sys.executable, "-m", "harness.cli", "sim", "--port", "0", "--preset", preset, *served, *extra]
    sim = start_child("sim", cmd, os.path.join(out, "sim.log"), stdout=subprocess.PIPE, text=True)
    line = sim.proc.stdout.readline() if sim.proc.stdout else ""
    m = re.search(r"(http://[\d.]+:\d+)", line)
    if not m:
        stop_child(sim)
        raise RuntimeError(f"the built-in simulator did not start: {line.strip()!r} (see {out}/sim.log)")
    say(f"no host given: started the built-in simulator (preset {preset}) at {m.group(1)}")
    return sim, m.group(1)


def run(opts: RunOptions, say: Callable[[str], None] = print, interrupted: threading.Event | None = None) -> int:
    """Run the plan; returns the exit code (``harness.exitcodes``): the summary's, or NO_VALID_RESULT without one.

    Ctrl-C, SIGTERM and SIGHUP end the plan the same way (``supervise.py``): the master writes a partial summary,
    then the verdict and the report follow. The children die with this process even when it is SIGKILLed.
    ``interrupted`` (a sweep's) is set when an interrupt ended the plan early."""
    overrides = {**opts.overrides, **({"workload.seed": opts.seed} if opts.seed is not None else {})}
    sc: Scenario = load_scenario(opts.scenario, overrides) if opts.scenario else default_scenario(overrides)
    digest = scenario_hash(opts.scenario, overrides)  # now: the file may be edited while the run goes on
    run_id = time.strftime("%Y%m%d-%H%M%S")
    out = opts.out or os.path.join(sc.results_dir, f"{sc.name}-{run_id}")
    os.makedirs(out, exist_ok=True)
    sim = master = None
    workers: list[Child] = []
    relay: LogRelay | None = None
    supervisor = Supervisor(say)
    try:
        with supervisor.signals():
            host = opts.host or sc.endpoint.host
            if host is None:
                sim, host = _start_sim(sc, opts.sim_args, out, say)
            n = opts.workers or sc.load.local_workers(os.cpu_count() or 1)
            say(f"kneecap run {run_id}: scenario {sc.name}, {sc.load.mode} plan, {n} worker{'s' if n > 1 else ''} "
                f"-> {host}")
            options = KneecapOptions(scenario=opts.scenario or "", results_dir=out, run_id=run_id,
                                     overrides=KneecapOptions.overrides_json(overrides), insecure=opts.insecure,
                                     save_requests=os.path.join(out, "requests.jsonl") if opts.save_requests else "",
                                     **(opts.influx or {}))
            master, workers = _start_fleet(host, options, n, out)
            relay = LogRelay(workers, say).start()
            supervisor.watch(master, os.path.join(out, "master.log"))
    finally:  # the signal handlers are back: an interrupt now stops this process too
        for child in (master, *workers, sim):
            stop_child(child)
        if relay is not None:
            relay.stop()
    if supervisor.stopped_early and interrupted is not None:
        interrupted.set()
    if master is not None and not supervisor.killed:  # a lost master's checkpoint becomes the summary, code 7
        keep_checkpoint(out, master.proc.returncode, say)
    report_cpu: list[float] = []
    code = say_verdict(out, say, report_cpu, report=opts.report)
    write_processes(out, [c for c in (master, *workers, sim) if c is not None], report_cpu, say)
    stored = record_run(out, run_id=run_id, results_dir=sc.results_dir, scenario_path=opts.scenario, digest=digest,
                        labels=opts.labels, overrides=overrides, server=opts.server)
    if stored:
        say(stored)
    return code


def _start_fleet(host: str, options: KneecapOptions, n: int, out: str) -> tuple[Child, list[Child]]:
    """A headless master with the knee-seeking shape on a free loopback port, and ``n`` workers connected to it."""
    port = free_port()
    master = start_child("master", [sys.executable, "-m", "locust", "-f", f"{LOCUSTFILE},{SHAPEFILE}", "--headless",
                                    "--master", "--expect-workers", str(n), "--expect-workers-max-wait",
                                    f"{WORKERS_WAIT_S:g}", "--master-bind-host", "127.0.0.1",
                                    "--master-bind-port", str(port), "--only-summary", "--loglevel", "INFO",
                                    "--host", host, *options.to_argv()],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    workers = [start_child(f"worker-{i}", [sys.executable, "-m", "locust", "-f", LOCUSTFILE, "--worker",
                                           "--master-host", "127.0.0.1", "--master-port", str(port), "--loglevel",
                                           "WARNING"], os.path.join(out, f"worker-{i}.log"))
               for i in range(n)]
    return master, workers
