"""Fuzzing the parsers at scale: ``python -m benchmarks.fuzz_parsers [--cases 1000000] [--jobs 2]``. Not run in CI.

What it protects (issue 27): whatever a server sends, the response reader and every API tracker give a classified
record (``feed``/``close`` never raise, the error is a known class, every field its declared type) and the chat fast
path gives the full parse's record; reading costs linear time in the response's size; a mutated scenario or
production log is an error naming the file (exit 2), never a traceback. Goal: >= 1,000,000 reader cases a run,
0 failures; every pathological response's cost ratio per doubling of its size <= ~2.5 (quadratic: 4).

Parts, one JSON line each (name, parameters, figures, git revision):

- ``reader``: ``--cases`` seeded cases of ``tests/kit/fuzz.py`` (every API's stream and body, mutated at the JSON
  and byte level, framed and split anywhere), spread over ``--jobs`` processes; cases/s, failures (seed, API,
  problem: ``tests.kit.fuzz.case(seed)`` rebuilds one), cases per API and per outcome.
- ``files``: ``--files`` mutated scenarios and logs (``tests/kit/fuzz_files.py``); PyYAML and click make these
  ~100x dearer than a reader case.
- ``cost``: each builder of ``tests/kit/fuzz_cost.py`` at 16 kB to 256 kB; the worst ratio of one doubling.
- ``atheris`` (``--atheris-runs N``, when atheris is installed: ``pip install atheris``): coverage-guided
  mutation of raw response bytes fed to the reader in receives the fuzzer chooses, N runs in a subprocess.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from multiprocessing import Pool

from benchmarks.common import ROOT, git_rev


def _reader_range(bounds: tuple[int, int]) -> tuple[int, list[tuple], dict, dict]:
    from tests.kit.fuzz import case, check_case, read

    first, end = bounds
    failures: list[tuple] = []
    apis: collections.Counter = collections.Counter()
    outcomes: collections.Counter = collections.Counter()
    for seed in range(first, end):
        c = case(seed)
        apis[c.api] += 1
        f = check_case(c)
        if f is not None:
            failures.append((f.seed, f.api, f.problem))
        elif seed % 50 == 0:  # a sample of outcomes (reading again costs a case)
            outcomes[read(c).record.error or "ok"] += 1
    return end - first, failures, dict(apis), dict(outcomes)


def reader(cases: int, start: int, jobs: int) -> dict:
    step = 5000
    ranges = [(a, min(a + step, start + cases)) for a in range(start, start + cases, step)]
    t0 = time.perf_counter()
    failures: list[tuple] = []
    apis: collections.Counter = collections.Counter()
    outcomes: collections.Counter = collections.Counter()
    done = 0
    with Pool(jobs) as pool:
        for n, fails, a, o in pool.imap_unordered(_reader_range, ranges):
            done += n
            failures += fails
            apis.update(a)
            outcomes.update(o)
    elapsed = time.perf_counter() - t0
    return {"name": "fuzz_parsers.reader", "cases": done, "first_seed": start, "jobs": jobs,
            "seconds": round(elapsed, 1), "cases_per_s": round(done / elapsed), "failures": len(failures),
            "first_failures": sorted(failures)[:20], "by_api": dict(sorted(apis.items())),
            "outcomes_sampled": dict(sorted(outcomes.items()))}


def files(n: int, start: int) -> dict:
    from click.testing import CliRunner

    from tests.kit.fuzz_files import check_log, check_scenario, log_case, scenario_case, scenario_dir, seed_scenarios

    seeds, runner = seed_scenarios(), CliRunner()
    failures: list[tuple] = []
    with tempfile.TemporaryDirectory() as folder:
        scenario_dir(folder)
        t0 = time.perf_counter()
        for s in range(start, start + n):
            if (p := check_scenario(*scenario_case(s, seeds), folder)) is not None:
                failures.append(("scenario", s, p))
        t1 = time.perf_counter()
        for s in range(start, start + n):
            if (p := check_log(*log_case(s), folder, runner)) is not None:
                failures.append(("log", s, p))
        t2 = time.perf_counter()
    return {"name": "fuzz_parsers.files", "scenario_cases": n, "scenario_cases_per_s": round(n / (t1 - t0)),
            "log_cases": n, "log_cases_per_s": round(n / (t2 - t1)), "failures": len(failures),
            "first_failures": failures[:20]}


def cost() -> list[dict]:
    from tests.kit.fuzz_cost import PATHOLOGICAL
    from tests.kit.fuzz_cost import cost as measure

    out = []
    sizes = [16_000 << k for k in range(5)]  # 16 kB .. 256 kB
    for name, build in PATHOLOGICAL.items():
        secs = [measure(build(n), repeat=3) for n in sizes]
        ratios = [b / max(a, 1e-6) for a, b in itertools.pairwise(secs)]
        out.append({"name": "fuzz_parsers.cost", "case": name, "sizes": sizes,
                    "ms": [round(s * 1000, 2) for s in secs], "worst_doubling_ratio": round(max(ratios), 2),
                    "last_doubling_ratio": round(ratios[-1], 2),
                    "ns_per_unit_at_256k": round(secs[-1] / sizes[-1] * 1e9)})
    return out


def atheris_target() -> None:
    """Run by ``--atheris-runs`` in a subprocess: atheris.Fuzz() exits the process when done."""
    import atheris

    with atheris.instrument_imports():
        from harness.client import anthropic, chunk_template, openai, reader, responses, sse, stream  # noqa: F401
    from tests.kit.fuzz import APIS, Case, check_case

    def one(data: bytes) -> None:
        fdp = atheris.FuzzedDataProvider(data)
        api = APIS[fdp.ConsumeIntInRange(0, len(APIS) - 1)]
        cuts = sorted({fdp.ConsumeIntInRange(0, 4096) for _ in range(fdp.ConsumeIntInRange(0, 8))})
        raw = fdp.ConsumeBytes(fdp.remaining_bytes())
        head = [b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n",
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n", b""][len(cuts) % 3]
        raw = head + raw
        points = sorted({min(c, len(raw)) for c in cuts} | {0, len(raw)})
        receives = [raw[a:b] for a, b in itertools.pairwise(points)]
        failure = check_case(Case(0, api, receives, False, 256 * 1024))
        if failure is not None:
            raise AssertionError(failure.problem)

    atheris.Setup(sys.argv, one)
    atheris.Fuzz()


def atheris_run(runs: int) -> dict:
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as corpus:
        proc = subprocess.run([sys.executable, "-m", "benchmarks.fuzz_parsers", "--atheris-target",
                               f"-atheris_runs={runs}", "-max_len=4096", corpus], cwd=ROOT, capture_output=True,
                              text=True, check=False)
    lines = proc.stderr.splitlines()
    done = [ln for ln in lines if ln.startswith("Done ")]
    cov = [ln for ln in lines if " cov: " in ln]
    return {"name": "fuzz_parsers.atheris", "runs": runs, "exit": proc.returncode,
            "seconds": round(time.perf_counter() - t0, 1), "done": done[-1] if done else None,
            "last_status": cov[-1] if cov else None,
            "crash": "\n".join(lines[-15:]) if proc.returncode else None}


def main() -> None:
    if "--atheris-target" in sys.argv:
        sys.argv.remove("--atheris-target")
        atheris_target()
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=1_000_000)
    ap.add_argument("--start", type=int, default=10_000_000, help="first seed (the CI corpus uses 0..)")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--files", type=int, default=5_000, help="scenario and log cases each")
    ap.add_argument("--no-cost", action="store_true")
    ap.add_argument("--atheris-runs", type=int, default=0)
    args = ap.parse_args()
    rev = git_rev()
    parts = []
    if args.cases:
        parts.append(reader(args.cases, args.start, args.jobs))
    if args.files:
        parts.append(files(args.files, args.start))
    if not args.no_cost:
        parts += cost()
    if args.atheris_runs:
        try:
            import atheris  # noqa: F401
        except ImportError:
            parts.append({"name": "fuzz_parsers.atheris", "skipped": "atheris is not installed (pip install atheris)"})
        else:
            parts.append(atheris_run(args.atheris_runs))
    for part in parts:
        print(json.dumps({**part, "git_rev": rev}), flush=True)


if __name__ == "__main__":
    main()
