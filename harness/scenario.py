"""A scenario file (YAML) → a validated, typed ``Scenario``. Pure apart from reading the files it names.

Every problem is collected with its key path and reported at once in one ``ScenarioError``::

    scenarios/chat.yaml: 2 problems
      - workload.input_tokens.sigma: must be >= 0, got -1
      - load: unknown key 'user'; did you mean 'users'?

Overrides (CLI flags, the web UI's parameters) are dotted keys applied to the raw YAML *before*
validation, by ``load_scenario(..., overrides=)`` only — the one place where they happen.
The schema, key by key, is in ``scenarios/README.md``.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from typing import Any

import yaml

from harness.checker import Checker, decode_text
from harness.endpoint import DEFAULT_HOST, RETRY_AFTER, Endpoint, Tls, parse_endpoint, url_problem
from harness.errors import KneecapError
from harness.metrics.vocabulary import KNEE_METRICS, WHOLE_ANSWER_SLO_METRICS
from harness.scenario_checks import check_classes, check_images, check_knee_class, check_sessions, trace_arrivals
from harness.sinks.config import DEFAULT_WINDOW_S
from harness.spec.cost import CostSpec, cost_from_spec
from harness.spec.gate import GateSpec, gate_from_spec
from harness.spec.load import (
    MAX_LEVEL,
    MAX_LEVELS,
    OPEN_MODES,
    SEARCH_MODES,
    LoadPlan,
    ProbeSpec,
    StepSpec,
    level_count,
)
from harness.spec.slo import Threshold, slo_from_spec
from harness.spec.timeouts import Timeouts
from harness.spec.verify import VerifySpec, verify_from_spec
from harness.workload.arrivals import PROCESSES, trace_gaps
from harness.workload.mix import TrafficClass, Workload, workload_from_spec
from harness.workload.traces import TraceError, read_timestamps

__all__ = ["DEFAULT_HOST", "DEFAULT_SCENARIO", "LOAD_MODES", "RETRY_AFTER", "Endpoint", "LoadPlan", "Scenario",
           "ScenarioError", "StepSpec", "Timeouts", "Tls", "TrafficClass", "Workload", "apply_overrides",
           "default_scenario", "load_scenario", "parse_scenario", "url_problem"]

LOAD_MODES = ("staircase", "constant", "open_staircase", "search", "open_search")


class ScenarioError(KneecapError):
    """A scenario that cannot run; ``problems`` lists each with its key path."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source, self.problems = source, problems
        head = f"{source}: {len(problems)} problem{'s' if len(problems) != 1 else ''}"
        super().__init__(head + "".join(f"\n  - {p}" for p in problems))


@dataclass(frozen=True, kw_only=True)
class Scenario:
    name: str
    endpoint: Endpoint
    workload: Workload
    load: LoadPlan
    slo: tuple[Threshold, ...] = ()
    results_dir: str = "results"
    influxdb: dict | None = None
    description: str = ""
    source: str = "<scenario>"
    cost: CostSpec | None = None
    """The ``cost:`` block (``spec.cost``; the figures: ``analysis.cost.pricing``); None: no cost view."""
    gate: GateSpec | None = None
    """The ``gate:`` block over the defaults (``spec.gate``, ``kneecap compare --gate``); None: not given."""
    verify: VerifySpec | None = None
    """The ``verify:`` block (``spec.verify``): answers compared across load; None: not asked."""

    def class_endpoint(self, cls: TrafficClass) -> Endpoint:
        """The endpoint as ``cls`` sends to it: its model (and adapters), ignore_eos, and extra_body and headers merged
        over the scenario's."""
        o = cls.endpoint
        return dataclasses.replace(self.endpoint, model=o.get("model", self.endpoint.model),
                                   ignore_eos=o.get("ignore_eos", self.endpoint.ignore_eos),
                                   # a class of another model does not name the scenario model's adapters
                                   adapters=o.get("adapters", None if "model" in o else self.endpoint.adapters),
                                   extra_body={**self.endpoint.extra_body, **o.get("extra_body", {})},
                                   headers={**self.endpoint.headers, **o.get("headers", {})})


