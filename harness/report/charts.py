"""Charts as inline SVG (matplotlib, Agg): no JavaScript, no network, a few tens of KB each.

Each function takes typed summaries (``analysis.summary_model.Summary``: one run, or several for ``compare``) and
returns an SVG string.
"""

from __future__ import annotations

import io
from typing import cast

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from msgspec import UnsetType

from harness.analysis.counted import not_counted
from harness.summary import Percentiles, Step, Summary, level_key

__all__ = [
    "capacity",
    "cost_vs_load",
    "errors_vs_load",
    "generator_chart",
    "histogram",
    "latency_vs_load",
    "over_time",
    "overlay",
    "server_vs_load",
    "svg_text",
    "tail_features",
    "throughput_vs_load",
]

plt.rcParams.update({"svg.fonttype": "none", "font.size": 9, "axes.grid": True, "grid.alpha": 0.3,
                     "figure.dpi": 96})


def svg_text(fig: plt.Figure) -> str:
    """The figure as an inline ``<svg>`` element (closed after): no XML prolog or doctype inside HTML."""
    buf = io.StringIO()
    fig.tight_layout()
    fig.savefig(buf, format="svg")
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]


def _level_key(summary: Summary) -> str:
    return level_key(summary.mode)


def _steps(summary: Summary) -> list[Step]:
    """The steps a curve shows, by load (a search visits levels in any order): the counted ones
    (``analysis.counted``): a step cut short, stopped in its warm-up, run while the fleet changed or with a generator
    that could not keep time has no figure of the server at its load, and is never drawn as one (a zero is a cliff
    that did not happen)."""
    return sorted((s for s in summary.steps if not_counted(s) is None), key=lambda s: s.level)


def _uncounted(summary: Summary) -> list[Step]:
    """Steps with measured requests that do not count: drawn apart, as grey crosses, where a chart has room."""
    return [s for s in summary.steps if s.requests and not s.fleet_changed and not_counted(s) is not None]


def _loads(summary: Summary) -> list[float]:
    return [s.level for s in _steps(summary)]


def _nan(v: float | None) -> float:
    return float("nan") if v is None else v


def _mark_knee(ax: plt.Axes, summary: Summary) -> None:
    level = summary.knee.level
    if summary.knee.found and level is not None:
        ax.axvline(level, color="crimson", linestyle="--", linewidth=1.2, label=f"knee ({level:g})")


def latency_vs_load(summary: Summary, metric: str) -> str:
    fig, ax = plt.subplots(figsize=(6.4, 3.4))
    steps = [s for s in _steps(summary) if metric in s.latency_ms and s.latency_ms[metric].count]  # a cut-short
    loads = [s.level for s in steps]  # step may have no data for this metric
    stats = [s.latency_ms[metric] for s in steps]
    for q, style in (("p50", ":"), ("p95", "--"), ("p99", "-")):
        ax.plot(loads, [getattr(st, q) for st in stats], style, marker="o", markersize=3, label=q)
    # every block here has count > 0, so its p99 is set (``metrics.quantiles.summarize_sketch``)
    ci = cast("list[tuple[float, float] | list[float]]", [st.p99_ci or [st.p99, st.p99] for st in stats])
    ax.fill_between(loads, [c[0] for c in ci], [c[1] for c in ci], alpha=0.2, label="p99 95% CI")
    apart = [s for s in _uncounted(summary) if metric in s.latency_ms and s.latency_ms[metric].count]
    if apart:
        ax.plot([s.level for s in apart], cast("list[float]", [s.latency_ms[metric].p99 for s in apart]), "x",
                color="gray", label="p99, step not counted")
    for t in summary.slo.thresholds:
        name, _, rule = t.partition(": ")
        if name == metric and "<" in rule:
            ax.axhline(float(rule.split("<")[-1].lstrip("=")), color="gray", linewidth=1, label=f"SLO {rule}")
    _mark_knee(ax, summary)
    ax.set_xlabel(_level_key(summary).replace("_", " "))
    ax.set_ylabel(f"{metric} (ms)")
    ax.set_title(f"{metric.upper()} percentiles vs load")
    ax.legend(fontsize=7)
    return svg_text(fig)


