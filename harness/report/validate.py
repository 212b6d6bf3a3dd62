"""Is this ``summary.json`` one kneecap wrote? Every problem with its key path, before a report reads it. Pure.

``summary_problems(data)`` checks a parsed summary against the schemas kneecap reads
(``kneecap.summary/1``, ``/2`` and ``/3``, docs/results.md) and returns every problem, in document order::

    steps[2].latency_ms: expected a mapping, got a list
    knee.found: missing required key

``parse_summary(data, name)`` decodes the file's bytes, parses the JSON and raises ``ValueError`` with
the first problem (and how many more), so ``kneecap report``/``compare`` refuse a broken file with one
line instead of a traceback or a report of nothing. Fields a later version adds are allowed: a reader
checks what it needs, so version 1 files keep working and version 3 ones are refused by ``schema``.

The schema is data (``SUMMARY``), in a small grammar:

- ``int``, ``float`` (any number; never a boolean), ``str``, ``bool``, ``dict`` (any mapping);
- a tuple is "one of", with ``None`` for null: ``(float, None)`` is a number or null;
- a set of strings is "one of these values": ``{"closed", "open"}``;
- ``[spec]`` is a list of ``spec``; ``[a, b]`` is a list of exactly two items;
- a dict is a mapping with those keys: ``"key?"`` optional, ``"key@2"`` required from schema version 2
  on, ``"*"`` any other key, ``"$level"`` the load level's key (``users``, or ``rate_rps`` open loop).
"""

from __future__ import annotations

import json
from typing import Any

from harness.analysis.results import READABLE_SCHEMAS, level_key
from harness.checker import decode_text

__all__ = ["SUMMARY", "parse_summary", "summary_problems"]

_NUM = (float, None)
_STAT = {"count": int, "mean?": _NUM, "p50?": _NUM, "p90?": _NUM, "p95?": _NUM, "p99?": _NUM, "p999?": _NUM,
         "max?": _NUM, "p99_ci?": ([float, float], None), "p99_slo?": (float, str, None)}
"""A metric's percentiles (``metrics.aggregate.summarize_sketch``): only ``count`` when it had no data."""

_TOKENS = {"input": int, "cached_input": int, "output": int}
_COST = {"currency": str, "tokens": _TOKENS, "test_cost": _NUM, "flat_per_mtok": _NUM, "metered_per_mtok": _NUM,
         "metered_blended_per_mtok": _NUM, "break_even_tokens_per_month": _NUM, "capacity_tokens_per_month": _NUM,
         "floor": str, "floor_held": (bool, None), "notes": [str], "index?": int, "level?": float}
"""A step's cost figures (``analysis.pricing``, docs/cost.md); in ``cost.at`` with the step's index and level."""

_STEP = {
    "index": int, "$level": float, "duration_s": float, "warmup_s": float, "requests": int, "ok": int,
    "failures": {"*": int}, "failure_samples?": {"*": str}, "warmup_requests": int, "arrivals_per_s?": _NUM,
    "dropped_arrivals?": (int, None),
    "throughput": {"requests_per_s": float, "output_tokens_per_s": float, "input_tokens_per_s": float,
                   "goodput_per_s": float},
    "latency_ms": {"*": _STAT}, "tokens_per_s_per_user": _STAT, "output_tokens_counted": int,
    "prompt_length_error": _NUM,
    "generator": {"lag_p99_ms": _NUM, "lag_max_ms": _NUM, "cpu_max_pct": float, "reliable": bool, "cpu_s?": _NUM,
                  "output_tokens?": int, "cpu_us_per_token?": _NUM, "gc_pause_max_ms?": _NUM},
    "fleet_changed?": bool, "workers_lost?": [str], "workers_joined?": [str],
    "complete": bool, "stationary": (bool, None), "slo_passed": (bool, None),
    "slo": [{"threshold": str, "observed": (float, str, None), "passed": bool, "abort_on_fail": bool}],
    "server?": {"stages?": dict, "stages_note?": str, "*": _NUM}, "prefix_cache?": {"client": dict, "server": dict},
    "sessions?": dict,
    "stream?": dict, "new_connections?": int, "new_connection_share?": _NUM,
    "tail?": {"attributions": [dict]}, "ttft_split?": {"client": dict, "server": dict}, "cost?": _COST,
}

