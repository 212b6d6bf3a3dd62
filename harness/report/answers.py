"""The report's "Answers under load" (``verify:``): the share of greedy answers that changed (and that failed the
scenario's checks) against load beside the knee metric's p99, and per step the counts, where they first differed and
one example of each (``analysis.answers``)."""

from __future__ import annotations

import matplotlib.pyplot as plt
from msgspec import UnsetType

from harness.analysis.counted import not_counted
from harness.report.cells import e, n, table
from harness.report.charts import svg_text
from harness.summary import Step, Summary, level_key, level_unit

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
        rows.append([n(s.level), v.verified, v.changed, _share(v.changed_share),
                     "" if v.first_difference_median is None else v.first_difference_median,
                     f"prompt {x.prompt}: “{x.reference[:60]}” → “{x.answer[:60]}”" if x else ""])
    out = _chart(summary, steps) + table(
        [key, "compared", "changed", "share", "first difference (word, median)", "example"], rows,
        "Greedy answers (temperature 0) to the reference prompts, re-asked at every load and compared word by word "
        f"with the answers given at the start (docs/verify.md). {e(_first(summary, steps))}")
    checked = [s for s in steps if not isinstance(s.verify, UnsetType) and s.verify.checked]
    if checked:
        out += table([key, "checked", "failed", "share", "failed by", "example"], [_check_row(s) for s in checked],
                     "Every answer the verify requests got, checked against the scenario's verify.check (a regex, "
                     "JSON, a JSON Schema) and a prompt file's contains.")
    return out


def _check_row(s: Step) -> list:
    v = s.verify
    assert not isinstance(v, UnsetType)
    x = v.check_examples[0] if v.check_examples else None
    return [n(s.level), v.checked, v.failed, _share(v.failed_share),
            ", ".join(f"{k}: {c}" for k, c in v.failed_by.items()),
            f"prompt {x.prompt} ({x.failed}): “…{x.answer[-60:]}”" if x else ""]


def _share(v: float | None) -> str:
    return "" if v is None else f"{100 * v:.1f}%"


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
    views = [s.verify for s in steps if not isinstance(s.verify, UnsetType)]
    ax.plot(loads, [100 * _nan(v.changed_share) for v in views], "-", color="tab:purple", marker="o", markersize=4,
            label="answers changed (%)")
    if any(v.checked for v in views):
        ax.plot(loads, [100 * _nan(v.failed_share) for v in views], "-", color="tab:orange", marker="^",
                markersize=4, label="answers failing checks (%)")
    ax.set_ylabel("answers (%)")
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
