"""What every ``kneecap`` command that reads run folders shares: the input error (exit 2) and the checked reader."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from harness import exitcodes

if TYPE_CHECKING:
    from harness.summary import Summary

__all__ = ["InputError", "read_run"]


class InputError(click.ClickException):
    """A file given to a command is not what it must be (a broken summary.json, a binary log): ``Error: FILE:
    problem`` and exit 2 (``exitcodes.USAGE``: nothing was done), without click's usage lines, which would
    suggest a wrong flag."""

    exit_code = exitcodes.USAGE


_RERUN = "kneecap run writes it: re-run, or restore the file"
"""What to do about a run folder whose summary.json is missing or broken (appended to the problem)."""


def read_run(run_dir: str) -> Summary:
    """RUN_DIR's summary, checked against its schema and typed; InputError (exit 2) naming the file and first bad
    key."""
    import os

    from harness.report.html import read_summary

    if not os.path.isfile(os.path.join(run_dir, "summary.json")):
        raise InputError(f"{run_dir} has no summary.json: not a run folder? ({_RERUN})")
    try:
        return read_summary(run_dir)
    except ValueError as exc:
        raise InputError(f"{exc} ({_RERUN})") from None
    except OSError as exc:
        raise click.ClickException(f"cannot read {run_dir}/summary.json: {exc.strerror or exc}") from None
