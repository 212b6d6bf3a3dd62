"""harness/load/wiring.py patches Locust in three places. These tests fail when a Locust upgrade makes a patch wrong
(it would no longer take effect, or would change what Locust does) or unnecessary (Locust fixed it), so the
patch gets revisited instead of lingering. They read Locust's source (ast) rather than running a fleet.

1. ``default_args_dict`` is wrapped in an ``lru_cache``: ``WorkerRunner.handle_message`` calls it once per
   option of every spawn message, and each call builds a whole argument parser (a 100-200 ms worker stall).
2. Shape runs get our own SIGTERM handler: in ``locust.main.main`` a headless run starts (and a shape run is
   joined) before Locust installs its SIGTERM handler, so without ours a shape run dies without results.
3. The master's fixed waits at its end (``harness/load/locust_waits.py``): ``MasterRunner.quit`` is replaced by one
   that waits for the workers' ``quit`` instead of 0.5 s (four calls at a headless shape run's end: ~2 s a run).

pyproject.toml bounds Locust to the minor version these tests were last run against, so a user's install cannot
take a Locust the patches were not checked on.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from types import ModuleType

import pytest


@pytest.fixture(scope="module")
def locust() -> ModuleType:
    """Locust (and harness.load.wiring), imported without gevent's monkey-patching: these tests only read code,
    and the rest of this pytest process keeps plain threads and sockets (tests/load/test_run.py uses both)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOCUST_SKIP_MONKEY_PATCH", "1")  # read by locust/__init__.py, only on first import
        import locust.argument_parser
        import locust.main
        import locust.runners

        import harness.load.wiring  # noqa: F401 - imported here, under the same setting
    return locust


def test_locust_is_bounded_to_the_version_the_patches_were_checked_on():
    from importlib.metadata import requires, version

    from packaging.requirements import Requirement

    deps = [Requirement(d) for d in requires("kneecap") or ()]  # the installed metadata: pyproject.toml's
    (spec,) = [d.specifier for d in deps if d.name == "locust"]
    assert any(s.operator == "<" for s in spec), "locust needs an upper bound: the patches are checked per version"
    assert version("locust") in spec


def _function(func: Callable[..., object]) -> ast.FunctionDef:
    node = ast.parse(textwrap.dedent(inspect.getsource(func))).body[0]
    assert isinstance(node, ast.FunctionDef)
    return node


def _is_call(node: ast.AST, attr: str, owner: str | None = None) -> bool:
    """``owner.attr(...)`` (any owner when None), or ``attr(...)`` when owner is ''."""
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    if owner == "":
        return isinstance(f, ast.Name) and f.id == attr
    return isinstance(f, ast.Attribute) and f.attr == attr and (
        owner is None or (isinstance(f.value, ast.Name) and f.value.id == owner))


# -- 1. default_args_dict -------------------------------------------------------------------------------------