DEFAULT_SCENARIO: dict = {
    # The embedded default: chat-shaped traffic against the built-in simulator's default preset.
    "name": "default-chat",
    "description": "chat-shaped lengths against the built-in simulator (kneecap sim --preset small)",
    "endpoint": {"api": "chat", "model": "sim-small"},
    "workload": {"input_tokens": {"dist": "lognormal", "median": 500, "sigma": 0.7, "min": 16, "max": 4000},
                 "output_tokens": {"dist": "lognormal", "median": 100, "sigma": 0.5, "min": 8, "max": 800},
                 "seed": 1},
    "load": {"mode": "staircase", "users": {"start": 16, "step": 16, "max": 128},
             "step": {"warmup_s": 3, "min_duration_s": 10, "min_requests": 150, "max_duration_s": 40}},
    "slo": {"ttft": ["p(95)<1000"], "tpot": ["p(99)<60"], "error_rate": "rate<0.01"},
}


def default_scenario(overrides: dict[str, Any] | None = None) -> Scenario:
    """The built-in scenario (``DEFAULT_SCENARIO``), with overrides applied the same way as for files."""
    raw = apply_overrides(DEFAULT_SCENARIO, overrides or {})
    return parse_scenario(raw, source="<built-in default scenario>")


def apply_overrides(raw: dict, overrides: dict[str, Any]) -> dict:
    """A copy of ``raw`` with dotted keys set: ``{"load.max": 32, "endpoint.host": "http://..."}``."""
    out = yaml.safe_load(yaml.safe_dump(raw)) if raw else {}
    for dotted, value in overrides.items():
        node = out
        *parents, last = dotted.split(".")
        for key in parents:
            if not isinstance(node.get(key), dict):
                node[key] = {}
            node = node[key]
        node[last] = value
    return out


def load_scenario(path: str, overrides: dict[str, Any] | None = None) -> Scenario:
    """Read, override and validate a scenario file; raises ``ScenarioError`` (never a YAML traceback)."""
    try:
        with open(path, "rb") as f:
            text = decode_text(f.read())
        raw = yaml.safe_load(text)
    except OSError as exc:
        raise ScenarioError(path, [f"cannot read the file: {exc.strerror or exc}"]) from None
    except ValueError as exc:  # not text: decode_text's message, "not UTF-8 text (byte 0xff at offset 12, ...)"
        raise ScenarioError(path, [f"the file is {exc}"]) from None
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f"line {where.line + 1}, column {where.column + 1}: " if where else ""
        raise ScenarioError(path, [f"{at}not valid YAML ({getattr(exc, 'problem', None) or exc})"]) from None
    except RecursionError:  # PyYAML recurses per level: a file of thousands of nested [ or {
        raise ScenarioError(path, ["nested too deep to be a scenario (thousands of levels of [ or {)"]) from None
    if overrides:
        raw = apply_overrides(raw if isinstance(raw, dict) else {}, overrides)
    return parse_scenario(raw, source=path, base_dir=os.path.dirname(os.path.abspath(path)))


def parse_scenario(raw: Any, *, source: str = "<scenario>", base_dir: str = ".") -> Scenario:
    check = Checker(base_dir)
    top = check.mapping(raw, "", ("name", "description", "endpoint", "workload", "load", "slo", "sinks",
                                   "cost", "gate", "verify"),
                        required=("name", "workload"))
    if top is None:
        raise ScenarioError(source, check.problems)
    name = check.string(top, "name", "", name=True)
    description = top.get("description", "")
    if not isinstance(description, str):
        check.fail("description", "expected a string")
    endpoint = parse_endpoint(top.get("endpoint", {}), check)
    workload = workload_from_spec(top.get("workload"), check, slo_from_spec)
    load = _load(top.get("load", {}), check)
    slo = slo_from_spec(top.get("slo", {}), "slo", check)
    results_dir, influx = _sinks(top.get("sinks", {}), check)
    cost = cost_from_spec(top["cost"], "cost", check) if "cost" in top else None
    gate = gate_from_spec(top["gate"], "gate", check) if "gate" in top else None
    verify = _verify(top, endpoint, workload, slo, check)
    load = trace_arrivals(load, workload, check)
    streams = endpoint.stream and endpoint.api != "embeddings"
    knee_given = isinstance(top.get("load"), dict) and isinstance(top["load"].get("knee"), dict) \
        and "metric" in top["load"]["knee"]
    if not streams and load.knee_metric != "e2e":
        if knee_given:
            check.fail("load.knee.metric", f"{load.knee_metric} needs a streamed answer; without streaming "
                                           "(stream: false, embeddings) the knee follows e2e")
        else:
            load = dataclasses.replace(load, knee_metric="e2e")  # the one latency a whole answer has
    if not streams:
        for t in slo:
            if t.metric not in WHOLE_ANSWER_SLO_METRICS:
                check.fail(f"slo.{t.metric}", "needs a streamed answer; without streaming (stream: false, "
                                              f"embeddings) use {', '.join(WHOLE_ANSWER_SLO_METRICS)}")
    _check_length_slos(endpoint, workload, slo, check)
    if workload is not None and workload.batch is not None and endpoint.api != "embeddings":
        check.fail("workload.batch", f"batches are for api: embeddings (this endpoint's api is {endpoint.api})")
    check_images(workload, endpoint.api, check)
    if workload is not None:
        check_sessions(workload, endpoint.api, load.knee_metric, slo, check)
    if workload is not None and workload.mix:
        check_classes(workload, streams, check, open_loop=load.open_loop)
    if load.knee_class is not None:
        check_knee_class(load, workload.class_names if workload is not None else (), check)
    if workload is not None and not streams:
        # a class without its own has the workload's: name the workload's once
        given = [("workload", workload)] if workload.patience else [(f"workload.mix.{c.name}", c.workload)
                                                                   for c in workload.mix]
        for where, w in given:
            if w.patience is not None:
                check.fail(f"{where}.patience", "needs a streamed answer: without streaming (stream: false, "
                                                "embeddings) no token comes before the whole answer; use cancel")
    if check.problems:
        raise ScenarioError(source, check.problems)
    # a None workload failed the check, raised above
    return Scenario(name=name, endpoint=endpoint, workload=workload, load=load, slo=slo,  # type: ignore[arg-type]
                    results_dir=results_dir, influxdb=influx, description=description, source=source,
                    cost=cost, gate=gate, verify=verify)


