"""``kneecap sweep``: the cells of a sweep run one after another, each a normal run folder; resumable.

The sweep folder holds ``cell-NN/`` (a run folder plus ``cell.json``: what the cell is, whether it finished),
``server-NN.log`` per server launch, and ``sweep.json`` + ``sweep.html`` (the capacity map), rewritten after
every cell so an interrupted sweep still has its map. Given the same ``--out``, a cell whose ``cell.json``
says it finished, with the same definition (``Cell.key``), is not run again; one that failed or was interrupted
is. Ctrl-C, SIGTERM and SIGHUP end the running cell as they end ``kneecap run`` (a partial summary), then the
sweep stops; the console says how to resume.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from harness import exitcodes
from harness.capacity.cells import CellOutcome
from harness.capacity.serve import ServerDown, SweepServer, run_hooks
from harness.capacity.sweep_spec import Cell, SweepSpec, cells
from harness.errors import KneecapError

__all__ = ["CellRunner", "SweepOptions", "run_sweep"]

CELL_FILE = "cell.json"
CellRunner = Callable[[Cell, str, "str | None", "dict[str, Any] | None", threading.Event], int]
"""(cell, its run folder, the server's URL or None, the server's info, the interrupt event) -> the run's exit code."""


@dataclass(frozen=True, kw_only=True)
class SweepOptions:
    out: str
    workers: int | None = None
    """Each cell's local workers; None: as its plan needs (``RunOptions.workers``)."""
    labels: dict[str, str] = field(default_factory=dict)
    sweep_file: str = ""
    results_dir: str = "results"
    """The base scenario's ``sinks.results_dir``: where the run store is (``store.index_for``)."""


def run_sweep(spec: SweepSpec, opts: SweepOptions, say: Callable[[str], None],
              run_cell: CellRunner | None = None) -> int:
    """Run every cell not finished before; the sweep's exit code (``docs/sweep.md``)."""
    run_cell = run_cell or _kneecap_run(spec, opts, say)
    todo = cells(spec)
    os.makedirs(opts.out, exist_ok=True)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    outcomes: dict[int, CellOutcome] = {}
    stop = threading.Event()
    say(f"kneecap sweep {spec.name}: {len(todo)} cells -> {opts.out}")
    with _signals(stop):
        for group in _groups(todo):
            if stop.is_set():
                break
            pending = []
            for cell in group:
                done = _finished(opts.out, cell)
                if done is not None:
                    outcomes[cell.index] = done
                    say(f"cell {cell.index}/{len(todo)} ({cell.name}): finished before, not run again")
                else:
                    pending.append(cell)
            if pending:
                _run_group(spec, opts, pending, len(todo), run_cell, stop, outcomes, say)
            _write_map(spec, opts, outcomes, started)
    body = _write_map(spec, opts, outcomes, started)
    code = _verdict(spec, opts, todo, outcomes, stop.is_set(), body, say)
    _index(spec, opts, started, len(todo), body, code, say)
    return code


def _groups(todo: list[Cell]) -> Iterator[list[Cell]]:
    """Consecutive cells sharing one server launch (the same ``serve.params``)."""
    group: list[Cell] = []
    for cell in todo:
        if group and cell.serve_params != group[0].serve_params:
            yield group
            group = []
        group.append(cell)
    if group:
        yield group


