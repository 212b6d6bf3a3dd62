"""The report's "Answers under load" (``verify:``): the share of greedy answers that changed against load beside the
knee metric's p99, and per step the counts, where they first differed and one example (``analysis.answers``)."""

from __future__ import annotations

import matplotlib.pyplot as plt
from msgspec import UnsetType

from harness.analysis.counted import not_counted
from harness.analysis.results import level_key, level_unit
from harness.analysis.summary_model import Step, Summary
from harness.report.cells import e, n, table
from harness.report.charts import svg_text

__all__ = ["answers_section"]


def _seen(summary: Summary) -> list[Step]:
    return sorted((s for s in summary.steps if not isinstance(s.verify, UnsetType)), key=lambda s: s.level)


def answers_section(summary: Summary) -> str:
    """The chart and the table; "" when no step compared an answer."""
    steps = _seen(summary)
    if not steps:
        return ""
    key = level_key(summary.mode)
    rows = []
    for s in steps:
        v = s.verify
        assert not isinstance(v, UnsetType)
        x = v.examples[0] if v.examples else None
        rows.append([n(s.level), v.verified, v.changed, f"{100 * v.changed_share:.1f}%",
                     "" if v.first_difference_median is None else v.first_difference_median,
                     f"prompt {x.prompt}: “{x.reference[:60]}” → “{x.answer[:60]}”" if x else ""])
    return _chart(summary, steps) + table(
        [key, "compared", "changed", "share", "first difference (word, median)", "example"], rows,
        "Greedy answers (temperature 0) to the reference prompts, re-asked at every load and compared word by word "
        f"with the answers given at the start (docs/verify.md). {e(_first(summary, steps))}")


def _first(summary: Summary, steps: list[Step]) -> str:
    changed = next((s for s in steps if not isinstance(s.verify, UnsetType) and s.verify.changed), None)
    return "The answers were the same at every load." if changed is None else \
        f"Answers first changed at {changed.level:g} {level_unit(summary.mode)}."


def _nan(v: float | None) -> float:
    return float("nan") if v is None else v


def _chart(summary: Summary, steps: list[Step]) -> str:
    metric = summary.knee.metric or "ttft"
    fig, ax = plt.subplots(figsize=(8.4, 3.0))
    loads = [s.level for s in steps]
    ax.plot(loads, [100 * s.verify.changed_share for s in steps if not isinstance(s.verify, UnsetType)], "-",
            color="tab:purple", marker="o", markersize=4, label="answers changed (%)")
    ax.set_ylabel("answers changed (%)")
    ax.set_ylim(bottom=0)
    counted = [s for s in steps if not_counted(s) is None and metric in s.latency_ms and s.latency_ms[metric].count]
    ax2 = ax.twinx()
    ax2.plot([s.level for s in counted], [_nan(s.latency_ms[metric].p99) for s in counted], "--", color="tab:red",
             marker="s", markersize=3, label=f"{metric.upper()} p99 (ms)")
    ax2.set_ylabel(f"{metric} p99 (ms)")
    ax2.grid(False)
    level = summary.knee.level
    if summary.knee.found and level is not None:
        ax.axvline(level, color="crimson", linestyle=":", linewidth=1.2, label=f"knee ({level:g})")
    ax.set_xlabel(level_key(summary.mode).replace("_", " "))
    ax.set_title("Answers changed and p99 vs load")
    lines, lines2 = ax.get_legend_handles_labels(), ax2.get_legend_handles_labels()
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], fontsize=7, loc="upper left")
    return svg_text(fig)
