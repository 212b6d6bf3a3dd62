"""The exception tree drawn in harness/errors.py is the one in the code: every KneecapError subclass, where it lives.

Read from the source (ast), not by importing every module: importing harness.load would import Locust, which
monkey-patches this test process."""

from __future__ import annotations

import ast
import os
import re

from harness import errors

HARNESS = os.path.dirname(os.path.abspath(errors.__file__))


def _base_names(node: ast.ClassDef) -> set[str]:
    return {b.id if isinstance(b, ast.Name) else b.attr for b in node.bases if isinstance(b, (ast.Name, ast.Attribute))}


def _kneecap_errors() -> dict[str, str]:
    """Every subclass of KneecapError under harness/, direct or not: class name -> path relative to harness/."""
    classes: list[tuple[ast.ClassDef, str]] = []
    for folder, _, files in os.walk(HARNESS):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as f:
                    tree = ast.parse(f.read())
                rel = os.path.relpath(path, HARNESS).replace(os.sep, "/")
                classes += [(n, rel) for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    found: dict[str, str] = {}
    known = {"KneecapError"}
    while True:
        new = {n.name: rel for n, rel in classes if n.name not in known and _base_names(n) & known}
        if not new:
            return found
        found.update(new)
        known |= set(new)


def test_docstring_draws_every_kneecap_error_where_it_lives():
    drawn = dict(re.findall(r"^\s+[├└]── (\w+)\s+([\w/]+\.py):", errors.__doc__ or "", flags=re.MULTILINE))
    assert drawn == _kneecap_errors()
