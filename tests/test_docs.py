"""The README and docs/ stay true to the code: links resolve, commands and flags exist, versions and the layout match.

The README is the front door and the reference lives in docs/; these tests read both as text (no network, no
process started) and compare them with the code they describe: the click CLI, Locust's parser with kneecap's
options, the summary schema the code writes, and the modules under harness/.
"""

from __future__ import annotations

import ast
import glob
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache

import click
import pytest
import yaml

from harness.analysis.cost.client_cpu import PROCESSES_SCHEMA
from harness.cli import main as kneecap_cli
from harness.scenario import ScenarioError, parse_scenario
from harness.summary import SCHEMA

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
PAGES = [README, *sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))]
IDS = [os.path.relpath(p, ROOT) for p in PAGES]
README_MAX_LINES = 200
"""The README is the front door (what kneecap is, the two commands, a first scenario, the output); the rest is docs/."""


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def _anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: str) -> set[str]:
    return {_anchor(m) for m in re.findall(r"^#+ (.+)$", _read(path), flags=re.MULTILINE)}


# --- links --------------------------------------------------------------------------------------------------------


def test_docs_folder_has_the_reference_pages():
    assert {os.path.basename(p) for p in PAGES} >= {
        "results.md", "simulator.md", "influxdb.md", "compose.md", "metrics.md", "knee-and-slos.md",
        "architecture.md", "fleets.md"}


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_relative_links_resolve(page):
    targets = re.findall(r"\]\(([^)\s]+)\)", _read(page))
    for target in targets:
        if re.match(r"[a-z]+:", target):  # http(s), mailto: not checked here
            continue
        path, _, anchor = target.partition("#")
        full = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
        assert os.path.exists(full), f"{os.path.relpath(page, ROOT)} links to missing {target}"
        if anchor:
            assert anchor in _anchors(full), f"{os.path.relpath(page, ROOT)} links to missing heading {target}"


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_every_page_is_reachable_from_the_readme(page):
    """A docs/ page nobody links to is lost reference: the README's "Read more" list names every page."""
    if page != README:
        name = os.path.basename(page)
        assert f"(docs/{name})" in _read(README), f"README.md does not link docs/{name}"


# --- the README as a front door -----------------------------------------------------------------------------------


def test_readme_stays_a_front_door():
    with open(README, encoding="utf-8") as f:
        lines = sum(1 for _ in f)
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines (at most {README_MAX_LINES}): move reference out"


def test_readme_test_command_is_the_one_ci_runs():
    """CI (.ci/run) ends with the README's test command: the two must not drift apart."""
    with open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8") as f:
        commands = [ln.strip() for ln in f if ln.strip() and not ln.lstrip().startswith("#")]
    readme = _read(README)
    assert commands[-1] == ".venv/bin/python -m pytest -q"
    assert f"the test command\n`{commands[-1]}`" in readme
    assert "```sh\nbash .ci/run\n```" in readme
    assert "```sh\npython3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/kneecap run\n```" in readme
    assert 'kneecap = "harness.cli:main"' in _read(os.path.join(ROOT, "pyproject.toml"))


