"""A sweep file read and checked: the base scenario, its matrix, how each cell's server starts. Pure.

A sweep is many ``kneecap run``s of one base scenario, one per *cell* of a matrix::

    name: slots-by-prompt
    scenario: chat.yaml                  # relative to this file; none: the built-in default
    matrix:                              # scenario fields by dotted key -> the values to try
      workload.input_tokens.median: [256, 2048]
    serve:                               # optional: kneecap starts the server for each set of params
      cmd: "vllm serve m --port {port} --max-num-seqs {max_num_seqs}"
      params: {max_num_seqs: [64, 128]}
      ready: /health                     # polled until it answers 2xx
      timeout_s: 600
    sim: {max_num_seqs: [4, 8]}          # without serve: the built-in simulator's flags per cell
    between: [{post: /reset_prefix_cache}, {cmd: "./flush.sh"}]   # before each cell

Cells are the product of the server's params (outer: one launch serves every scenario cell of its params)
and the matrix (inner), in the file's order. Every cell's scenario is validated here, before anything runs,
so a typo in an axis fails the sweep at once with the scenario's own "did you mean".
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import string
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from harness.checker import Checker
from harness.scenario import DEFAULT_SCENARIO, ScenarioError, apply_overrides, parse_scenario

__all__ = ["Cell", "Hook", "Serve", "SweepError", "SweepSpec", "cells", "parse_sweep"]

PORT = "port"
"""The placeholder kneecap fills with a free port when ``serve.cmd`` names it."""
DEFAULT_READY = "/health"
DEFAULT_TIMEOUT_S = 600.0
_KEYS = ("name", "description", "scenario", "matrix", "serve", "sim", "between")


class SweepError(ScenarioError):
    """A sweep file that cannot run; ``problems`` lists each with its key path (a scenario's error, one level up)."""


@dataclass(frozen=True, kw_only=True)
class Serve:
    cmd: str
    """A command line with ``{param}`` placeholders (split like a shell would, run without one)."""
    params: dict[str, tuple[Any, ...]]
    url: str
    """The server's base URL; ``{port}`` is filled like the command's."""
    ready: str = DEFAULT_READY
    timeout_s: float = DEFAULT_TIMEOUT_S

    def argv(self, values: dict[str, Any]) -> list[str]:
        """The command for one set of params (``values`` holds ``port`` too when the command names it)."""
        import shlex

        return [part.format(**values) for part in shlex.split(self.cmd)]


@dataclass(frozen=True, kw_only=True)
class Hook:
    """A control step before each cell: an HTTP POST to the server (``post``) or a command (``cmd``)."""

    post: str | None = None
    cmd: str | None = None

    def describe(self) -> str:
        return f"POST {self.post}" if self.post else f"run {self.cmd}"


@dataclass(frozen=True, kw_only=True)
class Cell:
    index: int
    """1-based, in the sweep's order."""
    name: str
    params: dict[str, Any]
    """Every axis's value: server params and simulator flags by name, scenario fields by dotted key."""
    overrides: dict[str, Any]
    """The scenario fields this cell sets (``RunOptions.overrides``)."""
    serve_params: dict[str, Any]
    sim_args: tuple[str, ...]
    key: str
    """A hash of everything that defines the cell: a finished cell is skipped on resume only if it matches."""

    @property
    def folder(self) -> str:
        return f"cell-{self.index:02d}"


@dataclass(frozen=True, kw_only=True)
class SweepSpec:
    name: str
    source: str
    scenario: str | None
    """The base scenario file (None: the built-in default)."""
    base_scenario: dict = field(repr=False)
    """The base scenario as a mapping (the file's, or the built-in default's)."""
    base_dir: str
    """The folder the scenario's paths are relative to (its file's)."""
    matrix: dict[str, tuple[Any, ...]]
    serve: Serve | None = None
    sim: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    between: tuple[Hook, ...] = ()
    description: str = ""


def parse_sweep(raw: Any, *, source: str, scenario: tuple[str, object] | None, sim_flags: Iterable[str]) -> SweepSpec:
    """Check a sweep's mapping; ``scenario`` is the file ``scenario:`` named and what it holds, already read (the
    caller reads files; a mapping, checked here; None: the built-in default).

    ``sim_flags``: the built-in simulator's flag names (``max_num_seqs``), which ``sim:`` may set. Raises
    ``SweepError`` with every problem, each cell's scenario problems included."""
    import os

    check = Checker()
    top = check.mapping(raw, "", _KEYS, required=("name",))
    if top is None:
        raise SweepError(source, check.problems)
    name = check.string(top, "name", "", name=True)
    path, base = scenario if scenario is not None else (None, DEFAULT_SCENARIO)
    if not isinstance(base, dict):
        check.fail("scenario", f"{path} is not a scenario: expected a mapping at its top level")
        base = {}
    base_dir = os.path.dirname(os.path.abspath(path)) if path else "."
    matrix = _axes(top.get("matrix", {}), "matrix", check)
    serve = _serve(top["serve"], check) if "serve" in top else None
    sim = _axes(top.get("sim", {}), "sim", check)
    if serve is not None and sim:
        check.fail("sim", "the built-in simulator's flags apply only without serve: put them in serve.cmd")
    host = (base.get("endpoint") or {}).get("host") if isinstance(base.get("endpoint"), dict) else None
    if sim and host:
        check.fail("sim", f"the base scenario's endpoint.host is {host}: the cells load it, so no simulator starts "
                          "to take these flags (drop endpoint.host, or use serve)")
    sim_flags = sorted(sim_flags)
    for flag in sim:
        if flag not in sim_flags:
            check.fail(f"sim.{flag}", f"not a simulator flag{_hint(flag, sim_flags)}")
    spec = SweepSpec(name=name, source=source, scenario=path, base_scenario=base, base_dir=base_dir, matrix=matrix,
                     serve=serve, sim=sim, between=_hooks(top.get("between", []), check),
                     description=str(top.get("description", "")))
    _check_cells(spec, check)  # the scenario's problems too: every problem at once
    if check.problems:
        raise SweepError(source, check.problems)
    return spec


def cells(spec: SweepSpec) -> list[Cell]:
    """Every cell, server params outermost (one launch serves a run of cells), then ``sim``, then the matrix."""
    outer = {**(spec.serve.params if spec.serve else {}), **spec.sim}
    base_hash = _hash({"base": spec.base_scenario, "serve": spec.serve and spec.serve.cmd})
    out = []
    for n, (o, m) in enumerate(itertools.product(_product(outer), _product(spec.matrix)), start=1):
        params = {**o, **m}
        out.append(Cell(index=n, name=_name(params), params=params, overrides=m,
                        serve_params=o if spec.serve else {},
                        sim_args=tuple(f"--{k.replace('_', '-')}={v}" for k, v in o.items()) if spec.sim else (),
                        key=_hash({"base": base_hash, "params": params})))
    return out


def _product(axes: dict[str, tuple[Any, ...]]) -> list[dict[str, Any]]:
    return [dict(zip(axes, values, strict=True)) for values in itertools.product(*axes.values())]


def _name(params: dict[str, Any]) -> str:
    """``max_num_seqs=4, input_tokens.median=256``: a dotted key loses its first part when the rest is unique."""
    short = {k: k.split(".", 1)[1] if "." in k else k for k in params}
    if len(set(short.values())) < len(short):
        short = {k: k for k in params}
    return ", ".join(f"{short[k]}={v}" for k, v in params.items()) or "base"


def _hash(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _hint(key: str, known: Iterable[str]) -> str:
    from harness.checker import did_you_mean

    return did_you_mean(key, list(known))


def _axes(node: Any, path: str, check: Checker) -> dict[str, tuple[Any, ...]]:
    """``{key: [values]}``; a single value is an axis of one (a fixed setting)."""
    if node in (None, {}):
        return {}
    if not isinstance(node, dict):
        check.fail(path, f"expected a mapping of {'field' if path == 'matrix' else 'name'} -> list of values")
        return {}
    out = {}
    for key, values in node.items():
        values = tuple(values) if isinstance(values, list) else (values,)
        if not values:
            check.fail(f"{path}.{key}", "an empty list: give at least one value")
        elif any(isinstance(v, (dict, list)) for v in values) and path != "matrix":
            check.fail(f"{path}.{key}", "values must be numbers or strings")
        elif len({json.dumps(v, sort_keys=True, default=str) for v in values}) < len(values):
            check.fail(f"{path}.{key}", f"a value is repeated: {list(values)}")
        else:
            out[str(key)] = values
    return out


def _serve(node: Any, check: Checker) -> Serve | None:
    top = check.mapping(node, "serve", ("cmd", "params", "url", "ready", "timeout_s"), required=("cmd",))
    if top is None:
        return None
    cmd = check.string(top, "cmd", "serve")
    params = _axes(top.get("params", {}), "serve.params", check)
    ready = check.string(top, "ready", "serve", DEFAULT_READY)
    timeout_s = check.number(top, "timeout_s", "serve", DEFAULT_TIMEOUT_S, above=0, maximum=7200)
    if cmd is None or ready is None or timeout_s is None:
        return None
    if not ready.startswith("/"):
        check.fail("serve.ready", f"expected a path such as /health, got {ready!r}")
    named = _placeholders(cmd, "serve.cmd", check)
    url = check.string(top, "url", "serve", "http://127.0.0.1:{port}" if PORT in named else "http://127.0.0.1:8000")
    if url is None:
        return None
    named_url = _placeholders(url, "serve.url", check)
    for p in sorted((named | named_url) - set(params) - {PORT}):
        check.fail("serve.cmd", f"{{{p}}} is not in serve.params{_hint(p, params)}")
    for p in sorted(set(params) - named):
        check.fail(f"serve.params.{p}", f"serve.cmd does not use {{{p}}}: the cells would all be the same")
    if PORT in params:
        check.fail("serve.params.port", "{port} is filled by kneecap with a free port; do not list it")
    if not re.match(r"^https?://", url):
        check.fail("serve.url", f"expected an http(s) URL, got {url!r}")
    return Serve(cmd=cmd, params=params, url=url, ready=ready, timeout_s=float(timeout_s))


def _placeholders(text: str, path: str, check: Checker) -> set[str]:
    try:
        return {f for _, f, _, _ in string.Formatter().parse(text) if f is not None and f != ""}
    except ValueError as exc:
        check.fail(path, f"{exc} (write a literal brace as {{{{ or }}}})")
        return set()


def _hooks(node: Any, check: Checker) -> tuple[Hook, ...]:
    if not isinstance(node, list):
        check.fail("between", "expected a list of {post: /path} or {cmd: COMMAND}")
        return ()
    out = []
    for i, item in enumerate(node):
        path = f"between[{i}]"
        top = check.mapping(item, path, ("post", "cmd"))
        if top is None:
            continue
        if len(top) != 1:
            check.fail(path, "give exactly one of post or cmd")
            continue
        post, cmd = check.string(top, "post", path, None), check.string(top, "cmd", path, None)
        if post is not None and not post.startswith("/"):
            check.fail(f"{path}.post", f"expected a path on the server such as /reset_prefix_cache, got {post!r}")
        out.append(Hook(post=post, cmd=cmd))
    return tuple(out)


def _check_cells(spec: SweepSpec, check: Checker) -> None:
    """Each cell's scenario must be valid; a problem shared by several cells is said once, with the first."""
    seen: set[str] = set()
    for cell in cells(spec):
        try:
            parse_scenario(apply_overrides(spec.base_scenario, cell.overrides), source=spec.source,
                           base_dir=spec.base_dir)
        except ScenarioError as exc:
            for p in exc.problems:
                if p not in seen:
                    seen.add(p)
                    check.fail("matrix" if cell.overrides else "scenario", f"cell {cell.index} ({cell.name}): {p}")
