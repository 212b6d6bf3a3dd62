"""The tree reads as the data's path: pure layers import neither Locust nor gevent, nothing imports upward, no cycles.
In ``tests/``, no test module imports another: what several need lives in ``tests/kit/``.

Read from the source (ast), so importing Locust's monkey-patching never happens here. Every import counts:
under ``if TYPE_CHECKING:`` (an annotation is still a dependency a reader must follow), inside a function
(a late import that dodges a cycle is still a cycle), and a package's ``__init__`` (importing ``a.b`` runs it).
"""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent / "harness"
PURE = ("harness.metrics", "harness.spec", "harness.summary", "harness.analysis", "harness.workload",
        "harness.scenario",
        "harness.endpoint", "harness.checker",
        "harness.errors", "harness.exitcodes", "harness.sinks.config", "harness.client.sse", "harness.client.openai",
        "harness.client.reader", "harness.client.server_metrics",
        "harness.client.backoff", "harness.client.stream", "harness.client.responses", "harness.client.anthropic",
        "harness.client.chunk_template",
        "harness.client.apis", "harness.sim.engine", "harness.sim.engine_config", "harness.sim.kv",
        "harness.sim.prefix", "harness.sim.openai",
        "harness.sim.text", "harness.sim.plan", "harness.sim.chat_stream", "harness.sim.responses",
        "harness.sim.anthropic", "harness.sim.embeddings", "harness.sim.images", "harness.sim.lora",
        "harness.sim.models", "harness.capacity.cells",
        "harness.capacity.capacity_map", "harness.capacity.llmd", "harness.run_store",
        "harness.capacity.intervals", "harness.capacity.checks",
        "harness.capacity.knee_check", "harness.capacity.gate", "harness.capacity.gate_report")
