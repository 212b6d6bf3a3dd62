"""A sweep's cell as the capacity map reads it: what was set, where its run is, and how it ended. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.summary import Summary

__all__ = ["CellOutcome"]


@dataclass(frozen=True, kw_only=True)
class CellOutcome:
    """One cell of a sweep after it ran (or failed to)."""

    index: int
    """1-based, in the sweep's order."""
    name: str
    """Its settings in one line: ``max_num_seqs=4, workload.input_tokens.median=256``."""
    params: dict[str, Any]
    """Axis (a dotted scenario field, a ``serve.params`` or ``sim`` key) -> value."""
    run_dir: str
    """The cell's run folder, relative to the sweep's folder."""
    summary: Summary | None = None
    """None: the cell produced no summary (see ``error``)."""
    error: str | None = None
    """Why the cell has no result (``the server was not ready at /health within 600 s``); None when it ran."""
    exit_code: int | None = None
    """``kneecap run``'s code for the cell (``harness.exitcodes``); None when it did not run."""
    server: dict[str, Any] | None = None
    """The launched server: ``cmd``, and ``version`` / ``models`` as its /version and /v1/models answered."""
