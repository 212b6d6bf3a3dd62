"""Cells of the report's tables: escaped text, load levels as written, shares, one table. Pure."""

from __future__ import annotations

import html

from msgspec import UNSET

from harness.analysis.plain import figure

__all__ = ["e", "fig", "n", "share", "table"]


def e(x: object) -> str:
    return html.escape("" if x is None or x is UNSET else str(x))


def n(x: float | None) -> float | int | None:
    """A load level as the file has it: 16, not 16.0 (levels are users or req/s, mostly whole)."""
    return int(x) if isinstance(x, float) and x.is_integer() else x


def fig(x: object) -> object:
    """A figure at the precision a reader uses: 4,807 and 1,051 (not 4806.659, 1051.22), 36.5, 8.94; text ("inf")
    and None as they are."""
    if not isinstance(x, int | float) or isinstance(x, bool):
        return x
    return f"{x:,}" if isinstance(x, int) else figure(x)


def share(v: object, missing: str = "not reported") -> str:
    return f"{100 * v:.1f}%" if isinstance(v, (int, float)) and not isinstance(v, bool) else missing


def table(head: list, rows: list[list], note: str) -> str:
    return ("<table><tr>" + "".join(f"<th>{e(h)}</th>" for h in head) + "</tr>"
            + "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>" for r in rows) + "</table>"
            + f"<p>{note}</p>")
