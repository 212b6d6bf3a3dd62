"""The ``kneecap`` command. Errors go to stderr as ``Error: ...``; user mistakes never print a traceback."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

import click

from harness import exitcodes
from harness.capacity.compare_cmd import compare
from harness.capacity.export_cmd import export
from harness.capacity.runs_cmd import check_labels, runs
from harness.capacity.sweep_cmd import sweep
from harness.cli_kit import InputError, read_run
from harness.sim import SimConfig, run_sim
from harness.sim.engine import EngineConfig
from harness.sim.faults import FAULT_KINDS, FaultConfig, parse_fault_spec
from harness.sim.models import Adapter, ServedModel, lora_count, parse_lora
from harness.sim.models import problems as model_problems
from harness.sim.openai import OutputPolicy
from harness.sim.plan import Behavior
from harness.sim.presets import DEFAULT_PRESET, PRESETS
from harness.sinks.config import DEFAULT_BUCKET, DEFAULT_ORG, DEFAULT_TOKEN_ENV

F = TypeVar("F", bound=Callable[..., Any])


_MIB = 1 << 20
_TYPES: dict[str, type] = {"int": int, "float": float, "str": str, "int | None": int, "str | None": str}
"""Click type of each field annotation our config dataclasses use (strings: ``from __future__ import annotations``)."""


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(package_name="kneecap")
def main() -> None:
    """kneecap: load-test LLM inference endpoints and find the knee."""


def _engine_options(func: F) -> F:
    """One flag per EngineConfig field; unset flags keep the preset's value."""
    for f in reversed(dataclasses.fields(EngineConfig)):
        if f.name == "seed":  # one --seed drives the whole simulator
            continue
        kind = click.Choice(["on", "off"]) if f.name == "prefix_cache" else _TYPES[str(f.type)]
        func = click.option(f"--{f.name.replace('_', '-')}", f.name, type=kind, default=None,
                            help=f"{f.metadata['help']} [preset]")(func)
    return func


def _field_options(cls: type, *, units: dict[str, tuple[str, int]] | None = None,
                   types: dict[str, click.ParamType] | None = None) -> Callable[[F], F]:
    """One flag per field of dataclass ``cls`` that has ``help`` metadata, in field order, with the field's
    default, so each default is written once (in the dataclass). ``units`` renames a flag that takes another
    unit, field = flag × scale (``{"max_body_bytes": ("max_body_mb", _MIB)}``); ``types`` sets a click type; a field
    with ``choices`` metadata takes one of them."""
    def decorate(func: F) -> F:
        for f in reversed(dataclasses.fields(cls)):
            if "help" not in f.metadata:
                continue
            name, scale = (units or {}).get(f.name, (f.name, 1))
            default = f.default if scale == 1 else f.default / scale
            kind = (types or {}).get(f.name) or (click.Choice(f.metadata["choices"]) if "choices" in f.metadata
                                                 else float if scale != 1 else _TYPES[str(f.type)])
            func = click.option(f"--{name.replace('_', '-')}", name, type=kind, default=default,
                                show_default=default is not None, help=f.metadata["help"])(func)
        return func
    return decorate


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8000, show_default=True, type=int, help="Port to bind (0 = any free port).")
@click.option("--preset", type=click.Choice(sorted(PRESETS)), default=DEFAULT_PRESET, show_default=True,
              help="Deployment shape; see the README's simulator section.")
@click.option("--model", default=None, help="Served model name [sim-PRESET].")
@click.option("--serve-model", "serve_models", multiple=True, metavar="NAME[:ITER_BASE_MS]",
              help="Serve NAME on an engine of its own (own slots, KV cache, queue), optionally with its own "
                   "--iter-base-ms. Repeatable; replaces --model.")
@click.option("--lora", "loras", multiple=True, metavar="NAME[@BASE]",
              help="Serve a LoRA adapter on BASE's engine [the first model] (vLLM's --lora-modules). Repeatable.")
@click.option("--lora-count", type=click.IntRange(min=0), default=0, show_default=True,
              help="Serve LoRA adapters lora-0 ... lora-<N-1> on the first model.")