def _verify(top: dict, endpoint: Endpoint, workload: Workload | None, slo: tuple[Threshold, ...],
            check: Checker) -> VerifySpec | None:
    """The ``verify:`` block, and what it needs: an answer to single prompts; ``slo.answers_changed_rate`` needs it,
    ``slo.answers_failed_rate`` its checks."""
    verify = verify_from_spec(top["verify"] or {}, "verify", check) if "verify" in top else None
    if verify is None and any(t.metric == "answers_changed_rate" for t in slo):
        check.fail("slo.answers_changed_rate", "needs answers to compare: add verify: {} (docs/verify.md)")
    if any(t.metric == "answers_failed_rate" for t in slo) and (verify is None or not verify.checks):
        check.fail("slo.answers_failed_rate", "needs answers to check: add verify: {check: {json: true}} (or a regex, "
                   "a schema, a prompt file's contains; docs/verify.md)")
    if verify is not None and (endpoint.api == "embeddings" or (workload is not None and workload.sessions)):
        check.fail("verify", "compares answers to single prompts: not for api: embeddings (no answer) nor "
                             "workload.sessions (each turn's history differs); remove verify:")
    return verify


def _check_length_slos(endpoint: Endpoint, workload: Workload | None, slo: tuple[Threshold, ...],
                       check: Checker) -> None:
    """``short_answer_rate`` judges answers that asked for an exact length: chat and completions with ``ignore_eos``
    (the scenario's endpoint, or a class's own). Where none asks, it could only fail: say so now."""
    def asks(ignore_eos: bool) -> bool:
        return ignore_eos and endpoint.api in ("chat", "completions")

    why = (f"no request asks for an exact output length (endpoint.ignore_eos is false, or api {endpoint.api} sends "
           "no ignore_eos/min_tokens): nothing to judge")
    mix = workload.mix if workload is not None else ()
    if any(t.metric == "short_answer_rate" for t in slo) and not (
            asks(endpoint.ignore_eos) or any(asks(c.endpoint.get("ignore_eos", endpoint.ignore_eos)) for c in mix)):
        check.fail("slo.short_answer_rate", why)
    for c in mix:
        if any(t.metric == "short_answer_rate" for t in c.slo) and not asks(c.endpoint.get("ignore_eos",
                                                                                              endpoint.ignore_eos)):
            check.fail(f"workload.mix.{c.name}.slo.short_answer_rate", why)


