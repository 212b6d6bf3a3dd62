"""Every test that starts a process (a subprocess, the simulator, a server on loopback, a kneecap run) is marked
``integration``: the lanes (``tests/kit/lanes.py``) run those first, and ``-m "not integration"`` is the quick
pure suite. Read from the source (ast): a call to one of the kit's process starters, ``subprocess``, or a
fixture that starts one."""

from __future__ import annotations

import ast
import pathlib

TESTS = pathlib.Path(__file__).resolve().parent
STARTERS = {"kneecap_run", "start_kneecap_run", "start_sim", "CannedServer", "tls_server", "Popen", "start_child",
            "subprocess"}
"""Names whose use inside a test starts a process or a server."""
PROCESS_FIXTURES = {"sim", "rendered", "https", "config", "run", "fleet_run"}
"""Fixtures that start one (conftest's ``sim``; test_k8s ``rendered`` (kubectl); test_client_faults ``https`` (a TLS
server); test_compose ``config`` (docker-compose); shared runs named ``run``)."""


def _marked(decorators: list[ast.expr]) -> bool:
    return any("integration" in ast.unparse(d) for d in decorators)


def _module_marked(tree: ast.Module) -> bool:
    return any(isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in n.targets)
               and "integration" in ast.unparse(n.value) for n in tree.body)


def test_every_process_starting_test_is_marked_integration() -> None:
    unmarked = []
    for path in sorted(TESTS.rglob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if _module_marked(tree):
            continue
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef) or not node.name.startswith("test_") \
                    or _marked(node.decorator_list):
                continue
            patched = {id(a) for c in ast.walk(node) if isinstance(c, ast.Call) and "setattr" in ast.unparse(c.func)
                       for a in ast.walk(c)}  # monkeypatch.setattr(subprocess, "Popen", refuse): no process
            nodes = [n for n in ast.walk(node) if id(n) not in patched]
            names = {n.id for n in nodes if isinstance(n, ast.Name)} | {n.attr for n in nodes
                                                                       if isinstance(n, ast.Attribute)}
            fixtures = {a.arg for a in node.args.args}
            if names & STARTERS or fixtures & PROCESS_FIXTURES:
                unmarked.append(f"{path.relative_to(TESTS)}::{node.name}")
    assert unmarked == [], "mark these @pytest.mark.integration (they start processes):\n" + "\n".join(unmarked)
