"""``kneecap compare``: several runs side by side, or two through the regression gate (``--gate``, docs/gate.md)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import click

from harness import exitcodes
from harness.capacity.runs_cmd import check_labels
from harness.cli_kit import InputError, read_run

if TYPE_CHECKING:
    from harness.spec.gate import GateSpec
    from harness.summary import Summary

__all__ = ["compare"]


def _write(path: str, text: str) -> None:
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as exc:
        raise click.ClickException(f"cannot write {path}: {exc.strerror or exc}") from None


def _baseline(results_dir: str, labels: dict[str, str], new_dir: str, new: Summary) -> str:
    """The newest run in the store with every label and NEW's scenario, other than NEW itself: its folder."""
    from harness.run_store import INDEX, last, read_index

    index = os.path.join(results_dir, INDEX)
    try:
        entries, problems = read_index(index)
    except OSError as exc:
        raise InputError(f"cannot read {index}: {exc.strerror or exc}") from None
    for problem in problems:  # the other lines still name runs
        click.echo(f"warning: {problem}", err=True)
    here = os.path.realpath(new_dir)
    others = [e for e in entries if os.path.realpath(e["path"]) != here]
    found = last(others, kind="run", labels=labels, scenario=new.scenario)
    if found is None:
        want = ", ".join(f"{k}={v}" for k, v in labels.items())
        raise InputError(f"no run of scenario {new.scenario!r} labelled {want} in {index} ({len(entries)} runs "
                         f"there): label one with kneecap run --label {want}, or give BASE's folder")
    return found["path"]


def _thresholds(scenario: str | None, new: Summary, force: bool) -> GateSpec:
    """The gate block of the NEW run's scenario file (``--scenario``), else the defaults."""
    from harness.scenario import ScenarioError, load_scenario
    from harness.spec.gate import DEFAULTS

    if scenario is None:
        return DEFAULTS
    try:
        sc = load_scenario(scenario)
    except ScenarioError as exc:
        raise InputError(str(exc)) from None
    if sc.name != new.scenario and not force:
        raise InputError(f"{scenario} is scenario {sc.name!r} but NEW ran {new.scenario!r}: give NEW's scenario "
                         "file (its gate: block), or --force")
    return sc.gate or DEFAULTS


def _gate(dirs: list[str], scenario: str | None, junit: str | None, markdown: str | None, force: bool) -> int:
    """BASE against NEW through the gate: the console lines, the files asked for; the exit code."""
    from harness.capacity.gate import gate, mismatches
    from harness.capacity.gate_report import console_lines, junit_xml
    from harness.capacity.gate_report import markdown as markdown_text

    base, new = read_run(dirs[0]), read_run(dirs[1])
    if base.mode != new.mode:  # their loads are users vs req/s: no level in common, --force or not
        raise InputError(f"cannot gate a {base.mode}-loop run ({dirs[0]}) against an {new.mode}-loop run "
                         f"({dirs[1]}): their loads are users and req/s")
    if (why := mismatches(base, new)) and not force:
        raise InputError(f"refusing to gate {dirs[1]} against {dirs[0]}: {'; '.join(why)}; a gate compares two "
                         "runs of one configuration (pass --force to compare them anyway)")
    result = gate(base, new, _thresholds(scenario, new, force))
    names = [os.path.basename(os.path.normpath(d)) for d in dirs]
    for line in console_lines(result):
        click.echo(line)
    if junit:
        _write(junit, junit_xml(result, *names))
    if markdown:
        _write(markdown, markdown_text(result, *names))
    return exitcodes.REGRESSED if result.regressed else exitcodes.OK


def _overlay(dirs: list[str], out: str) -> None:
    from harness.report.html import compare_html

    runs = [(os.path.basename(os.path.normpath(d)), read_run(d)) for d in dirs]
    modes = {s.mode for _, s in runs}
    if len(modes) > 1:  # their loads are users vs req/s: no common x axis
        kinds = ", ".join(f"{d} ({s.mode} loop)" for d, (_, s) in zip(dirs, runs, strict=True))
        raise InputError(f"cannot compare closed-loop runs (users) with open-loop ones (req/s): {kinds}; "
                         "compare runs of one kind")
    _write(out, compare_html(runs))
    click.echo(out)


@click.command()
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--out", default=None, type=click.Path(dir_okay=False),
              help="The overlay page [compare.html; with --gate: none unless given].")
@click.option("--gate", "gating", is_flag=True,
              help="BASE NEW: regressed, improved or no detectable change per metric and level (exit 6: regressed).")
@click.option("--scenario", default=None, type=click.Path(dir_okay=False),
              help="NEW's scenario file: the gate takes its gate: block [the defaults].")
@click.option("--junit", default=None, type=click.Path(dir_okay=False),
              help="With --gate: write a JUnit XML file, one test case per check.")
@click.option("--markdown", default=None, type=click.Path(dir_okay=False),
              help="With --gate: write a Markdown summary (e.g. to $GITHUB_STEP_SUMMARY).")
@click.option("--force", is_flag=True, help="With --gate: compare runs of different scenarios, hosts or models.")
@click.option("--baseline", "labels", multiple=True, metavar="KEY=VALUE", callback=check_labels,
              help="BASE is the newest run in the run store with this label (and NEW's scenario). Repeatable.")
@click.option("--results", "results_dir", default="results", show_default=True, type=click.Path(file_okay=False),
              help="The results folder whose index.jsonl --baseline reads.")
def compare(run_dirs: tuple[str, ...], out: str | None, gating: bool, scenario: str | None, junit: str | None,
            markdown: str | None, force: bool, labels: dict[str, str], results_dir: str) -> None:
    """Overlay the curves of several runs and tabulate the deltas against the first one; with --gate, judge NEW
    against BASE (RUN_DIRS: BASE NEW, or NEW alone with --baseline) and exit 6 when anything regressed."""
    dirs = list(run_dirs)
    if not gating and (junit or markdown or scenario or force):
        raise click.UsageError("--junit, --markdown, --scenario and --force go with --gate")
    if labels:
        if len(dirs) != 1:
            raise click.UsageError(f"with --baseline, give NEW's folder alone (got {len(dirs)} folders)")
        dirs.insert(0, _baseline(results_dir, labels, dirs[0], read_run(dirs[0])))
        click.echo(f"baseline: {dirs[0]}", err=True)
    if gating:
        if len(dirs) != 2:
            raise click.UsageError(f"--gate compares exactly two runs, BASE and NEW (got {len(dirs)})")
        code = _gate(dirs, scenario, junit, markdown, force)
        if out:
            _overlay(dirs, out)
        raise SystemExit(code)
    if len(dirs) < 2:
        raise click.UsageError("give at least two run folders")
    _overlay(dirs, out or "compare.html")