def capacity(summary: Summary) -> str:
    """The answer in one chart: the knee metric's p99 (failures as misses) and the output tokens/s against load, the
    knee and the metric's SLO drawn; counted steps only."""
    metric = summary.knee.metric or "ttft"
    steps = [s for s in _steps(summary) if metric in s.latency_ms and s.latency_ms[metric].count]
    fig, ax = plt.subplots(figsize=(8.4, 3.3))
    loads = [s.level for s in steps]
    p99 = [_nan(_p99_slo(s.latency_ms[metric])) for s in steps]
    ax.plot(loads, p99, "-", color="tab:red", marker="o", markersize=4,
            label=f"{metric.upper()} p99 (failures as misses)")
    for t in summary.slo.thresholds:  # a p99 threshold only: a p95's line over a p99 curve would mislead
        name, _, rule = t.partition(": ")
        if name == metric and rule.replace(" ", "").startswith("p(99)<"):
            ax.axhline(float(rule.split("<")[-1].lstrip("=")), color="gray", linewidth=1, label=f"SLO {rule}")
    ax.set_ylabel(f"{metric} p99 (ms)")
    ax2 = ax.twinx()
    ax2.plot(loads, [s.throughput.output_tokens_per_s for s in steps], "--", color="tab:blue", marker="s",
             markersize=3, label="output tokens/s")
    ax2.set_ylabel("output tokens/s")
    ax2.grid(False)
    _mark_knee(ax, summary)
    ax.set_xlabel(_level_key(summary).replace("_", " "))
    ax.set_title(f"{metric.upper()} p99 and throughput vs load")
    lines, lines2 = ax.get_legend_handles_labels(), ax2.get_legend_handles_labels()
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], fontsize=7, loc="upper left")
    return svg_text(fig)


def _p99_slo(p: Percentiles) -> float | None:
    """The p99 the knee judged as a number: None for "inf" (it fell on a failure); a version-1 file's plain p99."""
    if p.p99_slo is None:
        return p.p99
    return p.p99_slo if isinstance(p.p99_slo, int | float) else None


def throughput_vs_load(summary: Summary) -> str:
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    loads = _loads(summary)
    tp = [s.throughput for s in _steps(summary)]
    ax.plot(loads, [t.output_tokens_per_s for t in tp], marker="o", markersize=3, label="output tokens/s")
    ax.set_ylabel("output tokens/s")
    ax2 = ax.twinx()
    ax2.plot(loads, [t.requests_per_s for t in tp], "g--", marker="s", markersize=3, label="requests/s")
    ax2.plot(loads, [t.goodput_per_s for t in tp], "g:", marker="^", markersize=3, label="goodput/s")
    apart = _uncounted(summary)
    if apart:
        ax.plot([s.level for s in apart], [s.throughput.output_tokens_per_s for s in apart], "x", color="gray",
                label="step not counted")
    ax2.set_ylabel("requests/s")
    _mark_knee(ax, summary)
    ax.set_xlabel(_level_key(summary).replace("_", " "))
    ax.set_title("Throughput and goodput vs load")
    lines = ax.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], fontsize=7, loc="upper left")
    return svg_text(fig)


def search_path(summary: Summary) -> str:
    """A search's levels in visiting order, good or past the knee, with the knee's bracket as it narrowed."""
    search = summary.search
    assert not isinstance(search, UnsetType)  # html.py draws this only for a run with a search
    fig, ax = plt.subplots(figsize=(6.4, 3.0))
    path = search.path
    colours = {"good": "tab:green", "past": "crimson", "pending": "tab:gray", "not judged": "tab:orange"}
    for verdict, colour in colours.items():
        pts = [(i, e.level) for i, e in enumerate(path) if e.verdict == verdict]
        if pts:
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], color=colour, s=28, label=verdict, zorder=3)
    ax.plot(range(len(path)), [e.level for e in path], color="lightgray", linewidth=1, zorder=1)
    good = past = None  # the bracket after each step: highest good and lowest past level seen so far
    lows, highs = [], []
    for e in path:
        if e.verdict == "good":
            good = max(good or e.level, e.level)
        elif e.verdict == "past":
            past = min(past or e.level, e.level)
        lows.append(_nan(good))
        highs.append(_nan(past))
    ax.fill_between(range(len(path)), lows, highs, color="gold", alpha=0.25, step="post", label="bracket")
    ax.set_xlabel("step (visiting order)")
    ax.set_ylabel(_level_key(summary).replace("_", " "))
    ax.set_title(f"Search path ({search.mode}, resolution {search.resolution:g})")
    ax.legend(fontsize=7, loc="upper left")
    return svg_text(fig)


