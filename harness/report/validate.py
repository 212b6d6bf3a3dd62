"""Is this ``summary.json`` one kneecap wrote? Every problem with its key path, before a report reads it. Pure.

The schema is the read model, ``analysis/summary_model.py`` (``kneecap.summary/1``, ``/2`` and ``/3``,
docs/results.md): ``summary_problems(data)`` walks a parsed summary against its Structs' types
(``msgspec.inspect``) and returns every problem, in the model's field order::

    steps[2].latency_ms: expected a mapping, got a list
    knee.found: missing required key
    steps[1]: unknown key 'complet'; did you mean 'complete'?

msgspec itself stops at the first problem; the walk finds them all, in the house's words (``checker.py``).
``load_summary(data, name)`` decodes the file's bytes into a ``Summary`` (``as_summary`` a parsed one) and
``parse_summary(data, name)`` into the plain dict; they raise ``ValueError`` with the first problem (and how
many more), so ``kneecap report``/``compare`` refuse a broken file with one line instead of a traceback or a
report of nothing.

Fields a later version adds are allowed (a reader checks what it needs), so version 1 files keep working; a schema
this kneecap does not know (``kneecap.summary/4``) is refused by ``schema``. Beyond the types: the load level's key
is the mode's (``users``, or ``rate_rps`` open loop), a key marked ``since`` is required from that version on, and
a found knee has its level.
"""

from __future__ import annotations

import json
from typing import Any, cast

import msgspec
import msgspec.inspect as mi

from harness.checker import decode_text, did_you_mean
from harness.summary import READABLE_SCHEMAS, Summary, level_key

__all__ = ["as_summary", "load_summary", "parse_summary", "summary_problems"]

_MODEL = mi.type_info(Summary)
_NAMES = {mi.IntType: "an integer", mi.FloatType: "a number", mi.StrType: "a string", mi.BoolType: "true or false",
          mi.NoneType: "null", mi.ListType: "a list", mi.DictType: "a mapping", mi.StructType: "a mapping"}


def _kind(value: object) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


def _expected(t: mi.Type) -> str:
    if isinstance(t, mi.UnionType):
        return " or ".join(_expected(s) for s in t.types)
    if isinstance(t, mi.LiteralType):
        return "one of " + ", ".join(sorted(map(str, t.values)))
    if isinstance(t, mi.TupleType):
        return f"a list of {len(t.item_types)}"
    return _NAMES[type(t)]


def _fits(value: object, t: mi.Type) -> bool:
    """Whether ``value`` has the outer shape of ``t`` (its items are checked by ``_walk``); numbers are never
    booleans, and a float field takes an integer, as JSON and msgspec do."""
    if isinstance(t, mi.UnionType):
        return any(_fits(value, s) for s in t.types)
    if isinstance(t, mi.AnyType):
        return True
    if isinstance(t, mi.NoneType):
        return value is None
    if isinstance(t, mi.LiteralType):
        return value in t.values
    if isinstance(t, mi.TupleType):
        return isinstance(value, list) and len(value) == len(t.item_types)
    if isinstance(t, (mi.StructType, mi.DictType)):
        return isinstance(value, dict)
    if isinstance(t, mi.FloatType):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(t, mi.IntType):
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, {mi.StrType: str, mi.BoolType: bool, mi.ListType: list}[type(t)])


def _walk(value: object, t: mi.Type, path: str, ctx: dict[str, Any], out: list[str]) -> None:
    if isinstance(t, mi.Metadata):
        t = t.type
    if not _fits(value, t):
        shown = f" {value!r}" if isinstance(value, (str, int, float)) and len(repr(value)) <= 40 else ""
        out.append(f"{path or '(top level)'}: expected {_expected(t)}, got {_kind(value)}{shown}")
    elif isinstance(t, mi.UnionType):  # descend into the alternative that fits
        _walk(value, next(s for s in t.types if _fits(value, s)), path, ctx, out)
    elif isinstance(t, mi.ListType):
        for i, item in enumerate(cast("list[object]", value)):  # _fits: a list
            _walk(item, t.item_type, f"{path}[{i}]", ctx, out)
    elif isinstance(t, mi.TupleType):
        for i, (item, it) in enumerate(zip(cast("list[object]", value), t.item_types, strict=True)):  # _fits: a list
            _walk(item, it, f"{path}[{i}]", ctx, out)
    elif isinstance(t, mi.DictType):
        for key, item in cast("dict[object, object]", value).items():  # _fits: a dict
            _walk(item, t.value_type, f"{path}.{key}" if path else str(key), ctx, out)
    elif isinstance(t, mi.StructType):
        _struct(cast("dict[str, object]", value), t, path, ctx, out)  # _fits: a dict


