"""Fuzzing the files a user hands kneecap: scenario YAML (``scenario.load_scenario``) and production logs (the
token, timestamp and session-log readers of ``workload/``, as ``kneecap fit`` drives them).

The contract: a bad file is an error that names it (``ScenarioError``, ``TraceError``, or ``kneecap fit``'s exit 2),
never another exception, which the command would print as a traceback. ``scenario_case(seed)`` and
``log_case(seed)`` build one mutated file from a valid seed (the repository's scenarios, a generated log) by
line, value and byte mutations; ``check_scenario`` and ``check_log`` read it and return the problem, or None.
Shared by ``tests/client/test_fuzz_files.py`` (a seeded corpus) and ``benchmarks/fuzz_parsers.py``.
"""

from __future__ import annotations

import os
import random
import re

import yaml
from click.testing import CliRunner

from harness.cli import main
from harness.scenario import DEFAULT_SCENARIO, ScenarioError, load_scenario
from tests.kit.fuzz import mutate_bytes

__all__ = ["check_log", "check_scenario", "log_case", "scenario_case", "scenario_dir", "seed_scenarios"]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ODD_SCALARS = ["-1", "0", "1e999", ".nan", "-.inf", "''", "~", "[]", "{}", "[1, [2, [3]]]", "yes", "on", "0x1F",
               "1" * 400, "9" * 5000, "2024-13-45", "2024-01-01", "!!binary aGVsbG8=", "!!set {a, b}",
               "!!python/object:os.system x", "*undefined", "&a [*a]", '"\\ud800"', "'p(95)<'", "p(99)<-1",
               "x" * 3000, "\"\\x00\"", "!!float nan", "!!int 1_000", "1:30", "[" * 600 + "]" * 600]
ODD_CELLS = ["", "-1", "1e999", "nan", "inf", "1" * 400, "9" * 5000, "0.5", "true", "null", "x", "2024-13-45",
             "2024-05-01T10:00:03." + "9" * 5000 + "Z", "9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+23:59",
             "1" * 20, "-0", "1e308", "1714557603250", '"', ",", "\x00", "\ufeff", "[" * 5000, "{}", "[]"]


def seed_scenarios() -> list[str]:
    """The repository's scenario files, and the built-in default as YAML."""
    folder = os.path.join(ROOT, "scenarios")
    texts = []
    for name in sorted(os.listdir(folder)):
        if name.endswith(".yaml"):
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                texts.append(f.read())
    return [*texts, yaml.safe_dump(DEFAULT_SCENARIO)]


def scenario_dir(folder: str) -> None:
    """``folder`` as a scenario folder: the first rows of the trace the repository's scenarios name (files are
    relative to the scenario)."""
    os.makedirs(os.path.join(folder, "traces"), exist_ok=True)
    with open(os.path.join(ROOT, "scenarios", "traces", "azure-code-2023.csv"), encoding="utf-8") as f:
        head = [next(f) for _ in range(40)]
    with open(os.path.join(folder, "traces", "azure-code-2023.csv"), "w", encoding="utf-8") as f:
        f.writelines(head)


def _mutate_lines(rng: random.Random, text: str) -> str:
    lines = text.splitlines(keepends=True) or ["\n"]
    i = rng.randrange(len(lines))
    op = rng.randrange(6)
    if op == 0:
        del lines[i]
    elif op == 1:
        lines.insert(i, lines[rng.randrange(len(lines))])
    elif op == 2:  # a value replaced by an odd scalar
        lines[i] = re.sub(r"(:\s*)[^\s#,{}\[\]][^,{}\[\]\n]*", lambda m: m.group(1) + rng.choice(ODD_SCALARS),
                          lines[i], count=1)
    elif op == 3:
        lines[i] = " " * rng.choice([1, 2, 3, 8]) + lines[i]
    elif op == 4:
        lines[i] = lines[i].replace(rng.choice([":", "{", "[", ",", "-", "_"]), rng.choice(["", ": ", "x", "\t"]), 1)
    else:
        lines = lines[:i]
    return "".join(lines)


def scenario_case(seed: int, seeds: list[str]) -> tuple[bytes, dict]:
    """(the scenario file's bytes, --set overrides) of ``seed``."""
    rng = random.Random(seed)
    text = rng.choice(seeds)
    for _ in range(rng.randint(1, 4)):
        text = _mutate_lines(rng, text)
    data = text.encode("utf-8", "surrogatepass")
    if rng.random() < 0.25:
        data = mutate_bytes(rng, data, rng.randint(1, 3))
    overrides = {}
    if rng.random() < 0.2:
        key = rng.choice(["load.users.max", "endpoint.host", "workload.seed", "slo.ttft", "load.mode", "name",
                          "load", "workload.input_tokens.median", "endpoint.timeouts.ttft_s", "a.b.c"])
        overrides[key] = yaml.safe_load(rng.choice(ODD_SCALARS[:14]))
    return data, overrides


