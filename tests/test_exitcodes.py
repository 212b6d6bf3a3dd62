"""Exit codes: one pure module, the numbers users and CI scripts rely on, and the README table that explains them."""

from __future__ import annotations

import ast
import itertools
import os
import re

from harness import exitcodes
from harness.analysis import verdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CODES = {"OK": 0, "ERROR": 1, "USAGE": 2, "SLO_FAILED": 3, "NO_VALID_RESULT": 4, "DEGRADED": 5}


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