def _yaml_blocks(text: str) -> list[str]:
    return re.findall(r"^```yaml\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)


def test_readme_scenarios_are_valid():
    """A YAML block with a name is that file from scenarios/, verbatim; an endpoint block is valid in that scenario."""
    chat = os.path.join(ROOT, "scenarios", "chat.yaml")
    blocks = _yaml_blocks(_read(README))
    assert blocks, "the README shows a first scenario in YAML"
    for block in blocks:
        raw = yaml.safe_load(block)
        if "name" in raw:
            path = os.path.join(ROOT, "scenarios", f"{raw['name']}.yaml")
            assert os.path.exists(path) and _read(path) == block, f"README's scenario {raw['name']!r} is not {path}"
        else:
            raw = {**yaml.safe_load(_read(chat)), **raw}
        try:
            parse_scenario(raw, source="README.md", base_dir=os.path.join(ROOT, "scenarios"))
        except ScenarioError as exc:
            pytest.fail(f"README.md shows an invalid scenario: {exc}")


# --- commands and flags -------------------------------------------------------------------------------------------
#
# A command is a line of a fenced code block (a trailing `\` joins the next line; a shell comment after " #" is
# cut; `a && b` is two commands) or an inline code span, whose text starts with `kneecap SUBCOMMAND` (also
# `.venv/bin/kneecap ...`) or with `locust` (a bare `locust` names it too). Every option after it must exist:
# - a kneecap subcommand's: its own click options. `kneecap run` passes nothing through (click refuses unknown
#   options), so a `--` there is an error; a `--sim-arg=--x` value must be a `kneecap sim` option;
# - after `kneecap worker ... --`: Locust's options, since the worker execs `locust --worker` with them;
# - a `locust` line's: Locust's own options plus kneecap's (harness/load/options.py).
#
# A loose flag is a code span that starts with an option (`--workers N`) in a paragraph (a table or a list is one
# paragraph). It must be an option of a command the paragraph names; a paragraph that names none takes the
# `kneecap X` of the nearest heading above that names one (simulator.md's title, fleets.md's "`kneecap worker`"),
# and with neither the flag is not checked. A paragraph that names another program (`python -m ...`, `docker`,
# `kubectl`, ...) is not checked for loose flags: they may be that program's.

_KNEECAP = re.compile(r"^(?:\S*/)?kneecap\s+([a-z][\w-]*)(.*)$")
_LOCUST = re.compile(r"^locust(?:\s+(.*))?$")
_PROGRAM = re.compile(r"^(?:\S*/)?(python3?|docker|docker-compose|kubectl|kustomize|curl|pip|vllm|llama-server)\s")
_FLAG = re.compile(r"^--?[A-Za-z][\w-]*")


@dataclass(frozen=True)
class Mention:
    """A command or a loose flag found in a page, with where it was seen (for the failure message)."""

    page: str
    line: int
    text: str
    context: tuple[str, ...] = ()
    """For a loose flag: the commands it may belong to ("kneecap run", "locust"); empty: a command line itself."""


@cache
def _kneecap_options() -> dict[str, frozenset[str]]:
    """Each subcommand's option strings, from the click group itself."""
    out = {}
    for name, cmd in kneecap_cli.commands.items():
        opts = {o for p in cmd.params if isinstance(p, click.Option) for o in (*p.opts, *p.secondary_opts)}
        out[name] = frozenset(opts | {"--help", "-h"})
    return out


@cache
def _locust_options() -> frozenset[str]:
    """Locust's own options plus kneecap's (harness/load/options.py), as `locust` parses them."""
    from locust.argument_parser import get_empty_argument_parser, setup_parser_arguments

    from harness.load.options import add_arguments

    parser = get_empty_argument_parser(add_help=False, default_config_files=[])
    setup_parser_arguments(parser)
    add_arguments(parser)
    return frozenset({o for action in parser._actions for o in action.option_strings} | {"--help", "-h"})


def _options_of(command: str) -> frozenset[str]:
    return _locust_options() if command == "locust" else _kneecap_options()[command.split()[1]]


def _command_of(text: str) -> str | None:
    """"kneecap run", "locust", "other" (another program) or None for a span that runs nothing."""
    if m := _KNEECAP.match(text):
        return f"kneecap {m.group(1)}"
    if _LOCUST.match(text):
        return "locust"
    return "other" if _PROGRAM.match(text) else None


def _mentions(page: str, text: str) -> Iterator[Mention]:
    """Every command line and every loose flag of a page (the rules above)."""
    lines = text.split("\n")
    headings: list[tuple[int, str | None]] = []  # (level, the kneecap command it names)
    para: list[tuple[int, str]] = []
    fence = False
    i = 0

    def flush() -> Iterator[Mention]:
        if not para:
            return
        joined, first = " ".join(t for _, t in para), para[0][0]
        para.clear()
        spans = re.findall(r"`([^`]+)`", joined)
        commands = {c for s in spans if (c := _command_of(s.strip()))}
        for s in spans:
            if _command_of(s.strip()) in commands - {"other"}:
                yield Mention(page, first, s.strip())
        context: tuple[str, ...]
        if "other" in commands:
            return
        if commands:
            context = tuple(sorted(commands))
        else:
            named = [c for _, c in headings if c]
            context = (named[-1],) if named else ()
        if context:
            for s in spans:
                if _FLAG.match(s) and not _command_of(s):
                    yield Mention(page, first, s.strip(), context)

    while i < len(lines):
        raw = lines[i]
        if raw.startswith("```"):
            yield from flush()
            fence = not fence
            i += 1
            continue
        if fence:
            start, code = i, raw
            while code.endswith("\\") and i + 1 < len(lines):
                i += 1
                code = code[:-1] + " " + lines[i].strip()
            for part in re.split(r"\s+#", code.strip(), maxsplit=1)[0].split("&&"):
                if _command_of(part.strip()) not in (None, "other"):
                    yield Mention(page, start + 1, part.strip())
        elif m := re.match(r"^(#+) (.+)$", raw):
            yield from flush()
            level = len(m.group(1))
            while headings and headings[-1][0] >= level:
                headings.pop()
            named = [c for s in re.findall(r"`([^`]+)`", m.group(2)) if (c := _command_of(s)) and c != "other"]
            headings.append((level, named[0] if named else None))
        elif raw.strip():
            para.append((i + 1, raw.strip()))
        else:
            yield from flush()
        i += 1
    yield from flush()


def _bad_options(mention: Mention) -> list[str]:
    """The options of a mention that its command does not have, each with the reason."""
    if mention.context:  # a loose flag: the option of one of the commands around it
        flag = _FLAG.match(mention.text).group(0)
        if any(flag in _options_of(c) for c in mention.context):
            return []
        return [f"{flag} (not an option of {' or '.join(mention.context)})"]
    command = _command_of(mention.text)
    if command != "locust" and command.split()[1] not in _kneecap_options():
        return [f"{command} (no such subcommand; kneecap has {', '.join(sorted(_kneecap_options()))})"]
    m = _LOCUST.match(mention.text) if command == "locust" else _KNEECAP.match(mention.text)
    rest = m.group(1) or "" if command == "locust" else m.group(2)
    bad, own = [], _options_of(command)
    for token in rest.split():
        token = token.strip("[](),;")
        if token == "--":  # the end of kneecap's options
            if command != "kneecap worker":
                bad.append(f"-- ({command} passes no options through)")
                break
            own = _locust_options()  # kneecap worker hands the rest to locust --worker
            continue
        if not _FLAG.match(token) or token.startswith("---"):
            continue
        flag, _, value = token.partition("=")
        if flag not in own:
            bad.append(f"{flag} (not an option of {'locust' if own is _locust_options() else command})")
        elif flag == "--sim-arg" and (sim := _FLAG.match(value)) and sim.group(0) not in _options_of("kneecap sim"):
            bad.append(f"--sim-arg={sim.group(0)} (not an option of kneecap sim)")
    return bad


def _all_mentions() -> list[Mention]:
    return [m for page in PAGES for m in _mentions(os.path.relpath(page, ROOT), _read(page))]


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_commands_and_flags_exist(page):
    """Every `kneecap X --flag` and `locust --flag` the docs show is accepted by the real parser (click, Locust's)."""
    rel = os.path.relpath(page, ROOT)
    problems = [f"{rel}:{m.line}: `{m.text}`: {', '.join(bad)}"
                for m in _mentions(rel, _read(page)) if (bad := _bad_options(m))]
    assert not problems, "\n".join(problems)


def test_the_docs_show_every_subcommand():
    """Each subcommand is shown at least once, so the flag check above has something to check for each."""
    shown = {_command_of(m.text) for m in _all_mentions() if not m.context}
    assert {f"kneecap {name}" for name in _kneecap_options()} <= shown


def test_flag_check_catches_a_wrong_flag():
    """The extraction itself: a made-up flag in each place a flag can hide is reported; real ones pass."""
    sample = "\n".join([
        "# `kneecap sim` reference", "",
        "Start it with `kneecap run --workers 2 --no-such-run-flag`.", "",
        "`--port 0` picks a port; `--no-such-sim-flag` does not exist.", "",
        "```sh", "kneecap worker --master h -- --processes 4 --no-such-locust-flag",
        "kneecap run --sim-arg=--max-num-seqs=16 \\", "    --sim-arg=--no-such-sim-arg  # --ignored-in-a-comment",
        "locust -f locustfile.py --overrides '{}' --no-such-locust-option", "```", "",
        "Also `python -m benchmarks.peers --streams 8` and its `--seconds 30`: another program's flags.", "",
    ])
    found = [bad for m in _mentions("sample.md", sample) for bad in _bad_options(m)]
    assert found == ["--no-such-run-flag (not an option of kneecap run)",
                     "--no-such-sim-flag (not an option of kneecap sim)",
                     "--no-such-locust-flag (not an option of locust)",
                     "--sim-arg=--no-such-sim-arg (not an option of kneecap sim)",
                     "--no-such-locust-option (not an option of locust)"]


# --- versions -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_schema_versions_are_the_ones_the_code_writes(page):
    """`kneecap.summary/N` and `kneecap.processes/N` in the docs name what harness writes (results.py, cost.py).

    Older summaries that kneecap still reads are named in words ("versions 1 and 2"), never as a schema string, and
    never as a shorthand like "`/1` or `/2`" after one.
    """
    text = _read(page)
    for written, kind in ((SCHEMA, "summary"), (PROCESSES_SCHEMA, "processes")):
        for found in re.findall(rf"kneecap\.{kind}/\d+", text):
            assert found == written, f"{os.path.relpath(page, ROOT)} says {found}; the code writes {written}"
    shorthand = re.findall(r"kneecap\.\w+/\d+`?\s*(?:,|or|and)\s*`?/\d+", text)
    assert not shorthand, f"{os.path.relpath(page, ROOT)}: {shorthand}: name one schema, the one the code writes"


def test_results_page_states_the_current_schemas():
    text = _read(os.path.join(ROOT, "docs", "results.md"))
    assert f"Schema `{SCHEMA}`" in text and f"schema `{PROCESSES_SCHEMA}`" in text


# --- the layout block ---------------------------------------------------------------------------------------------


def _layout_entries() -> list[tuple[str, str]]:
    """docs/architecture.md's Layout block as (head, text): an entry starts at column 0 and runs on through the
    indented lines below it; its head is its first word (`harness/sim/`, `harness/run.py`, `scenarios/`)."""
    text = _read(os.path.join(ROOT, "docs", "architecture.md"))
    section = text.split("\n## Layout\n", 1)[1]
    block = re.search(r"^```\n(.*?)^```", section, flags=re.MULTILINE | re.DOTALL).group(1)
    entries: list[list[str]] = []
    for line in block.splitlines():
        if line.strip():
            if line[0].isspace():
                entries[-1].append(line)
            else:
                entries.append([line])
    return [(e[0].split()[0].rstrip(","), "\n".join(e)) for e in entries]


def _listed_modules() -> set[str]:
    """Every harness/ module the block names. In a harness/ entry a bare name is relative to the entry's folder
    (`harness/sim/  engine.py` is harness/sim/engine.py; `harness/run.py; procs.py` is harness/procs.py); a name
    starting with harness/ is a path from the repository's root, wherever it stands."""
    listed = set()
    for head, text in _layout_entries():
        base = head if head.endswith("/") else os.path.dirname(head) + "/"
        for name in re.findall(r"[\w/]+\.py\b", text):
            if name.startswith("harness/"):
                listed.add(name)
            elif head.startswith("harness/"):
                listed.add(base + name)
    return listed


def _modules() -> set[str]:
    """The .py files under harness/ now (a package's __init__.py is its folder's entry, not a line of its own)."""
    return {os.path.relpath(p, ROOT).replace(os.sep, "/")
            for p in glob.glob(os.path.join(ROOT, "harness", "**", "*.py"), recursive=True)
            if os.path.basename(p) != "__init__.py"}


def _first_docstring_line(module: str) -> str:
    doc = ast.get_docstring(ast.parse(_read(os.path.join(ROOT, module)))) or "(no docstring)"
    return doc.splitlines()[0]


def test_layout_lists_every_module():
    missing = sorted(_modules() - _listed_modules())
    assert not missing, "docs/architecture.md's Layout block lacks (add each, with a few words from its docstring):\n" \
        + "\n".join(f"  {m}: {_first_docstring_line(m)}" for m in missing)


def test_layout_lists_only_modules_that_exist():
    gone = sorted(_listed_modules() - _modules())
    assert not gone, f"docs/architecture.md's Layout block names modules that do not exist: {gone}"
    heads = [head for head, _ in _layout_entries()]
    assert all(os.path.exists(os.path.join(ROOT, h)) for h in heads), [h for h in heads if not os.path.exists(h)]


def test_layout_has_an_entry_per_package():
    packages = {os.path.relpath(os.path.dirname(p), ROOT).replace(os.sep, "/") + "/"
                for p in glob.glob(os.path.join(ROOT, "harness", "*", "__init__.py"))}
    heads = {head for head, _ in _layout_entries()}
    assert packages <= heads, f"no Layout entry for {sorted(packages - heads)}"


# --- the metric registry ------------------------------------------------------------------------------------------


def test_metrics_page_holds_the_registry_table():
    """docs/metrics.md's registry table is what harness/metrics/vocabulary.py renders: the docs cannot drift."""
    from harness.metrics.vocabulary import markdown_table

    text = _read(os.path.join(ROOT, "docs", "metrics.md"))
    table = text.split("<!-- metric-registry:begin -->\n", 1)[1].split("<!-- metric-registry:end -->", 1)[0]
    assert table == markdown_table(), "docs/metrics.md's registry table is stale: paste the output of " \
        "`python -m harness.metrics.vocabulary` between its metric-registry markers"
