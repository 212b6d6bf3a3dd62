"""``kneecap sweep``: read and check a sweep file, then run its cells (``sweep.py``)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import click

from harness import exitcodes
from harness.capacity.runs_cmd import check_labels

if TYPE_CHECKING:
    from harness.capacity.sweep_spec import SweepSpec

__all__ = ["sweep"]


@click.command()
@click.argument("sweep_file", type=click.Path(dir_okay=False))
@click.option("--out", default=None, type=click.Path(file_okay=False),
              help="Sweep folder [scenario sinks.results_dir/NAME-ID]. Give an earlier sweep's folder to resume it: "
                   "finished cells are not run again.")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Local Locust worker processes [one per 400 users, at most one per core].")
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE", callback=check_labels,
              help="Recorded with every cell's run in the run store. Repeatable.")
def sweep(sweep_file: str, out: str | None, workers: int | None, labels: dict[str, str]) -> None:
    """Run a base scenario over a matrix of settings, one run per cell, and draw the capacity map.

    Each cell is a normal run folder under the sweep folder; sweep.html and sweep.json compare them (the
    knee, the largest load within the SLOs, the throughput/interactivity frontier, the best cell). With
    serve:, kneecap starts and stops the server for each set of params. See docs/sweep.md. Exit codes: 0 every
    cell has a result, 1 some have none (failed, interrupted), 2 a bad sweep file, 4 no cell has a result.
    """
    import time

    from harness.capacity.sweep import SweepOptions, run_sweep

    spec = _read(sweep_file)
    name = f"{spec.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    folder = out or os.path.join(_results_dir(spec), name)
    opts = SweepOptions(out=folder, workers=workers, labels=labels,
                        sweep_file=sweep_file, results_dir=_results_dir(spec))
    try:
        code = run_sweep(spec, opts, say=click.echo)
    except OSError as exc:
        raise click.ClickException(f"cannot write the sweep folder {folder}: {exc.strerror or exc}") from None
    raise SystemExit(code)


def _read(path: str) -> SweepSpec:
    """The checked sweep; every problem (the scenario's for each cell too) and exit 2 when it cannot run."""
    import yaml

    from harness.capacity.sweep_spec import SweepError, parse_sweep

    raw = _yaml(path, yaml)
    scenario = None
    if isinstance(raw, dict) and isinstance(raw.get("scenario"), str):
        scenario_path = os.path.join(os.path.dirname(os.path.abspath(path)), raw["scenario"])
        scenario = (scenario_path, _yaml(scenario_path, yaml, what="scenario"))
    ctx = click.get_current_context().find_root()
    sim_command = ctx.command.get_command(ctx, "sim") if isinstance(ctx.command, click.Group) else None
    flags = [p.name for p in (sim_command.params if sim_command else []) if p.name and p.name not in ("host", "port")]
    try:
        return parse_sweep(raw, source=path, scenario=scenario, sim_flags=flags)
    except SweepError as exc:
        click.echo(f"Error: {exc}", err=True)
        raise SystemExit(exitcodes.USAGE) from None


def _yaml(path: str, yaml: Any, what: str = "sweep") -> object:
    from harness.checker import decode_text

    try:
        with open(path, "rb") as f:
            return yaml.safe_load(decode_text(f.read()))
    except OSError as exc:
        problem = f"cannot read the {what} file: {exc.strerror or exc}"
    except ValueError as exc:
        problem = f"the {what} file is {exc}"
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = f"{at}not valid YAML ({getattr(exc, 'problem', None) or exc})"
    click.echo(f"Error: {path}: {problem}", err=True)
    raise SystemExit(exitcodes.USAGE)


def _results_dir(spec: SweepSpec) -> str:
    from harness.scenario import parse_scenario

    return parse_scenario(spec.base_scenario, source=spec.source, base_dir=spec.base_dir).results_dir
