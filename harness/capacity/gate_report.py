"""The regression gate's result, written three ways: console lines, a JUnit XML file (one test case per check, a
failure for each regression: any CI's test view reads it) and a Markdown summary (GitHub's job summary page,
``$GITHUB_STEP_SUMMARY``). Pure: strings in, strings out; ``compare_cmd.py`` writes the files."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from harness.capacity.checks import Check, GateResult

__all__ = ["console_lines", "junit_xml", "markdown"]

_ORDER = {"regressed": 0, "improved": 1, "no detectable change": 2}


def _value(c: Check, v: float | None, unit: str) -> str:
    """A check's value in its metric's unit."""
    if v is None:
        return "none" if c.metric == "knee" else "—"
    if c.metric == "knee":
        return f"{v:g} {unit}"
    if c.metric == "error_rate":
        return f"{v:.2%}"
    return f"{v:.4g}/s" if c.metric in ("throughput", "goodput") else f"{v:.4g} ms"


def _label(c: Check, unit: str) -> str:
    return f"{c.name} {unit}" if c.level is not None else c.name


def _counts(result: GateResult) -> str:
    n = {d: sum(c.decision == d for c in result.checks) for d in _ORDER}
    return (f"{n['regressed']} regressed, {n['improved']} improved, {n['no detectable change']} no detectable "
            f"change of {len(result.checks)} checks")


def _levels(result: GateResult) -> str:
    return (", ".join(f"{x:g}" for x in result.levels) + f" {result.unit}") if result.levels else "no common level"


def _intervals(result: GateResult) -> str:
    widened = "" if result.widen == 1 else f", widened x{result.widen:g} for correlated requests"
    return f"95% intervals{widened}; docs/gate.md"


def console_lines(result: GateResult) -> list[str]:
    """One line per check that changed (regressed, improved), what was not compared, then the verdict."""
    out = [f"{c.decision.upper()}: {c.why}" for c in sorted(result.checks, key=lambda c: _ORDER[c.decision])
           if c.decision != "no detectable change"]
    out += [f"not compared: {note}" for note in result.notes]
    out.append(f"gate: {result.verdict.upper()} - {_counts(result)} at {_levels(result)} ({_intervals(result)})")
    return out


def markdown(result: GateResult, base: str, new: str) -> str:
    """A summary fit for GitHub's job summary: the verdict, a table of every check (changes first), why, notes."""
    mark = "❌" if result.verdict == "regressed" else "✅"
    lines = [f"## kneecap gate: {mark} {result.verdict}", "",
             f"BASE `{base}` → NEW `{new}`: {_counts(result)} at {_levels(result)}.", "",
             "| check | base | new | change | threshold | smallest detectable | decision |",
             "|---|---|---|---|---|---|---|"]
    for c in sorted(result.checks, key=lambda c: _ORDER[c.decision]):
        t = c.threshold
        change = "—" if c.change is None else t.say(c.change)
        detectable = "none" if c.detectable is None else t.say(c.detectable)
        decision = f"**{c.decision}**" if c.decision != "no detectable change" else c.decision
        lines.append(f"| {_label(c, result.unit)} | {_value(c, c.base, result.unit)} | "
                     f"{_value(c, c.new, result.unit)} | {change} | {t.text} | {detectable} | {decision} |")
    changed = [c for c in result.checks if c.decision != "no detectable change"]
    if changed:
        lines += ["", "**Why**", ""] + [f"- {c.why.replace('|', '/')}" for c in changed]
    if result.notes:
        lines += ["", "**Not compared**", ""] + [f"- {n}" for n in result.notes]
    lines += ["", "Regressed = past the threshold in the bad direction AND the two runs' intervals separate "
              f"({_intervals(result)}).", ""]
    return "\n".join(lines)


def junit_xml(result: GateResult, base: str, new: str) -> str:
    """JUnit XML: one ``testcase`` per check, a ``failure`` for a regression, ``skipped`` where no change of any
    size was detectable (too few samples for an interval), the sentence in ``system-out`` otherwise."""
    failures = sum(c.decision == "regressed" for c in result.checks)
    skipped = sum(c.detectable is None and c.decision == "no detectable change" for c in result.checks)
    counts = {"tests": str(len(result.checks)), "failures": str(failures), "errors": "0", "skipped": str(skipped)}
    root = ET.Element("testsuites", {"name": "kneecap gate", **counts})  # one attrib dict: name, then the counts
    suite = ET.SubElement(root, "testsuite", {"name": f"kneecap gate: {base} vs {new}", **counts})
    for c in result.checks:
        case = ET.SubElement(suite, "testcase", classname=f"kneecap.gate.{c.metric}", name=_label(c, result.unit))
        if c.decision == "regressed":
            ET.SubElement(case, "failure", message=c.why, type="regressed").text = c.why
        elif c.detectable is None and c.decision == "no detectable change":
            ET.SubElement(case, "skipped", message=c.why)
        else:
            ET.SubElement(case, "system-out").text = f"{c.decision}: {c.why}"
    if result.notes:  # one system-out per suite (the JUnit schema's)
        ET.SubElement(suite, "system-out").text = "\n".join(f"not compared: {n}" for n in result.notes)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
