"""``kneecap compare``: several runs side by side."""

from __future__ import annotations

import click

from harness.cli_kit import InputError, read_run

__all__ = ["compare"]


@click.command()
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--out", default="compare.html", show_default=True, type=click.Path(dir_okay=False))
def compare(run_dirs: tuple[str, ...], out: str) -> None:
    """Overlay the curves of several runs and tabulate the deltas against the first one."""
    import os

    from harness.report.html import compare_html

    if len(run_dirs) < 2:
        raise click.UsageError("give at least two run folders")
    runs = [(os.path.basename(os.path.normpath(d)), read_run(d)) for d in run_dirs]
    modes = {s.mode for _, s in runs}
    if len(modes) > 1:  # their loads are users vs req/s: no common x axis
        kinds = ", ".join(f"{d} ({s.mode} loop)" for d, (_, s) in zip(run_dirs, runs, strict=True))
        raise InputError(f"cannot compare closed-loop runs (users) with open-loop ones (req/s): {kinds}; "
                         "compare runs of one kind")
    page = compare_html(runs)
    try:
        with open(out, "w", encoding="utf-8") as f:
            f.write(page)
    except OSError as exc:
        raise click.ClickException(f"cannot write {out}: {exc.strerror or exc}") from None
    click.echo(out)