def _required(field: mi.Field, ctx: dict[str, Any]) -> bool:
    extra = (field.type.extra or {}) if isinstance(field.type, mi.Metadata) else {}
    if "level" in extra:  # users (closed loop) or rate_rps (open loop): the mode's key is required
        return field.encode_name == ctx["level"]
    return field.required or ctx["version"] >= extra.get("since", ctx["version"] + 1)


def _struct(value: dict, t: mi.StructType, path: str, ctx: dict[str, Any], out: list[str]) -> None:
    unknown = [str(k) for k in value if k not in {f.encode_name for f in t.fields}]  # a newer version's, or misspelt
    for f in t.fields:
        where = f"{path}.{f.encode_name}" if path else f.encode_name
        if f.encode_name in value:
            _walk(value[f.encode_name], f.type, where, ctx, out)
        elif _required(f, ctx):
            near = next(((k, hint) for k in unknown if (hint := did_you_mean(k, [f.encode_name]))), None)
            out.append(f"{path or '(top level)'}: unknown key '{near[0]}'{near[1]}" if near
                       else f"{where}: missing required key")


def summary_problems(data: object) -> list[str]:
    """Every way ``data`` (a parsed summary.json) differs from the schema its ``schema`` names; [] when none."""
    if not isinstance(data, dict):
        return [f"(top level): expected a mapping (a kneecap summary), got {_kind(data)}"]
    schema = data.get("schema")
    if schema not in READABLE_SCHEMAS:  # another version's fields would only give noise: stop here
        expected = " or ".join(READABLE_SCHEMAS)
        if "schema" not in data:
            return [f"schema: missing required key (expected {expected}): not a kneecap summary"]
        newer = " (written by a newer kneecap? read it with that one)" if str(schema).startswith("kneecap.") else ""
        return [f"schema: expected {expected}, got {_kind(schema)} {schema!r}{newer}"]
    mode = data.get("mode")
    ctx = {"version": int(schema.rsplit("/", 1)[1]), "level": level_key(mode if isinstance(mode, str) else "")}
    out: list[str] = []
    _walk(data, _MODEL, "", ctx, out)
    knee = data.get("knee")
    if not out and isinstance(knee, dict) and knee["found"] and knee[ctx["level"]] is None:
        out.append(f"knee.{ctx['level']}: a found knee needs its load level, got null")
    return out


def _checked(data: bytes, name: str) -> tuple[dict, Summary]:
    """The file's JSON and its ``Summary``; ValueError "NAME: KEY: problem (and N more problems)" when broken."""
    try:
        text = decode_text(data)
    except ValueError as exc:
        raise ValueError(f"{name} is {exc}") from None
    try:
        parsed = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{name} is not valid JSON ({exc})") from None
    except RecursionError:  # json's recursive parser on [[[[...]]]] thousands deep
        raise ValueError(f"{name} is not a kneecap summary (nested too deeply)") from None
    return parsed, as_summary(parsed, name)


def as_summary(data: object, name: str = "the summary", *, walk: bool = True) -> Summary:
    """``data`` (a parsed summary.json) as a ``Summary``; ValueError "NAME: KEY: problem (and N more problems)".

    ``walk=False`` for the master's own summary, in-process (the web UI's): msgspec alone types it, 0.1 ms where
    the walk takes ~10 ms a few steps; a problem is still a ValueError with its key path, the first only."""
    if isinstance(data, Summary):
        return data
    problems = summary_problems(data) if walk else []
    if not problems:
        try:
            return msgspec.convert(data, Summary)
        except msgspec.ValidationError as exc:  # the walk and msgspec disagree: still say where
            message, _, where = str(exc).partition(" - at `$")
            problems = [f"{where.rstrip('`').lstrip('.') or '(top level)'}: {message}"]
    n = len(problems) - 1
    raise ValueError(f"{name}: {problems[0]}" + (f" (and {n} more problem{'s' if n > 1 else ''})" if n else ""))


def load_summary(data: bytes, name: str) -> Summary:
    """The summary in ``data`` (the bytes of the file ``name``), typed; ValueError "NAME: KEY: problem" when
    broken (its first problem, and how many more)."""
    return _checked(data, name)[1]


def parse_summary(data: bytes, name: str) -> dict:
    """The summary in ``data`` as the plain dict, checked as ``load_summary`` checks it."""
    return _checked(data, name)[0]
