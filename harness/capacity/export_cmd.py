"""``kneecap export``: a run's results in another project's format, so they sit beside that project's own."""

from __future__ import annotations

import click

from harness.cli_kit import InputError, read_run

__all__ = ["FORMATS", "export"]

FORMATS = {"llm-d": "llm-d"}
"""``--format`` -> the default folder under RUN_DIR. llm-d: its benchmark report, one YAML file per step."""


@click.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--format", "fmt", type=click.Choice(sorted(FORMATS)), required=True,
              help="llm-d: the llm-d benchmark report (version 0.2.1), one file per step; see docs/export.md.")
@click.option("--out", default=None, type=click.Path(file_okay=False),
              help="Folder to write the files to [RUN_DIR/llm-d].")
def export(run_dir: str, fmt: str, out: str | None) -> None:
    """Write RUN_DIR's results (its summary.json) in another tool's format; print each file written."""
    import os

    import yaml

    from harness.capacity.llmd import llmd_reports

    summary = read_run(run_dir)
    result = llmd_reports(summary)
    if not result.reports:
        raise InputError(f"{run_dir}/summary.json: no step measured a request, so there is no load point to "
                         "export; export a run that reached its first step's measured part")
    folder = out or os.path.join(run_dir, FORMATS[fmt])
    written = []
    try:
        os.makedirs(folder, exist_ok=True)
        for report in result.reports:
            path = os.path.join(folder, report.file_name)
            with open(path, "w", encoding="utf-8") as f:
                # key order kept: version, run, scenario, results, as llm-d's own files read
                yaml.safe_dump(report.body, f, sort_keys=False, allow_unicode=True)
            written.append(path)
    except OSError as exc:
        raise click.ClickException(f"cannot write to {folder}: {exc.strerror or exc}") from None
    for index in result.skipped:  # on stderr: stdout lists only the files, one per line, for scripts
        click.echo(f"step {index}: no request ended in its measured part: no report", err=True)
    for path in written:
        click.echo(path)
