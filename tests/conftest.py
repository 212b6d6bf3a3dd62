"""Shared fixtures: a real simulator process shared by a module (``tests/kit/sim.py``), and the lanes of
``pytest -n`` (``tests/kit/lanes.py``). Helpers live in ``tests/kit``; test modules import them from there."""

from __future__ import annotations

import os
import pathlib
import shutil
import tempfile
from collections.abc import Iterator

import pytest

from tests.kit.lanes import lane
from tests.kit.sim import SimProcess, start_sim

# Locust monkey-patches the whole process with gevent when first imported (locust/__init__.py). In a pytest-xdist
# worker that breaks xdist's own thread (gevent's LoopExit when the worker waits for its next test), and in one
# process it made every test after the first Locust import run patched. Import it once here, unpatched (as
# tests/load/test_hub.py does): in-process tests get plain threads; the processes the tests start patch themselves.
os.environ["LOCUST_SKIP_MONKEY_PATCH"] = "1"
try:
    import locust  # noqa: F401
finally:
    del os.environ["LOCUST_SKIP_MONKEY_PATCH"]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """Under ``pytest -n``, a test marked ``timing`` runs with no other test beside it (``tests/kit/lanes.py``)."""
    if not hasattr(item.config, "workerinput"):  # not an xdist worker: nothing runs beside anything
        return (yield)
    folder = pathlib.Path(item.config.workerinput["lanes_dir"])
    with lane(folder, alone=item.get_closest_marker("timing") is not None):
        return (yield)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """xdist (controller): every worker locks in the same folder, this session's."""
    node.workerinput["lanes_dir"] = str(node.config._lanes_dir)


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):
        config._lanes_dir = pathlib.Path(tempfile.mkdtemp(prefix="kneecap-lanes-"))


def pytest_unconfigure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):
        shutil.rmtree(config._lanes_dir, ignore_errors=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Longest first: tests that start real processes (marked ``integration``, most of the suite's wall time, mostly
    waiting) run before the quick pure ones, so that with ``-n`` (pytest-xdist, README) the quick ones fill the gaps
    instead of a long run starting last; a module sharing one real run (an ``xdist_group``) before the rest. Tests
    marked ``timing`` come last, one at a time on a machine the others have left (``tests/kit/lanes.py``)."""
    items.sort(key=lambda item: (item.get_closest_marker("timing") is not None,
                                 item.get_closest_marker("integration") is None,
                                 item.get_closest_marker("xdist_group") is None))


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    """A tiny-preset simulator (8 slots, fast iterations) shared by a test module."""
    with start_sim("--preset", "tiny", "--stall-s", "0.5", "--long-line-bytes", "70000", "--eos-median", "30") as s:
        yield s
