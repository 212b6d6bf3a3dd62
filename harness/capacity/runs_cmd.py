"""``kneecap runs``: the run store's index (``store.py``) as a table or JSON lines, filtered; docs/runs.md."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import click

from harness.cli_kit import InputError
from harness.run_store import INDEX, display_path, parse_labels, read_index, select

__all__ = ["check_labels", "runs"]

COLUMNS = ("time", "run id", "scenario", "labels", "model", "knee", "exit", "path")


def check_labels(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> dict[str, str]:
    """``--label KEY=VALUE`` (repeatable) as a dict; a bad one is a usage error naming it."""
    try:
        return parse_labels(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _time(value: Any) -> str:
    """The stored UTC time in this machine's local time, to the second; as stored when it does not parse."""
    try:
        return datetime.fromisoformat(str(value)).astimezone().strftime("%Y-%m-%d %H:%M:%S")
    except ValueError:
        return str(value)


def _knee(knee: Any) -> str:
    if not isinstance(knee, Mapping):
        return "-"
    if not knee.get("found") or knee.get("load") is None:
        return "none"
    return f"{knee['load']:g} {knee.get('unit', '')}".rstrip()


def _row(item: Mapping[str, Any]) -> tuple[str, ...]:
    labels = found if isinstance(found := item.get("labels"), Mapping) else {}
    ident = str(item.get("run_id") or item.get("name") or "-")
    if item["kind"] != "run":  # a sweep's line: say so, its id alone reads like a run's
        ident = f"{item['kind']} {ident}"
    return (_time(item.get("time")), ident, str(item.get("scenario") or "-"),
            ",".join(f"{k}={v}" for k, v in labels.items()) or "-", str(item.get("model") or "-"),
            _knee(item.get("knee")), str(item.get("exit_code", "-")), display_path(item["path"]))


def table(entries: Sequence[Mapping[str, Any]]) -> str:
    """One row per entry under a header, columns aligned; the path last, unpadded, ready for ``kneecap compare``."""
    rows = [COLUMNS, *(_row(e) for e in entries)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS) - 1)]
    return "\n".join("  ".join([*(c.ljust(w) for c, w in zip(r, widths, strict=False)), r[-1]]) for r in rows)


@click.command()
@click.option("--results", "results_dir", default="results", show_default=True, type=click.Path(file_okay=False),
              help=f"The results folder whose {INDEX} to read (a scenario's sinks.results_dir).")
@click.option("--scenario", default=None, help="Only runs of this scenario (its name).")
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE", callback=check_labels,
              help="Only runs with this label. Repeatable: every one must match.")
@click.option("--last", "last_n", type=click.IntRange(min=1), default=None, metavar="N",
              help="Only the newest N that match.")
@click.option("--json", "as_json", is_flag=True, help="Print the entries as JSON lines, as stored.")
def runs(results_dir: str, scenario: str | None, labels: dict[str, str], last_n: int | None, as_json: bool) -> None:
    """List the runs in the run store (RESULTS/index.jsonl), oldest first; filter by scenario and labels."""
    index = os.path.join(results_dir, INDEX)
    try:
        entries, problems = read_index(index)
    except OSError as exc:
        raise InputError(f"cannot read {index}: {exc.strerror or exc}") from None
    for problem in problems:  # the rest of the store is still worth listing
        click.echo(f"warning: {problem}", err=True)
    if not entries:  # notes on stderr: stdout holds only entries, for --json readers
        click.echo(f"no runs in {index} (each kneecap run adds one)", err=True)
        return
    chosen = select(entries, scenario=scenario, labels=labels)
    if last_n is not None:
        chosen = chosen[-last_n:]
    if not chosen:
        click.echo(f"no runs in {index} match ({len(entries)} listed there)", err=True)
        return
    if as_json:
        for item in chosen:
            click.echo(json.dumps(item, ensure_ascii=False))
    else:
        click.echo(table(chosen))
