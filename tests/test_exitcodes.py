"""Exit codes: one pure module, the numbers users and CI scripts rely on, and the README table that explains them."""

from __future__ import annotations

import ast
import itertools
import os
import re

from harness import exitcodes
from harness.analysis import verdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CODES = {"OK": 0, "ERROR": 1, "USAGE": 2, "SLO_FAILED": 3, "NO_VALID_RESULT": 4, "DEGRADED": 5, "REGRESSED": 6,
         "MASTER_LOST": 7}


def _module() -> ast.Module:
    with open(exitcodes.__file__, encoding="utf-8") as f:
        return ast.parse(f.read())


def test_numbers_are_stable():
    assert {name: getattr(exitcodes, name) for name in exitcodes.__all__} == CODES


def test_module_is_pure_and_documents_each_code():
    module = _module()
    assert not [n for n in ast.walk(module) if isinstance(n, (ast.Import, ast.ImportFrom))]
    documented = {  # a constant followed by its attribute docstring
        node.targets[0].id for node, after in itertools.pairwise(module.body)
        if isinstance(node, ast.Assign) and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
    }
    assert set(CODES) <= documented


def test_verdict_aliases_are_the_same_codes():
    assert verdict.EXIT_SLO_FAILED == exitcodes.SLO_FAILED
    assert verdict.EXIT_NO_VALID_RESULT == exitcodes.NO_VALID_RESULT


def test_readme_table_lists_every_code():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        rows = re.findall(r"^\| (\d+) \| `(\w+)` \|", f.read(), flags=re.MULTILINE)
    assert {name: int(code) for code, name in rows} == CODES


def test_run_exit_code_precedence_lives_in_one_place() -> None:
    """A lost master first; then figures that may miss data (a report not merged, a sink failed); a passing run that
    lost a worker is DEGRADED; a failing one keeps its code; no counted step is no valid result."""
    import dataclasses

    from harness.analysis.results import SloVerdict, StepResult
    from harness.analysis.verdict import ExitFacts, run_exit_code
    from harness.summary import Generator, Throughput

    step = StepResult(index=0, mode="closed", level=4, duration_s=10, warmup_s=1, requests=10, ok=10, failures={},
                      warmup_requests=1, throughput=Throughput(requests_per_s=1, output_tokens_per_s=1,
                                                               input_tokens_per_s=1, goodput_per_s=1),
                      latency_ms={}, tokens_per_s_per_user={}, output_tokens_counted=0, prompt_length_error=None,
                      generator=Generator(lag_p99_ms=1, lag_max_ms=1, cpu_max_pct=10, reliable=True),
                      complete=True)
    passed = SloVerdict(thresholds=[], passed=True, max_load_within_slo=4)
    failed = SloVerdict(thresholds=["ttft: p(99)<1"], passed=False, max_load_within_slo=None)
    assert run_exit_code([step], failed, ExitFacts(master_lost=True, merge_errors=1)) == exitcodes.MASTER_LOST
    assert run_exit_code([step], failed, ExitFacts(merge_errors=1)) == exitcodes.ERROR
    assert run_exit_code([step], failed, ExitFacts(sink_failed=True)) == exitcodes.ERROR
    assert run_exit_code([step], passed) == exitcodes.OK
    assert run_exit_code([step], passed, ExitFacts(worker_lost=True)) == exitcodes.DEGRADED
    assert run_exit_code([step], failed, ExitFacts(worker_lost=True)) == exitcodes.SLO_FAILED
    assert run_exit_code([], passed, ExitFacts(worker_lost=True)) == exitcodes.NO_VALID_RESULT
    cut = dataclasses.replace(step, complete=False)
    assert run_exit_code([cut], passed) == exitcodes.NO_VALID_RESULT  # a step cut short does not count


def test_only_verdict_writes_an_exit_code() -> None:
    """No module of harness/ but the verdict assigns a run's exit code (a summary's ``exit_code`` or the dict key)."""
    import glob

    writers = []
    for path in glob.glob(os.path.join(ROOT, "harness", "**", "*.py"), recursive=True):
        with open(path, encoding="utf-8") as f:
            for node in ast.walk(ast.parse(f.read())):
                targets = node.targets if isinstance(node, ast.Assign) else []
                for t in targets:
                    if (isinstance(t, ast.Attribute) and t.attr == "exit_code") or (
                            isinstance(t, ast.Subscript) and isinstance(t.slice, ast.Constant)
                            and t.slice.value == "exit_code"):
                        writers.append(f"{os.path.relpath(path, ROOT)}:{node.lineno}")
    assert all("run_exit_code" in _line(w) for w in writers), writers


def _line(where: str) -> str:
    path, line = where.rsplit(":", 1)
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read().splitlines()[int(line) - 1]