def _load(node: Any, check: Checker) -> LoadPlan:
    d = LoadPlan()
    keys = ("mode", "users", "rate", "spawn_rate", "duration_s", "arrival", "step", "knee", "max_in_flight",
            "on_worker_loss", "probes", "warmup_shapes")
    if check.mapping(node, "load", keys) is None:
        return d
    mode = check.string(node, "mode", "load", d.mode, choices=LOAD_MODES)
    start, step_by, top = _load_levels(node, check, mode)
    arrival, cv, gaps = _load_arrival(node, check, closed=mode not in OPEN_MODES)
    step = _load_step(node.get("step", {}), check)
    metric, confirm, knee_class = _load_knee(node.get("knee", {}), check)
    probes = _load_probes(node["probes"], check) if "probes" in node else None
    return LoadPlan(probes=probes, mode=mode, start=start, step_by=step_by, max=top,
                    spawn_rate=check.number(node, "spawn_rate", "load", d.spawn_rate, above=0),
                    duration_s=check.number(node, "duration_s", "load", d.duration_s, above=0), arrival=arrival,
                    burstiness_cv=cv, trace_gaps=gaps,
                    max_in_flight=check.number(node, "max_in_flight", "load", d.max_in_flight, integer=True, minimum=1),
                    step=step, knee_metric=metric, knee_class=knee_class, confirm_steps=confirm,
                    on_worker_loss=check.string(node, "on_worker_loss", "load", d.on_worker_loss,
                                                choices=("continue", "abort")),
                    warmup_shapes=check.boolean(node, "warmup_shapes", "load", d.warmup_shapes))


def _load_levels(node: dict, check: Checker, mode: str | None) -> tuple[Any, Any, Any]:
    """``load.users`` (closed modes) or ``load.rate`` (open modes): start, step and max of the staircase (one
    number for constant; min, resolution and max of a search), within the limits a plan may have."""
    d = LoadPlan()
    closed = mode not in OPEN_MODES
    level_key, other = ("users", "rate") if closed else ("rate", "users")
    if other in node:
        check.fail(f"load.{other}", f"{mode} mode is driven by {level_key}, not {other}")
    start, step_by, top = d.start, d.step_by, d.max
    level = node.get(level_key, {})
    if mode == "constant" and not isinstance(level, dict):
        level = {"start": level, "max": level}
    keys = ("min", "resolution", "max") if mode in SEARCH_MODES else ("start", "step", "max")
    if check.mapping(level, f"load.{level_key}", keys) is not None:
        where, unit = f"load.{level_key}", "users" if closed else "requests/s"
        limit = (f"the most {unit} one run may ask for, so a larger number is a typo, not a plan: give what your "
                 "fleet can drive; a Locust worker runs a few thousand users")
        start, step_by, top = (check.number(level, key, where, default, integer=closed, above=0, maximum=MAX_LEVEL,
                                            limit=limit)
                               for key, default in zip(keys, (d.start, d.step_by, d.max), strict=True))
        if None not in (start, top) and start > top:
            check.fail(where, f"{keys[0]} ({start}) must be <= max ({top})")
        elif None not in (start, step_by, top) and mode != "constant" and \
                (n := level_count(start, step_by, top)) > MAX_LEVELS:
            wider = (top - start) / (MAX_LEVELS - 1)
            wider = math.ceil(wider) if closed else wider
            grid = "search grid" if mode in SEARCH_MODES else "staircase"
            check.fail(f"{where}.{keys[1]}", f"the {grid} {start:g}, {start + step_by:g}, ... up to {top:,} has {n:,} "
                                             f"levels, more than the {MAX_LEVELS:,} a plan may have (55 hours at 20 s "
                                             f"a step): use a {keys[1]} of at least {wider:.3g} or a smaller max")
    return start, step_by, top


def _load_arrival(node: dict, check: Checker, *, closed: bool) -> tuple[Any, Any, tuple[float, ...] | None]:
    """``load.arrival`` (open_staircase only): the process, its burstiness cv, a trace's gaps."""
    d = LoadPlan()
    arrival, cv, gaps = d.arrival, d.burstiness_cv, None
    if "arrival" in node:
        a = node["arrival"]
        if closed:
            check.fail("load.arrival", "arrival processes apply to open_staircase mode only")
        elif check.mapping(a, "load.arrival", ("process", "cv", "file", "column")) is not None:
            arrival = check.string(a, "process", "load.arrival", d.arrival, choices=PROCESSES)
            cv = check.number(a, "cv", "load.arrival", d.burstiness_cv, above=0)
            if arrival == "trace" and ("file" in a or "column" in a):  # else workload.trace's (trace_arrivals)
                gaps = _trace_gaps(a, check)
            elif "file" in a or "column" in a:
                check.fail("load.arrival", "file and column apply to process: trace only")
    return arrival, cv, gaps


