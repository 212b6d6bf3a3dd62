"""Tail attribution of a step's request rows as the workers ship them (``metrics.rows``). Pure."""

from __future__ import annotations

from collections.abc import Sequence

from harness.analysis.tail import StepTails, TailParams, TailRow, explain_tail
from harness.metrics.rows import decode_row

__all__ = ["explain_rows"]


def explain_rows(rows: Sequence[list], params: TailParams | None = None) -> StepTails:
    """``explain_tail`` of ``rows``; a failed request has no latency and counts only as a feature of the request after
    it on its connection (``after_error``)."""
    tail_rows = []
    for row in rows:
        d = decode_row(row)
        del d["failed"]
        tail_rows.append(TailRow(**d))
    return explain_tail(tail_rows, params or TailParams())