def _run_group(spec: SweepSpec, opts: SweepOptions, pending: list[Cell], total: int, run_cell: CellRunner,
               stop: threading.Event, outcomes: dict[int, CellOutcome], say: Callable[[str], None]) -> None:
    server = None
    if spec.serve is not None:
        server = SweepServer(spec.serve, pending[0].serve_params,
                             os.path.join(opts.out, f"server-{pending[0].index:02d}.log"))
        say(f"starting the server: {' '.join(server.argv)}")
    try:
        if server is not None:
            try:
                server.start(stop)
            except ServerDown as exc:
                for cell in pending:
                    outcomes[cell.index] = _record(opts.out, cell, error=str(exc), server=server.info)
                    say(f"cell {cell.index}/{total} ({cell.name}) FAILED: {exc}")
                return
            say(f"server ready at {server.url} (version {server.info.get('version') or 'not given'})")
        for cell in pending:
            if stop.is_set():
                return
            gone = server.exited() if server is not None else None
            if gone is not None:  # it died during an earlier cell: this one would only measure refused connections
                outcomes[cell.index] = _record(opts.out, cell, error=gone, server=server.info if server else None)
                say(f"cell {cell.index}/{total} ({cell.name}) FAILED: {gone}")
                continue
            say(f"cell {cell.index}/{total}: {cell.name}")
            problems = run_hooks(spec.between, server.url if server else None, say)
            info = server.info if server else None
            try:
                code = run_cell(cell, os.path.join(opts.out, cell.folder), server.url if server else None, info,
                                stop)
            except (RuntimeError, OSError, KneecapError) as exc:  # e.g. the built-in simulator did not start
                outcomes[cell.index] = _record(opts.out, cell, error=f"the run did not start: {exc}", server=info)
                say(f"cell {cell.index}/{total} ({cell.name}) FAILED: the run did not start: {exc}")
                continue
            gone = server.exited() if server is not None else None
            outcome = _record(opts.out, cell, code=code, server=info, hooks=problems, error=gone,
                              finished=not stop.is_set() and gone is None)
            # figures of a server that died under the cell measure its death: no result for the map
            outcomes[cell.index] = outcome if gone is None else dataclasses.replace(outcome, summary=None)
            if gone is not None:
                say(f"cell {cell.index}/{total} ({cell.name}) FAILED: {gone}")
    finally:
        if server is not None:
            server.stop()


def _record(out: str, cell: Cell, *, code: int | None = None, error: str | None = None,
            server: dict[str, Any] | None = None, hooks: list[str] | None = None,
            finished: bool = False) -> CellOutcome:
    """Write the cell's ``cell.json`` and return its outcome (with its summary when the run wrote one)."""
    folder = os.path.join(out, cell.folder)
    os.makedirs(folder, exist_ok=True)
    summary = _summary(folder)
    if error is None and summary is None:
        error = f"the run wrote no summary (exit code {code}; see {folder}/master.log)"
    doc = {"index": cell.index, "name": cell.name, "params": cell.params, "key": cell.key,
           "finished": finished and summary is not None, "exit_code": code, "error": error, "server": server,
           "hook_problems": hooks or []}
    tmp = os.path.join(folder, CELL_FILE + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, default=str)
    os.replace(tmp, os.path.join(folder, CELL_FILE))
    return _outcome(cell, doc, summary)


def _outcome(cell: Cell, doc: dict[str, Any], summary: Any) -> CellOutcome:
    return CellOutcome(index=cell.index, name=cell.name, params=cell.params, run_dir=cell.folder, summary=summary,
                       error=doc.get("error"), exit_code=doc.get("exit_code"), server=doc.get("server"))


def _summary(folder: str) -> Any:
    """The run's typed summary, or None when there is none (or it does not read: the cell then runs again)."""
    from harness.report.html import read_summary

    if not os.path.isfile(os.path.join(folder, "summary.json")):
        return None
    try:
        return read_summary(folder)
    except (OSError, ValueError):
        return None


