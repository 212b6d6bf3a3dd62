"""The run store: one JSON line per run in ``index.jsonl``, to list runs, filter them and pick a baseline.

``kneecap run`` appends the entry of every run that wrote a summary to ``index.jsonl`` in ``sinks.results_dir``
(beside the run folder when ``--out`` puts it elsewhere) and writes the same entry to the run's ``run.json``;
a sweep appends its own ``kind: "sweep"`` entries through ``append``. Each entry is one ``write`` of one line
with O_APPEND, so concurrent runs on one machine never interleave lines (a local disk; not promised over NFS).
Readers (``kneecap runs``, the regression gate)::

    entries, problems = read_index("results/index.jsonl")   # a broken line is a problem, not a traceback
    base = last(entries, kind="run", labels={"env": "prod"})
    base["path"] if base else None                          # the run folder, absolute

Pure apart from the files and ``git`` that ``record_run`` reads. The fields: docs/runs.md.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import subprocess
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import Any

import msgspec
import yaml

from harness.checker import decode_text
from harness.report.validate import load_summary
from harness.scenario import DEFAULT_SCENARIO, apply_overrides
from harness.sinks.files import write_json_atomic
from harness.summary import Summary, level_unit

__all__ = ["INDEX", "Entry", "KneeFigures", "append", "display_path", "entry", "git_state", "index_for", "last",
           "parse_labels", "read_index", "record_run", "scenario_hash", "select"]

INDEX = "index.jsonl"
GIT_TIMEOUT_S = 3.0
"""Per git command: a slow network filesystem must not hold the end of a run for long."""
_LABEL_KEY = re.compile(r"[A-Za-z0-9_.-]+")


class KneeFigures(msgspec.Struct, kw_only=True):
    """The knee in a line of the index."""

    found: bool
    load: float | None
    """Users (closed loop) or requests/s (open loop), as ``unit`` says; None when not found."""
    unit: str
    metric: str
    confidence: str | None
    p99_ms: float | None
    """The knee metric's p99 (successful requests) at the knee step, or at the last step with data without one."""
    p99_step: int | None


class Entry(msgspec.Struct, kw_only=True):
    """One run in the index (docs/runs.md has a table of these fields)."""

    kind: str = "run"
    run_id: str
    time: str
    """The run's start (summary ``started_at``), ISO 8601 in UTC."""
    path: str
    """The run folder, absolute."""
    scenario: str
    scenario_hash: str | None
    host: str
    model: str
    server: dict[str, Any] | None
    kneecap_version: str | None
    git: dict[str, Any] | None
    labels: dict[str, str]
    overrides: dict[str, Any]
    exit_code: int
    knee: KneeFigures
    max_load_within_slo: float | None
    max_output_tokens_per_s: float | None
    requests: int
    failures: int
    degraded: bool


def _knee(summary: Summary) -> KneeFigures:
    knee, metric = summary.knee, summary.knee.metric
    at = [st for st in summary.steps if knee.found and st.index == knee.step_index]
    if not at:  # no knee: the last step that measured the metric says how far the run got
        at = [st for st in summary.steps if (p := st.latency_ms.get(metric)) is not None and p.p99 is not None][-1:]
    p99 = at[0].latency_ms[metric].p99 if at and metric in at[0].latency_ms else None
    return KneeFigures(found=knee.found, load=knee.level, unit=level_unit(summary.mode), metric=metric,
                       confidence=knee.confidence, p99_ms=p99, p99_step=at[0].index if at else None)


def entry(summary: Summary | Mapping[str, Any], *, path: str, scenario_hash: str | None,
          labels: Mapping[str, str] | None = None, overrides: Mapping[str, Any] | None = None,
          server: Mapping[str, Any] | None = None, git: Mapping[str, Any] | None = None,
          kneecap_version: str | None = None) -> dict[str, Any]:
    """The index entry of a run from its summary (typed, or as summary.json holds it: checked, ValueError if bad)."""
    if not isinstance(summary, Summary):
        summary = load_summary(json.dumps(summary).encode(), "summary.json")
    tokens = [st.throughput.output_tokens_per_s for st in summary.steps if st.requests]
    started = datetime.fromtimestamp(summary.started_at, tz=timezone.utc).isoformat(timespec="seconds")
    return msgspec.to_builtins(Entry(
        run_id=summary.run_id, time=started, path=path, scenario=summary.scenario, scenario_hash=scenario_hash,
        host=summary.host, model=summary.model, server=dict(server) if server else None,
        kneecap_version=kneecap_version, git=dict(git) if git else None, labels=dict(labels or {}),
        overrides=dict(overrides or {}), exit_code=summary.exit_code, knee=_knee(summary),
        max_load_within_slo=summary.slo.max_load_within_slo, max_output_tokens_per_s=max(tokens, default=None),
        requests=sum(st.requests for st in summary.steps),
        failures=sum(n for st in summary.steps for n in st.failures.values()), degraded=summary.degraded))