def check_scenario(data: bytes, overrides: dict, folder: str) -> str | None:
    """Load ``data`` as ``folder``/scenario.yaml; the problem (an exception other than ScenarioError), or None."""
    path = os.path.join(folder, "scenario.yaml")
    with open(path, "wb") as f:
        f.write(data)
    try:
        load_scenario(path, overrides or None)
    except ScenarioError as exc:
        if not exc.problems or not all(isinstance(p, str) and p for p in exc.problems):
            return f"ScenarioError without its problems: {exc.problems!r}"
    except Exception as exc:  # the point: anything else is a traceback for the user
        return f"{type(exc).__name__}: {str(exc)[:200]}"
    return None


# -- production logs ------------------------------------------------------------------------------------------------

def _seed_log(rng: random.Random) -> tuple[str, str]:
    """(file name, text): a token log or a session log, CSV or JSON lines, with timestamps or delays."""
    sessions = rng.random() < 0.6
    n = rng.randint(2, 25)
    rows = []
    for i in range(n):
        row: dict = {"prompt_tokens": rng.randint(1, 5000), "completion_tokens": rng.randint(0, 500)}
        if sessions:
            row = {"session_id": f"s{i % 3}", "turn": i // 3 + 1, "input_tokens": 100 * (i // 3 + 1),
                   "output_tokens": rng.randint(1, 90)}
            row[rng.choice(["delay", "timestamp", "start_time"])] = rng.choice(
                [i * 1.5, f"2024-05-01T10:00:{i:02d}.25Z", 1714557603250 + i * 1000])
            if rng.random() < 0.3:
                row["e2e_ms"] = 1200
        else:
            row["TIMESTAMP"] = f"2023-11-16 18:17:{i:02d}.97996"
        rows.append(row)
    if rng.random() < 0.5:
        import json

        return rng.choice(["log.jsonl", "log.json", "log.log"]), "".join(json.dumps(r) + "\n" for r in rows)
    keys = list(dict.fromkeys(k for r in rows for k in r))
    lines = [",".join(keys)] + [",".join(str(r.get(k, "")) for k in keys) for r in rows]
    return rng.choice(["log.csv", "log.txt"]), "\n".join(lines) + "\n"


def log_case(seed: int) -> tuple[str, bytes]:
    """(file name, bytes) of ``seed``: a valid log with cells, lines and bytes mutated."""
    rng = random.Random(seed)
    name, text = _seed_log(rng)
    lines = text.splitlines(keepends=True)
    for _ in range(rng.randint(0, 4)):
        if not lines:
            break
        i = rng.randrange(len(lines))
        roll = rng.random()
        if roll < 0.5:  # one cell or value replaced
            cell = rng.choice(ODD_CELLS)
            lines[i] = re.sub(r'(?<=[,:] )?-?[0-9][^,"}\n]*|"[^"]*"(?=[,}])',
                              lambda _, c=cell: c, lines[i], count=1) if rng.random() < 0.5 \
                else re.sub(r"(?<=,)[^,\n]*", lambda _, c=cell: c, lines[i], count=1)
        elif roll < 0.7:
            lines.insert(i, rng.choice(["\n", "[1]\n", "{}\n", lines[i], "a,b\n", '{"session_id": 1}\n']))
        elif roll < 0.8:
            del lines[i]
        else:
            lines = lines[:i]
    data = "".join(lines).encode("utf-8", "surrogatepass")
    if rng.random() < 0.25:
        data = mutate_bytes(rng, data, rng.randint(1, 3))
    return name, data


def check_log(name: str, data: bytes, folder: str, runner: CliRunner | None = None) -> str | None:
    """``kneecap fit`` on the log: exit 0 or 2 with an ``Error:`` line; else the problem."""
    path = os.path.join(folder, name)
    with open(path, "wb") as f:
        f.write(data)
    result = (runner or CliRunner()).invoke(main, ["fit", path], catch_exceptions=True)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        exc = result.exception
        return f"{type(exc).__name__}: {str(exc)[:200]}"
    if result.exit_code not in (0, 2):
        return f"exit {result.exit_code}: {result.output[-300:]}"
    if result.exit_code == 2 and "Error:" not in result.output:
        return f"exit 2 without an Error: line: {result.output[-300:]}"
    return None


