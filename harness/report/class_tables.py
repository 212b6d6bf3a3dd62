"""The report's and the comparison's tables of a mix's classes (``workload.mix``, ``steps[].classes``). Pure."""

from __future__ import annotations

from harness.metrics.vocabulary import HEADLINE
from harness.report.cells import n as _n
from harness.report.cells import share as _share
from harness.report.cells import table as _table
from harness.summary import Summary, level_key

__all__ = ["class_table", "compare_classes"]


def class_table(s: Summary) -> str:
    """Per step and class of a mix: its share against its weight, failures, p95s and its own SLO."""
    key, rows = level_key(s.mode), []
    for st in s.steps:
        for c in st.classes or ():
            p95 = [c.latency_ms[m].p95 if m in c.latency_ms else None for m in HEADLINE]
            slo = "-" if c.slo_passed is None else "passed" if c.slo_passed else "FAILED: " + ", ".join(
                f"{x.threshold} ({x.observed})" for x in c.slo if not x.passed)
            rows.append([_n(st.level), c.name, c.requests, _share(c.share), asked(c), c.failed, *p95,
                         slo])
    return _table([key, "class", "requests", "share", "weight", "failed", *(f"{m.upper()} p95 ms" for m in HEADLINE),
                   "class SLO"], rows, "Each class of the mix measured apart from the step's request rows (exact "
                  "order statistics; a uniform sample past 100k requests a step, which summary.json says).")


def asked(c) -> str:
    """What the scenario asked of a class: its weight's share, or its fixed users."""
    return f"{c.users} users" if getattr(c, "users", None) is not None else _share(c.weight_share)


def _class_p95(s: Summary, load: float, name: str, metric: str) -> float | None:
    st = next((st for st in s.steps if st.level == load and not st.fleet_changed and st.classes), None)
    c = next((c for c in ((st.classes or ()) if st else ()) if c.name == name), None)  # `or ()`: for mypy
    return c.latency_ms[metric].p95 if c is not None and metric in c.latency_ms else None


def compare_classes(runs: list[tuple[str, Summary]], common: list[float]) -> str:
    """A mix's classes run by run: each class's TTFT and TPOT p95 at the loads every run measured, with the change
    against the first run's."""
    names = list(dict.fromkeys(c.name for _, s in runs for st in s.steps for c in (st.classes or ())))
    if not names or not common:
        return ""
    base = runs[0][1]
    rows = []
    for name in names:
        for run, s in runs:
            cells = []
            for load in common:
                for m in ("ttft", "tpot"):
                    v, b = _class_p95(s, load, name, m), _class_p95(base, load, name, m)
                    cells.append(f"{v} ({v / b - 1:+.0%})" if v and b and s is not base else v)
            rows.append([name, run, *cells])
    head = ["class", "run", *(f"{m.upper()} p95 @ {load:g}" for load in common for m in ("ttft", "tpot"))]
    return "<h2>Classes</h2>" + _table(head, rows, "Each class's own requests (ms), the change against the first run.")