def _canonical(node: Any) -> Any:
    """JSON-able with string keys, so ``sort_keys`` can order any YAML mapping (``1:`` and ``"a":`` together)."""
    if isinstance(node, dict):
        return {str(k): _canonical(v) for k, v in node.items()}
    if isinstance(node, list | tuple):
        return [_canonical(v) for v in node]
    return node


def scenario_hash(path: str | None, overrides: Mapping[str, Any]) -> str | None:
    """sha256 (hex) of the scenario as validated: the file's YAML mapping (the built-in default without a file)
    with the overrides applied, as canonical JSON (sorted keys, no spaces). Comments and layout do not count,
    every value does; files the scenario names (traces) are not read. None when the file cannot be read."""
    try:
        if path is None:
            raw: Any = DEFAULT_SCENARIO
        else:
            with open(path, "rb") as f:
                raw = yaml.safe_load(decode_text(f.read()))
    except (OSError, ValueError, yaml.YAMLError):
        return None
    raw = apply_overrides(raw if isinstance(raw, dict) else {}, dict(overrides))
    text = json.dumps(_canonical(raw), sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def git_state(directory: str, timeout_s: float = GIT_TIMEOUT_S) -> dict[str, Any] | None:
    """``{"commit": HEAD, "dirty": tracked files changed}`` of the repository holding ``directory``; None outside
    one, without git, or when git is slow. git's stderr is kept from the console."""
    def git(*args: str) -> str | None:
        try:  # optional locks off: a status refresh must not take the index.lock a user's git may be holding
            proc = subprocess.run(["git", "-C", directory, *args], capture_output=True, text=True, timeout=timeout_s,
                                  stdin=subprocess.DEVNULL, env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"})
        except (OSError, subprocess.SubprocessError):
            return None
        return proc.stdout if proc.returncode == 0 else None

    head = git("rev-parse", "HEAD")
    if not head or not head.strip():
        return None
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": head.strip(), "dirty": None if status is None else bool(status.strip())}


def _kneecap_version() -> str | None:
    try:
        return importlib.metadata.version("kneecap")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return None


def parse_labels(values: Iterable[str]) -> dict[str, str]:
    """``["env=prod", "gpu=h100"]`` -> a dict; ValueError naming the bad value."""
    out: dict[str, str] = {}
    for value in values:
        key, sep, val = value.partition("=")
        if not sep or not val or not _LABEL_KEY.fullmatch(key):
            raise ValueError(f"expected KEY=VALUE (KEY of letters, digits, '_', '-', '.'; a VALUE), got {value!r}")
        if key in out and out[key] != val:
            raise ValueError(f"label {key!r} given twice ({key}={out[key]}, {value}): give each key once")
        out[key] = val
    return out


def index_for(run_dir: str, results_dir: str) -> str:
    """The index a run folder belongs to: the results folder's when the run lies under it (the default, a sweep's
    cells), else ``index.jsonl`` beside the run folder (``--out`` elsewhere: a test's tmp folder stays its own)."""
    run, root = os.path.realpath(run_dir), os.path.realpath(results_dir)
    if run != root and os.path.commonpath([run, root]) == root:
        return os.path.join(results_dir, INDEX)
    return os.path.join(os.path.dirname(os.path.abspath(run_dir)), INDEX)


def append(index_path: str, item: Mapping[str, Any]) -> None:
    """Append one entry as one line, in one ``write`` with O_APPEND (no interleaving); creates the folder."""
    line = (json.dumps(item, ensure_ascii=False, separators=(",", ":"), allow_nan=False) + "\n").encode()
    os.makedirs(os.path.dirname(os.path.abspath(index_path)), exist_ok=True)
    fd = os.open(index_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        written = os.write(fd, line)
    finally:
        os.close(fd)
    if written != len(line):  # a second write could land after another run's line: report, never splice
        raise OSError(f"only {written} of {len(line)} bytes written (disk full?)")


def read_index(index_path: str) -> tuple[list[dict[str, Any]], list[str]]:
    """The entries in file order (oldest first), and one problem per line skipped (naming its number); a missing
    file is an empty store. Other OSErrors (a folder, no permission) are the caller's to report."""
    try:
        with open(index_path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return [], []
    entries: list[dict[str, Any]] = []
    problems: list[str] = []
    for n, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            item = json.loads(raw)
        except (ValueError, RecursionError) as exc:  # not JSON, not UTF-8, a line cut short by a crash
            problems.append(f"{index_path} line {n}: not a JSON entry ({exc}); skipped")
            continue
        if not isinstance(item, dict) or not isinstance(item.get("kind"), str) \
                or not isinstance(item.get("path"), str):
            problems.append(f"{index_path} line {n}: expected an object with a 'kind' and a 'path'; skipped")
            continue
        entries.append(item)
    return entries, problems


def select(entries: Iterable[Mapping[str, Any]], *, scenario: str | None = None,
           labels: Mapping[str, str] | None = None, host: str | None = None, model: str | None = None,
           kind: str | None = None) -> list[dict[str, Any]]:
    """The entries matching every filter given (``labels``: each key with that value), in their order."""
    want = {"scenario": scenario, "host": host, "model": model, "kind": kind}
    out = []
    for item in entries:
        given = item.get("labels")
        have = given if isinstance(given, dict) else {}
        if all(v is None or item.get(k) == v for k, v in want.items()) \
                and all(have.get(k) == v for k, v in (labels or {}).items()):
            out.append(dict(item))
    return out


def last(entries: Iterable[Mapping[str, Any]], *, scenario: str | None = None,
         labels: Mapping[str, str] | None = None, host: str | None = None, model: str | None = None,
         kind: str | None = None) -> dict[str, Any] | None:
    """The newest match (the last appended: runs append when they end), or None."""
    found = select(entries, scenario=scenario, labels=labels, host=host, model=model, kind=kind)
    return found[-1] if found else None


def display_path(path: str) -> str:
    """``path`` as a user can type it here: relative below the working folder, else absolute."""
    rel = os.path.relpath(path)
    return rel if not rel.startswith("..") else os.path.abspath(path)


def record_run(out: str, *, run_id: str, results_dir: str, scenario_path: str | None, digest: str | None,
               labels: Mapping[str, str], overrides: Mapping[str, Any],
               server: Mapping[str, Any] | None) -> str | None:
    """Index the run in OUT: its entry in OUT/run.json and a line in its index (``index_for``), once per run. The
    line to say, or None when OUT holds no valid summary (the verdict said why). Never raises for a file problem."""
    try:
        with open(os.path.join(out, "summary.json"), "rb") as f:
            summary = load_summary(f.read(), os.path.join(out, "summary.json"))
    except (OSError, ValueError):
        return None
    index = index_for(out, results_dir)
    if summary.run_id != run_id:  # a summary left in OUT by an earlier run: it is indexed already
        return f"run store: not indexed ({out}/summary.json is run {summary.run_id}'s, not this run's)"
    git = git_state(os.path.dirname(os.path.abspath(scenario_path))) if scenario_path else None
    item = entry(summary, path=os.path.abspath(out), scenario_hash=digest, labels=labels, overrides=overrides,
                 server=server, git=git, kneecap_version=_kneecap_version())
    try:
        write_json_atomic(os.path.join(out, "run.json"), item)
        entries, _ = read_index(index)
        if not any(e.get("run_id") == run_id and e.get("path") == item["path"] for e in select(entries, kind="run")):
            append(index, item)
    except (OSError, ValueError) as exc:  # the run's results stand; only its line in the store is missing
        return f"WARNING: run store: {index} not written ({exc}); the run's results are unaffected"
    return f"run store: {display_path(index)} (kneecap runs --results {display_path(os.path.dirname(index))})"
