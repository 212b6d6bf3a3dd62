"""Plain words for people: figures at the precision a reader uses, the knee in one sentence from the summary's
figures, what each knee confidence means. The report's first screen, the console and the web UI say them alike. Pure."""

from __future__ import annotations

from harness.analysis.counted import not_counted
from harness.summary import Summary, level_unit

__all__ = ["SURE", "figure", "knee_sentence", "knee_words", "rounded"]

SURE = {"high": "the steps after it confirm it, and it is where throughput per unit of latency peaks",
        "medium": "the steps after it confirm it",
        "low": "no step after it confirms it yet (the run ended or the steps after it disagree)"}
"""What each knee confidence means (``analysis.knee``)."""


def knee_sentence(s: Summary) -> str:
    """"Past 8 users, TTFT p99 rose 3.2× (14 → 45 ms at 10 users, +25% load) while output throughput grew 1% (1,818 →
    1,845 tokens/s): past it, more load adds latency, not throughput." from the knee's figures; "" without them."""
    k, unit = s.knee, level_unit(s.mode)
    before, after = k.p99_before_ms, k.p99_after_ms
    level = k.level
    if not k.found or level is None or not before or after is None:
        return ""
    heavier = [st.level for st in s.steps if st.level > level and not_counted(st) is None]
    at = f" at {min(heavier):g} {unit}, {100 * (min(heavier) / level - 1):+.0f}% load" if heavier and level else ""
    metric = f"{k.metric.upper()} p99"
    out = f"Past {level:g} {unit}, {metric} rose {after / before:.1f}× ({figure(before)} → {figure(after)} ms{at})"
    t0, t1 = k.throughput_before, k.throughput_after
    if t0 and t1 is not None:
        grew = round(100 * (t1 / t0 - 1))
        out += (f" while output throughput {_grew(grew)} ({figure(t0)} → {figure(t1)} tokens/s): past it, more load "
                + ("adds latency, not throughput" if grew < 5 else "adds latency faster than throughput"))
    return out + "."


def knee_words(s: Summary) -> str:
    """The knee's sentence and its why (``knee.why``: the server's queue, the prefix cache, the tail past it): what the
    console's ``knee:`` line and the report's first screen say; "" without a sentence."""
    sentence, why = knee_sentence(s), s.knee.why
    return sentence + (f" Why: {why}." if sentence and isinstance(why, str) and why else "")


def _grew(pct: int) -> str:
    return f"grew {pct}%" if pct > 0 else "did not grow" if pct == 0 else f"fell {-pct}%"


def rounded(x: float) -> float:
    """``figure``'s precision as a number (a table that sorts its cells as numbers): 4807, 36.5, 8.94; ints kept."""
    if isinstance(x, int):
        return x
    return round(x) if abs(x) >= 100 else round(x, 1 if abs(x) >= 10 else 2)


def figure(x: float) -> str:
    """4,807 and 1,051 (not 4806.659, 1051.22), 36.5, 8.94: the precision a reader uses."""
    return f"{x:,.{0 if abs(x) >= 100 else 1 if abs(x) >= 10 else 2}f}"