GLUE = ("locust", "gevent", "flask")
UPWARD = {  # layer -> the layers above it, which it must not import
    "harness.summary": ("harness.analysis", "harness.load", "harness.web", "harness.report", "harness.sinks",
                        "harness.cli", "harness.run", "harness.sim", "harness.capacity", "harness.client",
                        "harness.workload", "harness.metrics", "harness.scenario", "harness.endpoint", "harness.spec"),
    "harness.spec": ("harness.analysis", "harness.load", "harness.web", "harness.report", "harness.sinks",
                     "harness.cli", "harness.run", "harness.sim", "harness.capacity", "harness.client",
                     "harness.workload", "harness.scenario", "harness.endpoint"),
    "harness.metrics": ("harness.analysis", "harness.load", "harness.web", "harness.report", "harness.sinks",
                        "harness.cli", "harness.run", "harness.sim", "harness.capacity"),
    "harness.workload": ("harness.analysis", "harness.load", "harness.web", "harness.report", "harness.sinks",
                         "harness.cli", "harness.run", "harness.sim", "harness.capacity"),
    "harness.client": ("harness.analysis", "harness.load", "harness.web", "harness.report", "harness.sinks",
                       "harness.cli", "harness.run", "harness.capacity"),
    "harness.analysis": ("harness.load", "harness.web", "harness.report", "harness.sinks", "harness.cli",
                         "harness.run", "harness.sim", "harness.capacity"),
}


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for p in ROOT.rglob("*.py"):
        parts = p.relative_to(ROOT.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


MODULES = _modules()


def _imports(path: pathlib.Path) -> set[str]:
    """Modules named by any import statement, wherever it stands (``from a import b`` gives a, and a.b when that
    is a module; ``from a import b`` where b is a module names only a.b, since a is a package already run)."""
    out: set[str] = set()
    for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(n, ast.Import):
            out.update(a.name for a in n.names)
        elif isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
            subs = {f"{n.module}.{a.name}" for a in n.names if f"{n.module}.{a.name}" in MODULES}
            out |= subs
            if len(subs) < len(n.names):  # something other than a submodule is taken from n.module itself
                out.add(n.module)
    return out


def _under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_the_tree_was_found():
    assert len(MODULES) > 50 and "harness.analysis.ledger" in MODULES and "harness.load.master" in MODULES


def test_pure_layers_import_no_glue():
    bad = {m: sorted(i for i in _imports(p) if i.split(".")[0] in GLUE)
           for m, p in MODULES.items() if any(_under(m, pure) for pure in PURE)}
    assert {m: v for m, v in bad.items() if v} == {}


def test_nothing_imports_upward():
    bad = []
    for m, p in MODULES.items():
        for layer, above in UPWARD.items():
            if _under(m, layer):
                bad += [f"{m} imports {i}" for i in _imports(p)
                        if any(_under(i, a) for a in above)]
    assert bad == []


def _unit(module: str) -> str:
    """A module's top-level unit: ``harness.analysis`` for ``harness.analysis.knee``, ``harness.run`` for itself."""
    return ".".join(module.split(".")[:2])


def test_no_two_top_level_units_import_each_other():
    """Beyond module cycles: two units (packages or top-level modules) that import each other are one design split
    in two; the config types a unit's consumers need live in ``harness.spec``."""
    edges: dict[tuple[str, str], str] = {}
    for m, p in MODULES.items():
        for i in _imports(p):
            if i in MODULES and _unit(i) != _unit(m):
                edges.setdefault((_unit(m), _unit(i)), f"{m} -> {i}")
    pairs = sorted(f"{edges[a, b]} and {edges[b, a]}" for a, b in edges if (b, a) in edges and a < b)
    assert pairs == []


def test_no_import_cycle():
    graph = {}
    for m, p in MODULES.items():
        deps = {i for i in _imports(p) if i in MODULES and i != m}
        # importing a.b.c first runs a/__init__ and a/b/__init__
        deps |= {".".join(i.split(".")[:k]) for i in deps for k in range(2, i.count(".") + 1)} - {m}
        graph[m] = deps
    state: dict[str, int] = {}
    cycles = []

    def walk(m: str, path: list[str]) -> None:
        state[m] = 1
        for d in sorted(graph.get(m, ())):
            if _under(m, d):  # a package's own __init__ is already running
                continue
            if state.get(d) == 1:
                cycles.append(" -> ".join([*path[path.index(d):], d]) if d in path else f"{m} -> {d}")
            elif d not in state:
                walk(d, [*path, d])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            walk(m, [m])
    assert cycles == [], "\n".join(cycles)


def test_files_and_functions_fit_in_a_head():
    """No module over 400 lines (``load/``, the glue, under 250), no function over 60 in ``harness/``: past that a
    reader loses the thread (STYLE.md §1)."""
    big = [f"{m}: {n} lines" for m, p in MODULES.items()
           if (n := len(p.read_text(encoding="utf-8").splitlines())) > (250 if _under(m, "harness.load") else 400)]
    long = [f"{m}.{f.name}: {f.end_lineno - f.lineno + 1} lines" for m, p in MODULES.items()
            for f in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.end_lineno - f.lineno + 1 > 60]
    assert big == [] and long == [], big + long


TESTS = ROOT.parent / "tests"


def _test_modules() -> dict[str, pathlib.Path]:
    """tests/**/test_*.py by dotted name (``tests.sinks.test_influx``)."""
    return {".".join(p.relative_to(ROOT.parent).with_suffix("").parts): p for p in TESTS.rglob("test_*.py")}


def _test_modules_imported(source: str, module: str, tests: set[str]) -> set[str]:
    """The test modules of ``tests`` that ``source`` (the module ``module``) imports, in any form: ``import a.b``,
    ``from a.b import x``, ``from a import b`` (b a module), relative (``from .b import x``, ``from . import b``),
    anywhere in the file."""
    package = module.rsplit(".", 1)[0]
    named: set[str] = set()
    for n in ast.walk(ast.parse(source)):
        if isinstance(n, ast.Import):
            for a in n.names:  # import a.b.c names a, a.b and a.b.c
                parts = a.name.split(".")
                named |= {".".join(parts[:k]) for k in range(1, len(parts) + 1)}
        elif isinstance(n, ast.ImportFrom):
            base = n.module or ""
            if n.level:
                up = package.split(".")[:len(package.split(".")) - (n.level - 1)]
                base = ".".join([*up, base] if base else up)
            named |= {base, *(f"{base}.{a.name}" for a in n.names)}
    return (named & tests) - {module}


def test_no_test_module_imports_another():
    """docs/architecture.md's "Tests": a helper or case table that several test modules need lives in tests/kit/;
    a test module imported by another runs its own module-level code there, and ties the two files' edits."""
    tests = set(_test_modules())
    assert len(tests) > 100 and "tests.client.test_fast_path" in tests
    bad = {m: sorted(_test_modules_imported(p.read_text(encoding="utf-8"), m, tests))
           for m, p in _test_modules().items()}
    assert {m: v for m, v in bad.items() if v} == {}


def test_the_test_import_check_sees_every_form():
    tests = {"tests.a.test_x", "tests.a.test_y", "tests.b.test_z"}
    forms = {
        "from tests.a.test_y import helper": {"tests.a.test_y"},
        "from tests.a import test_y": {"tests.a.test_y"},
        "import tests.b.test_z": {"tests.b.test_z"},
        "import tests.b.test_z as z": {"tests.b.test_z"},
        "from .test_y import helper": {"tests.a.test_y"},
        "from . import test_y, test_x": {"tests.a.test_y"},
        "from ..b.test_z import helper": {"tests.b.test_z"},
        "from ..b import test_z": {"tests.b.test_z"},
        "def f():\n    from tests.b.test_z import helper": {"tests.b.test_z"},
        "from tests.kit.run import kneecap_run": set(),
        "from tests.a.test_x import helper": set(),  # itself
        "import tests.a": set(),
    }
    got = {src: _test_modules_imported(src, "tests.a.test_x", tests) for src in forms}
    assert got == forms


def test_every_type_ignore_says_why():
    """mypy (``.ci/run``) fails on an ignore that answers nothing; one that answers something says what, after it on
    its line or as a comment on the line above, so the next reader can tell whether it still holds."""
    import re

    bare = []
    for m, p in MODULES.items():
        lines = p.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            if "# type: ignore" not in line:
                continue
            after = re.search(r"# type: ignore(\[[^\]]*\])?\s*#\s*\S", line)
            above = i > 0 and lines[i - 1].strip().startswith("#")
            if not (after or above):
                bare.append(f"{m}:{i + 1}")
    assert bare == []