@_engine_options
@_field_options(OutputPolicy)  # --eos-median --eos-sigma --early-eos-share --tokens-per-word
@_field_options(Behavior)  # --reasoning-tokens ... (routed out of **engine below)
@click.option("--fault", "faults", multiple=True, metavar="KIND=P",
              help=f"Inject a fault with probability P; KIND is one of {', '.join(FAULT_KINDS)}. Repeatable.")
@_field_options(FaultConfig)  # --stall-s --long-line-bytes --retry-after-s
@_field_options(SimConfig, units={"max_body_bytes": ("max_body_mb", _MIB)},  # --max-waiting --max-body-mb
                types={"trace_file": click.Path(dir_okay=False)})  # --trace-file --seed --close-after-p ...
def sim(host: str, port: int, preset: str, model: str | None, serve_models: tuple[str, ...], loras: tuple[str, ...],
        lora_count: int, eos_median: float, eos_sigma: float, early_eos_share: float,
        tokens_per_word: float, faults: tuple[str, ...], stall_s: float, long_line_bytes: int, retry_after_s: int,
        max_waiting: int | None, max_body_mb: float, trace_file: str | None, seed: int, close_after_p: float,
        accept_delay_ms: float, **engine: Any) -> None:  # engine: EngineConfig/Behavior flags, typed per field
    """Serve a simulated OpenAI-compatible LLM (vLLM-like batching and capacity) until interrupted."""
    behavior = Behavior(**{f.name: engine.pop(f.name) for f in dataclasses.fields(Behavior)})
    overrides = {k: v for k, v in engine.items() if v is not None}
    engine_cfg = dataclasses.replace(PRESETS[preset], seed=seed, **overrides)
    problems = engine_cfg.problems() + behavior.problems()
    if eos_median < 0 or eos_sigma < 0 or tokens_per_word <= 0:
        problems.append("--eos-median and --eos-sigma must be >= 0 and --tokens-per-word > 0")
    if stall_s < 0 or long_line_bytes < 1 or retry_after_s < 0 or max_body_mb <= 0:
        problems.append("--stall-s, --retry-after-s must be >= 0; --long-line-bytes, --max-body-mb > 0")
    if not 0.0 <= early_eos_share <= 1.0:
        problems.append(f"--early-eos-share must be within [0, 1], got {early_eos_share}")
    if not 0.0 <= close_after_p <= 1.0:
        problems.append(f"--close-after-p must be within [0, 1], got {close_after_p}")
    if accept_delay_ms < 0:
        problems.append(f"--accept-delay-ms must be >= 0, got {accept_delay_ms}")
    if max_waiting is not None and max_waiting < 0:
        problems.append(f"--max-waiting must be >= 0, got {max_waiting}")
    try:
        probabilities = parse_fault_spec(list(faults))
    except ValueError as exc:
        problems.append(str(exc))
    served, adapters = _served(serve_models, loras, lora_count, problems)
    problems += model_problems(served, adapters, model=model or f"sim-{preset}", model_flag=model is not None,
                                 engine=engine_cfg)
    if problems:
        raise click.UsageError("; ".join(problems))
    config = SimConfig(
        engine=engine_cfg, model=model or f"sim-{preset}", served=served, loras=adapters, behavior=behavior,
        policy=OutputPolicy(eos_median=eos_median, eos_sigma=eos_sigma, early_eos_share=early_eos_share,
                            tokens_per_word=tokens_per_word),
        faults=FaultConfig(probabilities, stall_s=stall_s, long_line_bytes=long_line_bytes,
                           retry_after_s=retry_after_s),
        max_waiting=max_waiting, max_body_bytes=int(max_body_mb * _MIB), trace_file=trace_file, seed=seed,
        close_after_p=close_after_p, accept_delay_ms=accept_delay_ms)
    try:
        run_sim(config, host, port)
    except OSError as exc:
        raise click.ClickException(f"cannot serve on {host}:{port}: {exc.strerror or exc}") from None


def _served(serve_models: tuple[str, ...], loras: tuple[str, ...], count: int,
            problems: list[str]) -> tuple[tuple[ServedModel, ...], tuple[Adapter, ...]]:
    """``--serve-model``, ``--lora`` and ``--lora-count`` as the simulator's types; a bad spec joins ``problems``."""
    served: list[ServedModel] = []
    adapters: list[Adapter] = []
    # each spec with its parser and the list that takes what it gives (Any: the pairing is not a type)
    jobs: list[tuple[str, Callable[[str], Any], list[Any]]] = [
        *((s, ServedModel.parse, served) for s in serve_models), *((s, parse_lora, adapters) for s in loras)]
    for spec, parse, out in jobs:
        try:
            out.append(parse(spec))
        except ValueError as exc:
            problems.append(str(exc))
    return tuple(served), (*adapters, *lora_count(count))