def _finished(out: str, cell: Cell) -> CellOutcome | None:
    """The cell's outcome when an earlier sweep finished it with this very definition, else None."""
    folder = os.path.join(out, cell.folder)
    try:
        with open(os.path.join(folder, CELL_FILE), encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("key") != cell.key or not doc.get("finished"):
        return None
    summary = _summary(folder)
    return None if summary is None else _outcome(cell, doc, summary)


def _kneecap_run(spec: SweepSpec, opts: SweepOptions, say: Callable[[str], None]) -> CellRunner:
    """The real cell: ``kneecap run`` of the base scenario with the cell's overrides, in this process."""
    from harness.run import RunOptions, run

    def run_cell(cell: Cell, folder: str, url: str | None, server: dict[str, Any] | None,
                 stop: threading.Event) -> int:
        labels = {**opts.labels, "sweep": spec.name, "cell": cell.name}
        run_opts = RunOptions(spec.scenario, host=url, workers=opts.workers, out=folder, overrides=cell.overrides,
                              sim_args=cell.sim_args, labels=labels, server=server)
        return run(run_opts, say=lambda line: say(f"  {line}"), interrupted=stop)

    return run_cell


@contextmanager
def _signals(stop: threading.Event) -> Iterator[None]:
    """Between cells (a server starting, a hook), an ending signal sets ``stop``; during a cell ``kneecap run``'s
    own handlers take over and set it through ``run(interrupted=)``."""
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in sigs}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _write_map(spec: SweepSpec, opts: SweepOptions, outcomes: dict[int, CellOutcome], started: str) -> dict[str, Any]:
    from harness.capacity.capacity_map import capacity_map
    from harness.capacity.sweep_html import sweep_page

    facts = {"name": spec.name, "source": spec.source, "scenario": spec.scenario, "folder": opts.out,
             "axes": {**(spec.serve.params if spec.serve else {}), **spec.sim, **spec.matrix},
             "serve": spec.serve.cmd if spec.serve else None, "started_at": started,
             "ended_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "cells": len(cells(spec))}
    body = capacity_map([outcomes[i] for i in sorted(outcomes)], sweep=facts)
    for name, text in (("sweep.json", json.dumps(body, indent=1, default=str)), ("sweep.html", sweep_page(body))):
        tmp = os.path.join(opts.out, name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, os.path.join(opts.out, name))
    return body


def _index(spec: SweepSpec, opts: SweepOptions, started: str, total: int, body: dict[str, Any], code: int,
           say: Callable[[str], None]) -> None:
    """The sweep's own line in the run store (``kind: "sweep"``), beside its cells' run lines."""
    from harness import run_store as store

    folder = os.path.abspath(opts.out)
    best = body.get("best") or {}
    item = {"kind": "sweep", "run_id": os.path.basename(folder), "time": started, "path": folder,
            "sweep": spec.name, "scenario": spec.base_scenario.get("name"), "labels": opts.labels,
            "cells": total, "with_result": best.get("with_result"), "best": best.get("line"), "exit_code": code}
    index = store.index_for(folder, opts.results_dir)
    try:
        store.append(index, item)
    except OSError as exc:
        say(f"WARNING: run store: the sweep's line was not written to {index}: {exc.strerror or exc}")


def _verdict(spec: SweepSpec, opts: SweepOptions, todo: list[Cell], outcomes: dict[int, CellOutcome],
             interrupted: bool, body: dict[str, Any], say: Callable[[str], None]) -> int:
    """The last lines and the exit code: OK when every cell has a result, ERROR when some have none (failed,
    interrupted, not run), NO_VALID_RESULT when none has. A cell's SLO verdict is in the map, not in this code."""
    with_result = [o for o in outcomes.values() if o.summary is not None]
    failed = [o for o in outcomes.values() if o.summary is None]
    finished = sum(_finished(opts.out, cell) is not None for cell in todo)
    if interrupted:
        say(f"interrupted: {finished} of {len(todo)} cells finished; resume with: kneecap sweep "
            f"{opts.sweep_file or spec.source} --out {opts.out}")
    for o in failed:
        say(f"cell {o.index} ({o.name}): no result: {o.error}")
    if body.get("best", {}).get("line"):
        say(body["best"]["line"])
    say(f"capacity map: {os.path.join(opts.out, 'sweep.html')}, {os.path.join(opts.out, 'sweep.json')}")
    if not with_result:
        return exitcodes.NO_VALID_RESULT
    return exitcodes.OK if finished == len(todo) else exitcodes.ERROR
