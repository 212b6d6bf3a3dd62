"""The read-only face of the master (``load/master.py``) for the load shape and the web UI."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.analysis.ledger import Ledger

__all__ = ["RunView"]


class RunView:
    """The read-only face of the master for the load shape and the web UI: the summary as of at most
    ``SUMMARY_MAX_AGE_S`` ago (the web UI polls every second or two; judging and summarising once a second
    serves every open page alike and keeps the master's CPU off the workers' shared cores)."""

    SUMMARY_MAX_AGE_S = 1.0

    def __init__(self, master: Any) -> None:  # a load/master.MasterSide (typed so, it would be an import cycle)
        self._m = master
        self._last: tuple[float, dict] | None = None

    @property
    def ledger(self) -> Ledger:
        return self._m.ledger

    @property
    def stop_reason(self) -> str | None:
        return self._m.stop_reason

    @property
    def history(self) -> Sequence[dict]:
        """One entry per live window (t, load, p50/p99 of ttft and tpot), for the chart page."""
        return self._m.live.history if self._m.live is not None else []

    def summary_json(self) -> dict:
        """The summary as it stands (judged on the data complete so far), at most ``SUMMARY_MAX_AGE_S`` old."""
        now = time.monotonic()
        stopped = self._m.stop_reason is not None and self._last is not None and \
            self._last[1].get("stop_reason") is None  # the end is said at once, not up to a second later
        if self._last is None or now - self._last[0] >= self.SUMMARY_MAX_AGE_S or self._m.finalized or stopped:
            if self._m.ledger.steps:
                self._m.judge()
            self._last = (now, self._m.summary().to_json())
        return self._last[1]