def _load_step(s: Any, check: Checker) -> StepSpec:
    """``load.step``: when a step's measurement is done."""
    sd = StepSpec()
    step = sd
    keys = ("warmup_s", "min_duration_s", "min_requests", "max_duration_s", "precision", "max_lag_ms")
    if check.mapping(s, "load.step", keys) is not None:
        step = StepSpec(warmup_s=check.number(s, "warmup_s", "load.step", sd.warmup_s, minimum=0),
                        min_duration_s=check.number(s, "min_duration_s", "load.step", sd.min_duration_s, above=0),
                        min_requests=check.number(s, "min_requests", "load.step", sd.min_requests, integer=True,
                                                  minimum=1),
                        max_duration_s=check.number(s, "max_duration_s", "load.step", sd.max_duration_s, above=0),
                        precision=check.number(s, "precision", "load.step", None, above=0, maximum=1,
                                               limit="a share of the p99: 0.1 ends a step once its p99 is known "
                                                     "to within ±10%"),
                        max_lag_ms=check.number(s, "max_lag_ms", "load.step", sd.max_lag_ms, above=0,
                                                limit="milliseconds of event-loop lag (p99) a judged step allows"))
        if None not in (step.min_duration_s, step.max_duration_s) and step.min_duration_s > step.max_duration_s:
            check.fail("load.step", f"min_duration_s ({step.min_duration_s}) must be <= max_duration_s "
                                    f"({step.max_duration_s})")
    return step


def _load_probes(node: Any, check: Checker) -> ProbeSpec | None:
    """``load.probes``: a fixed rate of tiny requests beside the load, reported apart (``load/probes.py``)."""
    d = ProbeSpec(rate=1.0)
    if check.mapping(node, "load.probes", ("rate", "input_tokens", "max_tokens"), required=("rate",)) is None:
        return None
    rate = check.number(node, "rate", "load.probes", None, above=0, maximum=1000)
    spec = ProbeSpec(rate=rate or 1.0, input_tokens=check.number(node, "input_tokens", "load.probes", d.input_tokens,
                                                                 integer=True, minimum=1),
                     max_tokens=check.number(node, "max_tokens", "load.probes", d.max_tokens, integer=True, minimum=1))
    return spec if rate is not None else None


def _load_knee(k: Any, check: Checker) -> tuple[Any, Any, Any]:
    """``load.knee``: the metric the knee follows, the class it follows it on (a mix), the steps that confirm it."""
    d = LoadPlan()
    metric, confirm, cls = d.knee_metric, d.confirm_steps, None
    if check.mapping(k, "load.knee", ("metric", "class", "confirm_steps")) is not None:
        metric = check.string(k, "metric", "load.knee", d.knee_metric, choices=KNEE_METRICS)
        confirm = check.number(k, "confirm_steps", "load.knee", d.confirm_steps, integer=True, minimum=0)
        cls = check.string(k, "class", "load.knee", None)
    return metric, confirm, cls


def _trace_gaps(node: dict, check: Checker) -> tuple[float, ...] | None:
    file = check.file(node, "file", "load.arrival")
    column = check.string(node, "column", "load.arrival", "TIMESTAMP")
    if file is None or column is None:
        return None
    try:
        return tuple(trace_gaps(read_timestamps(file, column)))
    except (TraceError, ValueError) as exc:
        check.fail("load.arrival.file", str(exc))
        return None


def _sinks(node: Any, check: Checker) -> tuple[str, dict | None]:
    if check.mapping(node, "sinks", ("results_dir", "influxdb")) is None:
        return "results", None
    results = check.string(node, "results_dir", "sinks", "results")
    influx = node.get("influxdb")
    if influx is not None:
        keys = ("url", "url_env", "token_env", "token", "org", "bucket", "window_s")
        if check.mapping(influx, "sinks.influxdb", keys, required=("org", "bucket")) is not None:
            if "token" in influx:
                check.fail("sinks.influxdb", "secrets never go in the file: name the variable with token_env")
            for key in ("url", "url_env", "token_env", "org", "bucket"):
                if key in influx:
                    check.string(influx, key, "sinks.influxdb")
            if ("url" in influx) == ("url_env" in influx):
                check.fail("sinks.influxdb", "give exactly one of url or url_env")
            influx = {**influx, "window_s": check.number(influx, "window_s", "sinks.influxdb", DEFAULT_WINDOW_S,
                                                         above=0)}
    return results, influx