def test_locust_itself_does_not_cache_default_args_dict(locust):
    source = inspect.getsource(locust.argument_parser)
    defs = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef) and n.name == "default_args_dict"]
    assert len(defs) == 1, "locust.argument_parser.default_args_dict is gone: update wiring._cache_locust_default_args"
    assert not defs[0].decorator_list, "Locust decorates default_args_dict now (cached?): the lru_cache may be moot"
    calls = {n.func.id for n in ast.walk(defs[0]) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert "get_empty_argument_parser" in calls, "default_args_dict no longer builds a parser: is caching needed?"


def test_worker_spawn_handling_calls_default_args_dict_per_option(locust):
    runners = locust.runners
    assert runners.argument_parser is locust.argument_parser  # so patching the module attribute reaches it
    handler = _function(runners.WorkerRunner.handle_message)
    comps = [c for c in ast.walk(handler) if isinstance(c, ast.DictComp)
             and any(_is_call(n, "default_args_dict", "argument_parser") for n in ast.walk(c))]
    assert comps, ("WorkerRunner.handle_message no longer calls argument_parser.default_args_dict() inside a dict "
                   "comprehension (once per option): the lru_cache patch in harness/load/wiring.py may be unnecessary, "
                   "or no longer reach Locust's call")
    # The cached dict is shared between calls: that is right only while Locust just tests membership in it.
    parents = {id(child): node for comp in comps for node in ast.walk(comp) for child in ast.iter_child_nodes(node)}
    for comp in comps:
        for call in (n for n in ast.walk(comp) if _is_call(n, "default_args_dict")):
            parent = parents[id(call)]
            assert isinstance(parent, ast.Compare) and call in parent.comparators, ast.unparse(parent)
            assert all(isinstance(op, (ast.In, ast.NotIn)) for op in parent.ops), ast.unparse(parent)


def test_patch_caches_and_returns_the_same_dict(locust, monkeypatch):
    from harness.load import wiring

    original = locust.argument_parser.default_args_dict
    original = getattr(original, "__wrapped__", original)  # an earlier setup() in this process may have wrapped it
    monkeypatch.setattr(locust.argument_parser, "default_args_dict", original)
    wiring._cache_locust_default_args()
    cached = locust.argument_parser.default_args_dict
    assert cached.__wrapped__ is original and cached.cache_info().currsize == 0
    first = cached()
    assert cached() is first and cached.cache_info().hits == 1  # computed once
    assert first == original()  # ... and the same defaults Locust computes
    wiring._cache_locust_default_args()  # idempotent: a second setup() does not wrap the cache again
    assert locust.argument_parser.default_args_dict is cached


# -- 2. SIGTERM during a headless shape run --------------------------------------------------------------------


def _first_statement(body: list[ast.stmt], found: Callable[[ast.AST], bool]) -> int:
    """Index of the first statement of main() that contains a node for which ``found`` holds; nested function
    bodies are skipped, as they run later."""
    for i, stmt in enumerate(body):
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if any(found(n) for n in ast.walk(stmt)):
            return i
    raise AssertionError("not found in locust.main.main")


def _is_sigterm_handler(node: ast.AST) -> bool:
    return (_is_call(node, "signal_handler", "gevent") and isinstance(node, ast.Call) and bool(node.args)
            and ast.unparse(node.args[0]) == "signal.SIGTERM")


def _is_init_fire(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and ast.unparse(node.func) == "environment.events.init.fire"


def test_locust_installs_its_sigterm_handler_only_after_a_headless_run(locust):
    body = _function(locust.main.main).body
    init = _first_statement(body, _is_init_fire)
    headless = _first_statement(body, lambda n: _is_call(n, "start_automatic_run", ""))
    sigterm = _first_statement(body, _is_sigterm_handler)
    assert "options.headless" in ast.unparse(body[headless]).splitlines()[0]
    assert init < headless, "Locust fires init after starting a headless run: wiring.py's handler would come too late"
    assert headless < sigterm, ("Locust now installs its SIGTERM handler before a headless run starts: the handler "
                                "harness/load/wiring.py installs for shape runs may be unnecessary")


def test_a_headless_shape_run_blocks_until_the_shape_ends(locust):
    start = next(n for n in ast.walk(_function(locust.main.main))
                 if isinstance(n, ast.FunctionDef) and n.name == "start_automatic_run")
    joins = [n for n in ast.walk(start) if _is_call(n, "join") and ast.unparse(n.func).endswith("shape_greenlet.join")]
    assert joins, ("start_automatic_run no longer waits for the shape greenlet: Locust's SIGTERM handler may now be "
                   "in place during a shape run, making wiring.py's own one unnecessary")


# -- 3. the master's fixed waits -------------------------------------------------------------------------------


def test_locust_quit_is_what_ours_mirrors(locust):
    """Ours is Locust's ``MasterRunner.quit`` with its fixed sleep made a wait for the workers: stop without telling
    the workers, ``quit`` to each, sleep 0.5 s, kill the runner's greenlets. A change there means revisiting ours."""
    body = _function(locust.runners.MasterRunner.quit)
    text = ast.unparse(body)
    assert "self.stop(send_stop_to_client=False)" in text, text
    assert "Message('quit', None, client.id)" in text and "for client in self.clients.all" in text, text
    sleeps = [n for n in ast.walk(body) if _is_call(n, "sleep", "gevent")]
    assert [ast.unparse(n.args[0]) for n in sleeps] == ["0.5"], text
    assert "self.greenlet.kill(block=True)" in text, text


class _Clients:
    def __init__(self, ids: list[str]) -> None:
        self.ids = ids

    @property
    def all(self) -> list:
        return [type("Client", (), {"id": i})() for i in self.ids]


@pytest.mark.parametrize("answers", [True, False])
def test_quit_waits_for_the_workers_quit_not_a_fixed_half_second(locust, answers):
    """A fake runner (Locust's runner needs a fleet): the workers answer ``quit`` after 50 ms; the quit ends then,
    not 0.5 s after. A worker that never answers gets the whole 0.5 s, as from Locust."""
    import time

    import gevent
    import gevent.pool

    from harness.load.locust_waits import QUIT_WAIT_S, quit_when_workers_have

    sent, clients = [], _Clients(["w1", "w2"])
    runner = type("Runner", (), {})()
    runner.clients = clients
    runner.stop = lambda send_stop_to_client: sent.append(("stop", send_stop_to_client))
    runner.server = type("Server", (), {"send_to_client": lambda self, msg: sent.append((msg.type, msg.node_id))})()
    runner.greenlet = gevent.pool.Group()
    quit_when_workers_have(runner)
    if answers:
        gevent.spawn_later(0.05, clients.ids.clear)
    t = time.monotonic()
    runner.quit()
    took = time.monotonic() - t
    assert sent == [("stop", False), ("quit", "w1"), ("quit", "w2")]
    assert (took < QUIT_WAIT_S / 2) if answers else (took >= QUIT_WAIT_S), took