def errors_vs_load(summary: Summary) -> str:
    fig, ax = plt.subplots(figsize=(6.4, 2.8))
    loads = [f"{x:g}" for x in _loads(summary)]
    classes = sorted({c for s in _steps(summary) for c in s.failures})
    bottom = [0.0] * len(loads)
    for c in classes:
        rates = [s.failures.get(c, 0) / max(s.requests, 1) for s in _steps(summary)]
        ax.bar(loads, rates, bottom=bottom, label=c)
        bottom = [b + r for b, r in zip(bottom, rates, strict=True)]
    if not classes:
        ax.bar(loads, bottom)
        ax.text(0.5, 0.5, "no failed request", transform=ax.transAxes, ha="center")
    ax.set_ylabel("failed / requests")
    ax.set_xlabel(_level_key(summary).replace("_", " "))
    ax.set_title("Error rate by class")
    if classes:
        ax.legend(fontsize=7)
    return svg_text(fig)


def cost_vs_load(summary: Summary) -> str:
    """Cost per 1M output tokens by load: flat (price / sustained throughput) against metered (docs/cost.md)."""
    fig, ax = plt.subplots(figsize=(6.4, 2.8))
    steps = [s for s in _steps(summary) if s.cost]
    loads = [s.level for s in steps]

    def series(name: str) -> list[float]:
        return [_nan(getattr(s.cost, name)) for s in steps]

    for name, style, label in (("flat_per_mtok", "-", "flat (price / throughput)"),
                               ("metered_blended_per_mtok", "--", "metered, with the input"),
                               ("metered_per_mtok", ":", "metered output price")):
        ys = series(name)
        if any(y == y for y in ys):
            ax.plot(loads, ys, style, marker="o", markersize=3, label=label)
    _mark_knee(ax, summary)
    ax.set_yscale("log")  # flat at a light load costs orders of magnitude more per token than at the knee
    ax.set_xlabel(_level_key(summary).replace("_", " "))
    assert not isinstance(summary.cost, UnsetType)  # html.py draws this only for a run with a cost: block
    ax.set_ylabel(f"{summary.cost.currency} per 1M output tokens")
    ax.set_title("Cost per 1M output tokens vs load")
    ax.legend(fontsize=7)
    return svg_text(fig)


def server_vs_load(summary: Summary) -> str:
    fig, ax = plt.subplots(figsize=(6.4, 2.8))
    steps = [s for s in _steps(summary) if s.server]
    key = _level_key(summary)
    loads = [s.level for s in steps]

    def series(name: str) -> list[float]:
        return [_nan(getattr(s.server, name)) for s in steps]

    ax.plot(loads, series("waiting_mean"), marker="o", markersize=3, label="waiting (mean)")
    ax.plot(loads, series("running_max"), marker="s", markersize=3, label="running (max)")
    ax2 = ax.twinx()
    kv = [100 * (s.server.kv_cache_usage_max or 0) for s in steps
          if not isinstance(s.server, UnsetType)]  # true of each (steps have a server): tells mypy
    ax2.plot(loads, kv, "k:", label="KV cache % (max)")
    ax2.set_ylabel("KV cache %")
    _mark_knee(ax, summary)
    ax.set_xlabel(key.replace("_", " "))
    ax.set_ylabel("requests")
    ax.set_title("The server's side (/metrics)")
    ax.legend(fontsize=7, loc="upper left")
    return svg_text(fig)


def generator_chart(summary: Summary, lag_limit_ms: float) -> str:
    fig, ax = plt.subplots(figsize=(6.4, 2.6))
    loads = _loads(summary)
    lag = [_nan(s.generator.lag_p99_ms) for s in _steps(summary)]
    ax.plot(loads, lag, marker="o", markersize=3, label="loop lag p99")
    ax.axhline(lag_limit_ms, color="gray", linewidth=1, label=f"reliability limit {lag_limit_ms:g} ms")
    ax.set_xlabel(_level_key(summary).replace("_", " "))
    ax.set_ylabel("ms")
    ax.set_title("Load generator health")
    ax.legend(fontsize=7)
    return svg_text(fig)


