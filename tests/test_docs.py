"""The README and docs/ link to files and headings that exist (the reference moved to docs/; links must follow)."""

from __future__ import annotations

import glob
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = [os.path.join(ROOT, "README.md"), *sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))]


def _anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: str) -> set[str]:
    with open(path, encoding="utf-8") as f:
        return {_anchor(m) for m in re.findall(r"^#+ (.+)$", f.read(), flags=re.MULTILINE)}


def test_docs_folder_has_the_reference_pages():
    assert {os.path.basename(p) for p in PAGES} >= {"results.md", "simulator.md", "influxdb.md", "compose.md"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: os.path.relpath(p, ROOT))
def test_relative_links_resolve(page):
    with open(page, encoding="utf-8") as f:
        targets = re.findall(r"\]\(([^)\s]+)\)", f.read())
    for target in targets:
        if re.match(r"[a-z]+:", target):  # http(s), mailto: not checked here
            continue
        path, _, anchor = target.partition("#")
        full = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
        assert os.path.exists(full), f"{os.path.relpath(page, ROOT)} links to missing {target}"
        if anchor:
            assert anchor in _anchors(full), f"{os.path.relpath(page, ROOT)} links to missing heading {target}"