SUMMARY: dict[str, Any] = {
    "schema": str, "run_id": str, "scenario": str, "host": str, "model": str, "started_at": float,
    "ended_at": float, "mode": {"closed", "open"}, "stop_reason": (str, None), "workers": int,
    "steps": [_STEP],
    "knee": {"found": bool, "confirmed": bool, "step_index": (int, None), "$level": _NUM, "metric": str,
             "tail@2": str, "p99_before_ms": _NUM, "p99_after_ms": _NUM, "throughput_before": _NUM,
             "throughput_after": _NUM, "confidence": (str, None), "reason": str},
    "slo": {"thresholds": [str], "passed": (bool, None), "max_load_within_slo": _NUM},
    "exit_code": int, "degraded?": bool,
    "fleet_events?": [{"kind": {"lost", "joined"}, "worker": str, "at": float, "steps": [int]}],
    "influx?": dict, "merge_errors?": int,
    "clocks?": {"*": {"offset_ms": _NUM, "bound_ms": _NUM, "rtt_ms": _NUM, "samples": int, "drift_ms?": _NUM}},
    "clock_warnings?": [str],
    "cost?": {"currency": str, "hours_per_month": float, "prices": dict, "tokens": _TOKENS, "test_cost": _NUM,
              "at": {"*": _COST}, "reference": (str, None), "note": str, "line": str},
}
"""The fields every reader may rely on, per docs/results.md. The fleet fields (``fleet_changed``, ``workers_lost``,
``workers_joined``, ``degraded``, ``fleet_events``) are optional: they joined version 2 after its first files
were written, which lack them (absent means the fleet did not change)."""

_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false", dict: "a mapping",
          None: "null"}


def _kind(value: object) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


def _expected(spec: Any) -> str:
    if isinstance(spec, tuple):
        return " or ".join(_expected(s) for s in spec)
    if isinstance(spec, set):
        return "one of " + ", ".join(sorted(spec))
    if isinstance(spec, list):
        return f"a list of {len(spec)}" if len(spec) > 1 else "a list"
    return "a mapping" if isinstance(spec, dict) else _NAMES[spec]


def _fits(value: object, spec: Any) -> bool:
    """Whether ``value`` has the outer shape of ``spec`` (its items are checked by ``_walk``)."""
    if isinstance(spec, tuple):
        return any(_fits(value, s) for s in spec)
    if spec is None:
        return value is None
    if isinstance(spec, set):
        return value in spec
    if isinstance(spec, list):
        return isinstance(value, list) and (len(spec) == 1 or len(value) == len(spec))
    if isinstance(spec, dict) or spec is dict:
        return isinstance(value, dict)
    if spec is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if spec is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, spec)


def _walk(value: object, spec: Any, path: str, ctx: dict[str, Any], out: list[str]) -> None:
    if not _fits(value, spec):
        shown = f" {value!r}" if isinstance(value, (str, int, float)) and len(repr(value)) <= 40 else ""
        out.append(f"{path or '(top level)'}: expected {_expected(spec)}, got {_kind(value)}{shown}")
        return
    if isinstance(spec, tuple):  # descend into the alternative that fits
        _walk(value, next(s for s in spec if _fits(value, s)), path, ctx, out)
    elif isinstance(spec, list):
        for i, item in enumerate(value):  # type: ignore[arg-type]
            _walk(item, spec[0] if len(spec) == 1 else spec[i], f"{path}[{i}]", ctx, out)
    elif isinstance(spec, dict):
        _mapping(value, spec, path, ctx, out)  # type: ignore[arg-type]


def _mapping(value: dict, spec: dict, path: str, ctx: dict[str, Any], out: list[str]) -> None:
    named = set()
    for raw, item in spec.items():
        if raw == "*":
            continue
        key, _, since = raw.rstrip("?").partition("@")
        key = ctx["level"] if key == "$level" else key
        named.add(key)
        where = f"{path}.{key}" if path else key
        if key in value:
            _walk(value[key], item, where, ctx, out)
        elif not raw.endswith("?") and ctx["version"] >= int(since or 1):
            out.append(f"{where}: missing required key")
    if "*" in spec:
        for key, item in value.items():
            if key not in named:
                _walk(item, spec["*"], f"{path}.{key}" if path else str(key), ctx, out)


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
    _walk(data, SUMMARY, "", ctx, out)
    knee = data.get("knee")
    if not out and isinstance(knee, dict) and knee["found"] and knee[ctx["level"]] is None:
        out.append(f"knee.{ctx['level']}: a found knee needs its load level, got null")
    return out


def parse_summary(data: bytes, name: str) -> dict:
    """The summary in ``data`` (the bytes of the file ``name``); ValueError "NAME: KEY: problem" when broken."""
    try:
        text = decode_text(data)
    except ValueError as exc:
        raise ValueError(f"{name} is {exc}") from None
    try:
        summary = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{name} is not valid JSON ({exc})") from None
    except RecursionError:  # json's recursive parser on [[[[...]]]] thousands deep
        raise ValueError(f"{name} is not a kneecap summary (nested too deeply)") from None
    problems = summary_problems(summary)
    if problems:
        more = f" (and {len(problems) - 1} more problem{'s' if len(problems) > 2 else ''})" if len(problems) > 1 else ""
        raise ValueError(f"{name}: {problems[0]}{more}")
    return summary