def _check_host(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``--host`` must be an http(s) URL with a host name (the rule of ``endpoint.host``), checked before anything
    starts: a bad one would otherwise surface only as every worker's request failing."""
    from harness.scenario import url_problem

    problem = None if value is None else url_problem(value)
    if problem:
        raise click.BadParameter(problem)
    return value


def _check_sets(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> dict[str, Any]:
    """``--set KEY=VALUE`` (repeatable): the value parsed as YAML (``25`` a number, ``[1, 2]`` a list); the keys
    are checked with the scenario, each problem by its key path."""
    import yaml

    out: dict[str, Any] = {}
    for item in value:
        key, eq, raw = item.partition("=")
        if not eq or not key.strip():
            raise click.BadParameter(f"{item!r}: give KEY=VALUE, e.g. load.step.max_lag_ms=25")
        try:
            out[key.strip()] = yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise click.BadParameter(f"{item!r}: the value is not YAML ({exc.problem})") from None
    return out


@main.command()
@click.argument("scenario", required=False, type=click.Path(dir_okay=False))
@click.option("--host", default=None, callback=_check_host,
              help="Endpoint base URL, e.g. http://127.0.0.1:8000 [scenario endpoint.host; none: start the simulator].")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Local Locust worker processes [one per 400 users, at most one per core].")
@click.option("--out", default=None, type=click.Path(file_okay=False),
              help="Results folder [scenario sinks.results_dir/NAME-RUNID].")
@click.option("--save-requests", is_flag=True, help="Also write every request record to OUT/requests.jsonl.")
@click.option("--no-report", is_flag=True,
              help="Do not build report.html (~1-2 s of CPU at the end); kneecap report OUT builds it later.")
@click.option("--insecure", is_flag=True,
              help="Accept any TLS certificate from the endpoint (a test endpoint; overrides endpoint.tls.verify).")
@click.option("--seed", type=int, default=None, help="Override workload.seed.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", callback=_check_sets,
              help="Override one scenario field by its dotted key, the value in YAML, e.g. "
                   "--set load.step.max_lag_ms=25. Repeatable.")
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE", callback=check_labels,
              help="Record this label with the run in the run store (docs/runs.md), e.g. env=prod. Repeatable.")
@click.option("--sim-arg", "sim_args", multiple=True, metavar="ARG",
              help="Extra argument for the built-in simulator, e.g. --sim-arg=--max-num-seqs=16. Repeatable.")
@click.option("--influx-url", default=None, help="Write live results to this InfluxDB 2 [scenario sinks.influxdb].")
@click.option("--influx-org", default=DEFAULT_ORG, show_default=True)
@click.option("--influx-bucket", default=DEFAULT_BUCKET, show_default=True)
@click.option("--influx-token-env", default=DEFAULT_TOKEN_ENV, show_default=True,
              help="Environment variable holding the InfluxDB token.")
def run(scenario: str | None, host: str | None, workers: int | None, out: str | None, save_requests: bool,
        no_report: bool, insecure: bool, seed: int | None, sets: dict[str, Any], labels: dict[str, str],
        sim_args: tuple[str, ...], influx_url: str | None, influx_org: str, influx_bucket: str,
        influx_token_env: str) -> None:
    """Run a scenario's load plan headless, find the knee, check the SLOs, write results.

    Without SCENARIO, runs the built-in default (chat-shaped traffic). Exit codes: 0 ok, 1 error,
    2 usage or invalid input, 3 an SLO failed, 4 no valid result (no step counted),
    5 degraded (a worker was lost).
    """

    from harness.run import RunOptions
    from harness.run import run as run_plan
    from harness.scenario import ScenarioError

    influx = {"influx_url": influx_url, "influx_org": influx_org, "influx_bucket": influx_bucket,
              "influx_token_env": influx_token_env} if influx_url else None
    opts = RunOptions(scenario, host=host, workers=workers, out=out,
                      save_requests=save_requests, insecure=insecure, seed=seed, sim_args=sim_args, influx=influx,
                      labels=labels, overrides=sets, report=not no_report)
    try:
        code = run_plan(opts, say=lambda line: click.echo(line))
    except ScenarioError as exc:
        click.echo(f"Error: {exc}", err=True)
        raise SystemExit(exitcodes.USAGE) from None
    except (OSError, RuntimeError) as exc:
        raise click.ClickException(str(exc)) from None
    raise SystemExit(code)


def _check_master(ctx: click.Context, param: click.Parameter, value: str) -> str:
    if not value.strip() or any(c.isspace() for c in value) or "://" in value:
        raise click.BadParameter(f"expected the master's host name or IP address (e.g. 10.0.0.5), got {value!r}")
    return value


@main.command(context_settings={"ignore_unknown_options": True})
@click.option("--master", "master_host", required=True, callback=_check_master,
              help="The master's host name or address (its --master-bind-host).")
@click.option("--master-port", type=click.IntRange(1, 65535), default=5557, show_default=True,
              help="The master's --master-bind-port.")
@click.option("-f", "--locustfile", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Locustfile [kneecap's own]; the master's must define the same user classes.")
@click.argument("locust_args", nargs=-1, type=click.UNPROCESSED)
def worker(master_host: str, master_port: int, locustfile: str | None, locust_args: tuple[str, ...]) -> None:
    """Run one Locust worker of a master on another host (this process becomes ``locust --worker``).

    Plain Locust underneath: ``locust -f LOCUSTFILE --worker --master-host MASTER --master-port PORT
    [LOCUST_ARGS]`` (e.g. ``--processes 4``). The scenario, and every file it names, must be at the same path
    as on the master: workers load the path the master was given. See docs/fleets.md."""
    import os
    import shlex
    import sys

    from harness.run import LOCUSTFILE

    argv = [sys.executable, "-m", "locust", "-f", locustfile or LOCUSTFILE, "--worker", "--master-host",
            master_host, "--master-port", str(master_port), *locust_args]
    click.echo(f"kneecap worker: exec {shlex.join(argv[1:])}", err=True)
    sys.stdout.flush()
    os.execv(sys.executable, argv)  # no parent left behind: signals and the exit code are Locust's own


@main.command()
@click.argument("log", type=click.Path(dir_okay=False))
@click.option("--input", "input_col", default=None, help="Prompt-token column [guessed from common names].")
@click.option("--output", "output_col", default=None, help="Output-token column [guessed from common names].")
@click.option("--input-mode", type=click.Choice(["auto", "whole", "new"]), default="auto", show_default=True,
              help="Session logs: the input column is each request's whole prompt, or only the tokens the turn "
                   "adds (auto: decided from the data, see docs/sessions-log.md).")
@click.option("--out", "out_file", type=click.Path(dir_okay=False), default=None,
              help="Also write the workload block to this file.")
def fit(log: str, input_col: str | None, output_col: str | None, input_mode: str, out_file: str | None) -> None:
    """Summarise a production log (CSV or JSONL) and fit length distributions to it.

    A log with a session id column (session_id, conversation_id, session) also gets its sessions fitted:
    turns, first and later input tokens, output tokens and think time, as a workload: sessions: block."""
    from harness.workload.fit import fit_log, fit_sessions, sessions_yaml, workload_yaml
    from harness.workload.session_log import load_session_log, session_column
    from harness.workload.traces import TraceError, guess_columns, read_columns, read_header

    try:
        header = read_header(log)
        guess_in, guess_out = guess_columns(header)
        input_col, output_col = input_col or guess_in, output_col or guess_out
        for flag, col in (("--input", input_col), ("--output", output_col)):
            if col is None:
                raise click.UsageError(f"cannot tell which column of {log} to use for {flag}; columns are "
                                       f"{', '.join(header) or '(none)'}. Pass {flag} COLUMN.")
        assert input_col is not None and output_col is not None  # the loop above raised otherwise
        sessions = load_session_log(log, input_mode=input_mode, input_col=input_col, output_col=output_col) \
            if session_column(header) else None  # a session log first: its reader's messages name the session and turn
        cols = read_columns(log, [input_col, output_col])
    except TraceError as exc:  # the log, not the command, is wrong: exit 2 like any bad input
        raise InputError(str(exc)) from None
    try:
        result = fit_log(input_col, cols[input_col], output_col, cols[output_col])
    except ValueError as exc:  # too few rows to fit
        raise InputError(f"{log}: {exc}; give a log with more requests") from None
    for c in (result.input, result.output):
        qs = "  ".join(f"{k}={v}" for k, v in c.quantiles.items())
        click.echo(f"{c.column}: n={c.count} mean={c.mean:.1f}  {qs}")
        ks = "  ".join(f"{k}={v:.3f}" for k, v in sorted(c.ks.items(), key=lambda kv: kv[1]))
        click.echo(f"  KS distance on held-out rows (lower is better): {ks}")
    click.echo(f"correlation {input_col} vs {output_col}: Pearson(log) {result.pearson_log:+.3f}, "
               f"Spearman {result.spearman:+.3f}\n")
    if sessions is not None and any(len(s) > 1 for s in sessions.scripts):
        sfit = fit_sessions(sessions)
        click.echo(f"sessions: {sfit.sessions} by {sessions.columns['session']}, {sfit.turns_total} turns, "
                   f"input_mode {sfit.input_mode}, {sfit.compactions} compactions, largest context "
                   f"{sfit.max_context_tokens} tokens")
        for q in (sfit.turns, sfit.first_input_tokens, sfit.turn_input_tokens, sfit.output_tokens,
                  sfit.think_time_s):
            if q is not None:
                qs = "  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in q.quantiles.items())
                click.echo(f"  {q.name}: n={q.count} lognormal median={q.median:.4g} sigma={q.sigma:.3f} "
                           f"(KS {q.ks:.3f})  {qs}")
        for note in sfit.notes:
            click.echo(f"  note: {note}")
        click.echo()
        block = sessions_yaml(sfit, log)
    else:
        if sessions is not None:
            click.echo(f"sessions: every session of {log} has one turn: fitted as single requests\n")
        block = workload_yaml(result, log)
    click.echo(block, nl=False)
    if out_file:
        try:
            with open(out_file, "w", encoding="utf-8") as f:
                f.write(block)
        except OSError as exc:
            raise click.ClickException(f"cannot write {out_file}: {exc.strerror or exc}") from None


@main.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
def report(run_dir: str) -> None:
    """Write RUN_DIR/report.html (self-contained) from RUN_DIR/summary.json."""
    from harness.report.html import write_report

    read_run(run_dir)  # refuse a broken summary (exit 2) before building anything
    try:
        click.echo(write_report(run_dir))
    except ValueError as exc:  # requests.jsonl
        raise InputError(str(exc)) from None
    except OSError as exc:
        raise click.ClickException(f"cannot write {run_dir}/report.html: {exc.strerror or exc}") from None
    except (KeyError, TypeError, IndexError, AttributeError, OverflowError) as exc:  # the schema passed it: our bug
        raise click.ClickException(f"cannot build a report from {run_dir}: {type(exc).__name__}: {exc} (the summary "
                                   "passed its schema check: please report this with the file)") from None


@main.command("influx-replay")
@click.argument("spool", type=click.Path(exists=True, dir_okay=False))
@click.option("--url", required=True, help="InfluxDB 2 URL.")
@click.option("--org", default=DEFAULT_ORG, show_default=True)
@click.option("--bucket", default=DEFAULT_BUCKET, show_default=True)
@click.option("--token-env", default=DEFAULT_TOKEN_ENV, show_default=True, help="Environment variable with the token.")
def influx_replay(spool: str, url: str, org: str, bucket: str, token_env: str) -> None:
    """Load a spool file (points a run could not write, see summary.json "influx") into InfluxDB."""
    import os

    from harness.sinks.influx import replay

    try:
        n = replay(spool, url=url, token=os.environ.get(token_env, ""), org=org, bucket=bucket)
    except Exception as exc:  # the client raises many types; the message is what the user needs
        raise click.ClickException(f"cannot write {spool} to {url}: {str(exc).splitlines()[0][:300]}") from None
    click.echo(f"wrote {n} points from {spool} to {url} (bucket {bucket})")


main.add_command(compare)
main.add_command(export)
main.add_command(runs)
main.add_command(sweep)

if __name__ == "__main__":
    main()
