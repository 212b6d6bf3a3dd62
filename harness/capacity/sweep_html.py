"""``sweep.html``: a sweep's capacity map as one self-contained page (inline SVG from matplotlib, no network).

It draws ``capacity_map``'s body (``sweep.json``) and nothing else: the best cell's sentence, the cells' table with
a link to each cell's ``report.html`` (relative, so the sweep folder can move), the frontier chart and its
points, and the cells without a result with their error. Every string from the data is escaped: cell names and
errors come from the user's YAML and the server's answers.
"""

from __future__ import annotations

import html
import json
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import quote

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from harness.capacity.capacity_map import best_line
from harness.report.charts import svg_text

if TYPE_CHECKING:
    from matplotlib.colors import ListedColormap

__all__ = ["frontier_chart", "sweep_page"]

_CSS = """body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1100px;color:#222}
h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ddd;padding:3px 6px;text-align:right}
td.l,th.l{text-align:left}th{background:#f4f4f4}.best{font-size:16px;padding:10px;background:#f6f8fa;
border-left:4px solid #1a7f37}.fail{color:#cf222e}.muted{color:#666;font-size:12px}svg{max-width:100%;height:auto}"""
_LABEL_CHARS = 48
"""Chart labels longer than this are cut (the table has the whole name)."""


def _e(x: object) -> str:
    return html.escape("" if x is None else str(x))


def _num(x: float | None, fmt: str = ",.1f") -> str:
    return "—" if x is None else format(x, fmt)


def _tex_safe(text: str) -> str:
    """A label as matplotlib should print it: a ``$`` would start mathtext (and an odd one raise); cut long ones."""
    text = text if len(text) <= _LABEL_CHARS else text[:_LABEL_CHARS - 1] + "…"
    return text.replace("$", r"\$")


def frontier_chart(frontier: dict[str, Any], cells: list[dict[str, Any]]) -> str:
    """Output tokens/s against tokens/s per user: every counted step faint in its cell's colour, steps that do not
    count as grey crosses, the Pareto frontier joined and each of its points labelled "cell @ load"; "" without
    a point to draw."""
    points = [p for p in frontier["points"] if p["x"] is not None]
    if not points:
        return ""
    cmap = cast("ListedColormap", plt.get_cmap("tab10" if len(cells) <= 10 else "tab20"))  # both are listed
    palette = cast("tuple[tuple[float, float, float], ...]", cmap.colors)  # theirs: RGB tuples
    colour = {c["index"]: palette[i % len(palette)] for i, c in enumerate(cells)}
    fig, ax = plt.subplots(figsize=(8.0, 4.8))
    for c in cells:
        mine = [p for p in points if p["cell"] == c["index"] and p["excluded"] is None]
        if mine:
            ax.scatter([p["x"] for p in mine], [p["y"] for p in mine], color=colour[c["index"]], alpha=0.3, s=22,
                       label=_tex_safe(c["name"]))
    out = [p for p in points if p["excluded"] is not None]
    if out:
        ax.scatter([p["x"] for p in out], [p["y"] for p in out], color="gray", marker="x", alpha=0.4, s=18,
                   label="not counted (unreliable or incomplete)")
    front = [frontier["points"][i] for i in frontier["pareto"]]
    if front:
        ax.plot([p["x"] for p in front], [p["y"] for p in front], color="black", linewidth=1.2, zorder=2,
                label="Pareto frontier")
        ax.scatter([p["x"] for p in front], [p["y"] for p in front], color=[colour[p["cell"]] for p in front],
                   edgecolors="black", s=40, zorder=3)
        middle = (min(p["x"] for p in points) + max(p["x"] for p in points)) / 2
        for p in front:  # right of the middle, the label goes left of its point: it stays inside the axes
            right = p["x"] > middle
            ax.annotate(_tex_safe(p["label"]), (p["x"], p["y"]), textcoords="offset points",
                        xytext=(-4 if right else 4, 4), ha="right" if right else "left", fontsize=6)
    ax.set_xlabel("tokens/s per user (median per request)")
    ax.set_ylabel("output tokens/s (total)")
    ax.set_title("Throughput against interactivity, every step of every cell")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return svg_text(fig)


def _cost(at: dict[str, Any] | None) -> str:
    c = at and at.get("cost")
    if not c:
        return "—"
    cur, parts = c["currency"], []
    if c["flat_per_mtok"] is not None:
        parts.append(f"flat {c['flat_per_mtok']:.3g} {cur}")
    if c["metered_blended_per_mtok"] is not None:
        parts.append(f"metered {c['metered_blended_per_mtok']:.3g} {cur}")
    return _e(", ".join(parts) if parts else "; ".join(c["notes"]))


def _link(cell: dict[str, Any]) -> str:
    href = html.escape(quote(cell["report"]), quote=True)  # quoted: a name's ":" cannot make it a scheme
    return f"<a href='{href}'>{_e(cell['name'])}</a>"


