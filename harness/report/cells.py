"""Cells of the report's tables: escaped text, load levels as written, shares, one table. Pure."""

from __future__ import annotations

import html

from msgspec import UNSET

__all__ = ["e", "n", "share", "table"]


def e(x: object) -> str:
    return html.escape("" if x is None or x is UNSET else str(x))


def n(x: float | None) -> float | int | None:
    """A load level as the file has it: 16, not 16.0 (levels are users or req/s, mostly whole)."""
    return int(x) if isinstance(x, float) and x.is_integer() else x


def share(v: object, missing: str = "not reported") -> str:
    return f"{100 * v:.1f}%" if isinstance(v, (int, float)) and not isinstance(v, bool) else missing


def table(head: list, rows: list[list], note: str) -> str:
    return ("<table><tr>" + "".join(f"<th>{e(h)}</th>" for h in head) + "</tr>"
            + "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>" for r in rows) + "</table>"
            + f"<p>{note}</p>")
