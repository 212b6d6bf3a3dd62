"""The report's timelines: a step's requests as lines over time, the server-wide pauses as stripes, the requests in
flight beneath (``analysis.timeline``). Which steps: the knee's and the next one by load, then any step with pauses
(``MOST`` in all); with no knee, the two highest counted loads."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.collections import LineCollection
from msgspec import UnsetType

from harness.analysis.counted import not_counted
from harness.report.charts import svg_text
from harness.summary import Pauses, Step, Summary, Tail, Timeline, level_key

__all__ = ["MOST", "chosen", "timeline_section"]

MOST = 3
_OK, _FAILED, _FIRST = "tab:blue", "crimson", "black"


def chosen(summary: Summary) -> list[Step]:
    """The steps that get a timeline, by load."""
    drawn = [s for s in summary.steps if not isinstance(s.timeline, UnsetType)]
    by_load = sorted((s for s in drawn if not_counted(s) is None), key=lambda s: s.level)
    knee = summary.knee.step_index if summary.knee.found else None
    at = next((i for i, s in enumerate(by_load) if s.index == knee), None)
    picked = by_load[at:at + 2] if at is not None else by_load[-2:]
    picked += [s for s in drawn if _pauses(s) and s not in picked]
    return sorted(picked[:MOST], key=lambda s: s.level)


def timeline_section(summary: Summary) -> str:
    """The section's charts with one line of words each; "" when no step has a timeline."""
    steps = chosen(summary)
    unit = level_key(summary.mode).replace("_", " ")
    return "".join(f"<div class='timeline' id='timeline-{s.index}'>{_chart(s, unit)}<p>{_words(s)}</p></div>"
                   for s in steps)


def _pauses(s: Step) -> list[tuple[float, float]]:
    """(start s, length s) of the step's server-wide pauses (``analysis.why.pauses``)."""
    if isinstance(s.tail, UnsetType) or isinstance(s.tail.pauses, UnsetType):
        return []
    return [(p.start_s, p.length_ms / 1000) for p in s.tail.pauses.listed]


def _words(s: Step) -> str:
    t = s.timeline
    assert not isinstance(t, UnsetType)
    sampled = (f"{t.drawn} of its {t.requests:,} requests, every {t.requests / t.drawn:.1f}th by send"
               if t.drawn < t.requests else f"all {t.requests} requests")
    pauses = _pauses(s)
    said = s.tail.pauses.words if pauses and isinstance(s.tail, Tail) and isinstance(s.tail.pauses, Pauses) else ""
    return (f"Step {s.index}: {sampled}, each a line from its send to its end, its first token a dot; failed "
            f"requests a red cross at their send. " + (f"Grey stripes: the server-wide pauses ({said}). " if pauses
                                                        else "No server-wide pause was found. ")
            + "Beneath: requests in flight.")


def _chart(s: Step, unit: str) -> str:
    t = s.timeline
    assert isinstance(t, Timeline)
    fig, (ax, load) = plt.subplots(2, 1, figsize=(9.6, 3.8), sharex=True, gridspec_kw={"height_ratios": [4, 1]})
    segments: list[list[tuple[float, int]]] = []
    colours: list[str] = []
    first: list[tuple[float, int]] = []
    for y, (send, ttft, e2e, klass, bad) in enumerate(t.rows):
        if bad or e2e is None:
            continue
        segments.append([(send, y), (send + e2e / 1000, y)])
        colours.append(_OK if klass is None else f"C{klass % 10}")  # a mix: one colour a class
        if ttft is not None:
            first.append((send + ttft / 1000, y))
    ax.add_collection(LineCollection(segments, colors=colours, linewidths=1.0))
    if first:
        ax.plot(*zip(*first, strict=True), ".", color=_FIRST, markersize=2, label="first token")
    failed = [(r[0], y) for y, r in enumerate(t.rows) if r[4]]
    if failed:
        ax.plot(*zip(*failed, strict=True), "x", color=_FAILED, markersize=4, label="failed")
    for k, (start, length) in enumerate(_pauses(s)):
        # an id a reader's tools (and the tests) can find each stripe by
        ax.axvspan(start, start + length, color="grey", alpha=0.35, linewidth=0).set_gid(f"pause-{s.index}-{k}")
        load.axvspan(start, start + length, color="grey", alpha=0.35, linewidth=0)
    ax.set_xlim(0, t.end_s)
    ax.set_ylim(-1, max(len(t.rows), 1))
    ax.set_ylabel("request (by send)")
    ax.set_title(f"Step {s.index} at {s.level:g} {unit}: requests over time")
    if first or failed:
        ax.legend(fontsize=7, loc="upper left")
    load.step([(i + 0.5) * t.bin_s for i in range(len(t.in_flight))], t.in_flight, where="mid", color="tab:green")
    load.set_ylabel("in flight")
    load.set_xlabel("seconds since the step began")
    return svg_text(fig)
