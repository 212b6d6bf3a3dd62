"""The report's first lines: the capacity, how sure, why in one plain sentence, the SLO and the cost; the knee
finder's own words (elasticities, the server's queue, the tail past it) one click below. Pure."""

from __future__ import annotations

from msgspec import UNSET

from harness.analysis.plain import SURE, knee_words
from harness.report.cells import e, n
from harness.summary import Knee, Summary, level_unit

__all__ = ["verdict_html"]

def verdict_html(s: Summary) -> str:
    """The verdict box: knee (or none), how sure and why, SLO, cost, incomplete, exit code."""
    knee, unit = s.knee, level_unit(s.mode)
    if knee.found:
        k = f"<b id='knee'>Knee: {knee.level:g} {unit}</b>" + _why(s, knee)
    else:
        k = f"<b id='knee'>No knee found</b> — {e(knee.reason)}"
    slo = s.slo
    if slo.thresholds:
        cls, word = ("pass", "PASSED") if slo.passed else ("fail", "FAILED")
        k += (f"<br>SLO <span class='{cls}'>{word}</span> up to the knee ({e(', '.join(slo.thresholds))}); "
              f"largest load within SLO: {e(n(slo.max_load_within_slo))}")
    if s.cost_line:  # from the cost's figures, not its stored prose
        k += f"<br><span id='cost'>{e(s.cost_line)}</span>"
    if s.incomplete is not UNSET:
        k += f"<br><span class='fail' id='incomplete'>INCOMPLETE: {e(s.incomplete)}</span>"
    words = (f"<details><summary>How the knee was found</summary>{e(knee.reason)}</details>"
             if knee.found and knee_words(s) else "")  # the finder's own words, when the sentence stands for them
    return f"<div class='verdict'>{k}<br>Exit code {e(s.exit_code)}; stop: {e(s.stop_reason)}{words}</div>"


def _why(s: Summary, knee: Knee) -> str:
    said = knee_words(s)
    sure = SURE.get(knee.confidence or "", "")
    return ((f"<br><span id='knee-why'>{e(said)}</span>" if said else f" — {e(knee.reason)}")
            + (f"<br>Confidence {e(knee.confidence)}: {e(sure)}." if sure else ""))