def histogram(achieved: list[float], target: list[float], title: str) -> str:
    fig, ax = plt.subplots(figsize=(6.4, 2.6))
    bins = 40
    ax.hist(target, bins=bins, alpha=0.5, label="scenario target")
    ax.hist(achieved, bins=bins, alpha=0.5, label="sent (server usage)")
    ax.set_xlabel("tokens")
    ax.set_title(title)
    ax.legend(fontsize=7)
    return svg_text(fig)


def overlay(runs: list[tuple[str, Summary]], metric: str, what: str) -> str:
    """``what``: "p99" of ``metric`` or "throughput" (output tokens/s), one line per run."""
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    for name, summary in runs:
        loads = _loads(summary)
        if what == "throughput":
            ys = [s.throughput.output_tokens_per_s for s in _steps(summary)]
        else:
            ys = [_nan(s.latency_ms[metric].p99 if metric in s.latency_ms else None) for s in _steps(summary)]
        line = ax.plot(loads, ys, marker="o", markersize=3, label=name)[0]
        if summary.knee.found and (level := summary.knee.level) is not None:  # found: it has a level
            ax.axvline(level, color=line.get_color(), linestyle="--", linewidth=1)
    ax.set_xlabel("load")
    ax.set_ylabel("output tokens/s" if what == "throughput" else f"{metric} p99 (ms)")
    ax.set_title("Throughput vs load" if what == "throughput" else f"{metric.upper()} p99 vs load (dashed: knees)")
    ax.legend(fontsize=7)
    return svg_text(fig)


def over_time(history: list[dict]) -> str:
    """Live windows: p50/p99 of TTFT and TPOT over time, and the load level."""
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    t = [h["t"] for h in history]
    for metric, color in (("ttft", "tab:blue"), ("tpot", "tab:orange")):
        # a window without data has None there: matplotlib draws a gap, its stubs take numbers only
        ax.plot(t, [h.get(f"{metric}_p99") for h in history],  # type: ignore[arg-type]  # None: a gap
                color=color, label=f"{metric} p99")
        ax.plot(t, [h.get(f"{metric}_p50") for h in history],  # type: ignore[arg-type]  # None: a gap
                ":", color=color, label=f"{metric} p50")
    ax.set_yscale("log")
    ax.set_xlabel("seconds since start")
    ax.set_ylabel("ms")
    ax2 = ax.twinx()
    ax2.step(t, [h["load"] for h in history], "k--", where="post", linewidth=1, label="load")
    ax2.set_ylabel("load")
    ax.set_title("Latency over time (per window)")
    lines, lines2 = ax.get_legend_handles_labels(), ax2.get_legend_handles_labels()
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], fontsize=7, loc="upper left")
    return svg_text(fig)


_FEATURE_WORDS = {"prompt_tokens": "prompt tokens (median)", "output_tokens": "output tokens (median)",
                  "cached_tokens": "cached tokens (median)", "server_waiting": "waiting at the server (median)",
                  "in_flight": "in flight on the worker (median)", "turn": "session turn (median)",
                  "new_connection": "share on a new connection", "after_error": "share after a failure",
                  "worker": "share on the worker", "t_in_step_s": "share in the hot windows",
                  "in_pause": "share through a pause", "in_pause_first": "share waiting through a pause"}


def tail_features(summary: Summary, metric: str = "ttft_s", most: int = 4) -> str:
    """For the last ``most`` steps whose ``metric`` tail has a cause (p99, else p95): its first feature, tail against
    the rest."""
    found = []
    for st in _steps(summary):
        causes = [a for a in (st.tail.attributions if st.tail else ()) if a.metric == metric and a.causes]
        a = min(causes, key=lambda a: -a.quantile, default=None)
        test = a and next((t for t in a.tests if t["feature"] == a.causes[0]), None)
        if a and test:  # test is set only with a
            found.append((st.level, a.quantile, test))
    found = found[-most:]
    if not found:
        return ""
    fig, axes = plt.subplots(1, len(found), figsize=(1.6 * len(found) + 1.2, 2.4), squeeze=False)
    for ax, (level, q, t) in zip(axes[0], found, strict=True):
        ax.bar([f"p{100 * q:g} tail", "rest"], [t["tail_value"], t["rest_value"]], color=["tab:red", "tab:gray"])
        ax.set_title(f"{level:g}: {_FEATURE_WORDS.get(t['feature'], t['feature'])}", fontsize=7)
    fig.suptitle(f"{metric.removesuffix('_s').upper()}: the tail against the rest, by load", fontsize=8)
    return svg_text(fig)
