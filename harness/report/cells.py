"""Cells of the report's tables: escaped text, load levels as written, shares, one table. Pure."""

from __future__ import annotations

import html

from msgspec import UNSET

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
    if isinstance(x, int):
        return f"{x:,}"
    digits = 0 if abs(x) >= 100 else 1 if abs(x) >= 10 else 2
    return f"{x:,.{digits}f}"


def share(v: object, missing: str = "not reported") -> str:
    return f"{100 * v:.1f}%" if isinstance(v, (int, float)) and not isinstance(v, bool) else missing


def table(head: list, rows: list[list], note: str) -> str:
    return ("<table><tr>" + "".join(f"<th>{e(h)}</th>" for h in head) + "</tr>"
            + "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>" for r in rows) + "</table>"
            + f"<p>{note}</p>")