def _knee(cell: dict[str, Any]) -> str:
    k = cell["knee"]
    if not k["found"]:
        return "none found"
    return f"{k['load']:g} {_e(cell['unit'])} ({_e(k['confidence'])}, {_e(k['metric'])})"


def _row(cell: dict[str, Any]) -> str:
    if not cell["result"]:
        cols = [cell["index"], None, cell["exit_code"], "no result", "—", "—", "—", "—", "—", cell["error"]]
        cells = [_e(c) for c in cols]
        cells[1], cells[-1] = _link(cell), f"<span class='fail'>{_e(cell['error'])}</span>"
    else:
        w = cell["within_slo"]
        within = "no SLO" if not cell["slo"]["thresholds"] else "none" if w is None else f"{w['load']:g} {cell['unit']}"
        notes = [cell["within_slo_note"]] + ([f"{len(cell['excluded_steps'])} step(s) not counted"]
                                              if cell["excluded_steps"] else [])
        cells = [_e(cell["index"]), _link(cell), _e(cell["exit_code"]), _knee(cell), _e(within),
                 _num(w and w["requests_per_s"], ",.2f"), _num(w and w["output_tokens_per_s"], ",.0f"),
                 _num(w and w["tokens_per_s_per_user_p50"]), _cost(w), _e("; ".join(n for n in notes if n))]
    return "<tr>" + "".join(f"<td class='l'>{c}</td>" if i in (1, 9) else f"<td>{c}</td>"
                            for i, c in enumerate(cells)) + "</tr>"


def _cells_table(cells: list[dict[str, Any]]) -> str:
    head = ["#", "cell (its report)", "exit", "knee", "largest load within SLO", "req/s there", "out tok/s there",
            "tok/s per user p50 there", "per 1M output tokens there", "notes"]
    return ("<table><tr>" + "".join(f"<th class='l'>{h}</th>" if i in (1, 9) else f"<th>{h}</th>"
                                    for i, h in enumerate(head)) + "</tr>"
            + "".join(_row(c) for c in cells) + "</table>"
            + "<p class='muted'>Within SLO: every SLO held at that load and at every lighter one, over complete "
              "steps with a reliable load generator. Per 1M output tokens: flat = the deployment's price over its "
              "throughput at that load; metered = the price list with the input that comes with the output "
              "(docs/cost.md).</p>")


def _points_table(frontier: dict[str, Any]) -> str:
    front = [frontier["points"][i] for i in frontier["pareto"]]
    if not front:
        return "<p>No counted step to put on a frontier.</p>"
    rows = "".join(f"<tr><td class='l'>{_e(p['label'])}</td><td>{_num(p['x'])}</td><td>{_num(p['y'], ',.0f')}</td>"
                   f"<td>{_num(p['requests_per_s'], ',.2f')}</td><td>{_e(p['slo_passed'])}</td></tr>" for p in front)
    return ("<table><tr><th class='l'>cell @ load</th><th>tok/s per user p50</th><th>out tok/s</th><th>req/s</th>"
            f"<th>SLO passed</th></tr>{rows}</table>")


def _facts(sweep: dict[str, Any]) -> str:
    items = "".join(f"<li>{_e(k)}: {_e(v if isinstance(v, str) else json.dumps(v, default=str))}</li>"
                    for k, v in sweep.items() if v is not None)  # "serve: null" says nothing
    return f"<ul class='muted'>{items}</ul>" if items else ""


def sweep_page(map: dict[str, Any]) -> str:
    """``sweep.html`` from ``capacity_map``'s body."""
    sweep, cells, frontier = map["sweep"], map["cells"], map["frontier"]
    title = f"kneecap sweep {sweep.get('name', '')}".strip()
    chart = frontier_chart(frontier, [c for c in cells if c["result"]])
    failed = "".join(f"<li>{_e(f['name'])} (<code>{_e(f['run_dir'])}</code>, exit {_e(f['exit_code'])}): "
                     f"<span class='fail'>{_e(f['error'])}</span></li>" for f in map["failed"])
    body = (f"<h1>{_e(title)}</h1><div class='best' id='best'>{_e(best_line(map['best']))}</div>{_facts(sweep)}"
            f"<h2>Cells</h2>{_cells_table(cells)}"
            f"<h2>Throughput against interactivity</h2>{chart or '<p>No step streamed tokens: nothing to draw.</p>'}"
            "<p class='muted'>x: each step's median tokens/s per user (per request (n − 1) / (E2E − TTFT)); y: its "
            "output tokens/s. A point is on the frontier when no other counted step is at least as high on both "
            "axes and higher on one. Steps cut short or with an unreliable load generator are not counted.</p>"
            f"<h3>The frontier's points</h3>{_points_table(frontier)}"
            + (f"<h2>Cells without a result</h2><ul>{failed}</ul>" if failed else ""))
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{_e(title)}</title>"
            f"<style>{_CSS}</style></head><body>{body}</body></html>")
