"""The run's last lines, said once for every way a run ends: the knee, fleet changes, the SLO verdict, the cost,
where the results are; and ``processes.json`` (each process's CPU, the client's cost per streamed token).

Read from summary.json, the artefact every run writes (``kneecap run`` and a plain Locust master alike), through
its typed read model (``analysis/summary_model.py``, checked by ``report/validate.py``), so the lines say what
the file says; the exit code is the summary's (``harness/exitcodes.py``), or NO_VALID_RESULT for a file that is
not what kneecap writes. The cost line is rendered from the cost's figures, not read from its stored prose.
"""

from __future__ import annotations

import json
import os
import resource
import signal
from collections.abc import Callable

from msgspec import UnsetType

from harness import exitcodes
from harness.analysis.cost.client_cpu import RoleCpu, cost_line, processes_block, step_totals
from harness.analysis.counted import WHY, not_counted
from harness.analysis.mix.classes import class_figures, class_tail_lines, mix_step, probe_line
from harness.analysis.plain import knee_words
from harness.analysis.steps import SHARED_STAMP_LIMIT
from harness.procs import Child
from harness.report.validate import load_summary
from harness.summary import Generator, Step, Summary, level_unit

__all__ = ["keep_checkpoint", "say_verdict", "write_processes"]


def _thread_cpu() -> tuple[float, float]:
    """This thread's user and system CPU seconds (the whole process's off Linux)."""
    ru = resource.getrusage(getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF))
    return ru.ru_utime, ru.ru_stime


def _read_summary(path: str) -> Summary:
    """OUT/summary.json, typed; OSError, or ValueError naming its first problem with its key path."""
    with open(path, "rb") as f:
        return load_summary(f.read(), path)


def _untrusted(summary: Summary) -> list[str]:
    """One line per step kneecap could not time as it promises: its generator lagged, or it was cut short (neither
    counts, ``analysis.counted``), or some of its chunk times may be late by more than 1 ms (counted: ITL and fast
    TTFTs are what that moves)."""
    out = []
    for st in summary.steps:
        g = st.generator
        limit = g.lag_limit_ms
        if not g.reliable and g.send_lag_p99_ms and g.send_lag_p99_ms > limit:
            out.append(f"UNRELIABLE: step {st.index} ({st.level:g}): its requests went out late (send lag p99 "
                       f"{g.send_lag_p99_ms} ms, limit {limit:g}; event-loop lag p99 {g.lag_p99_ms} ms): the load "
                       f"generator added latency, {_NOT_COUNTED}")
        elif not g.reliable:
            out.append(f"UNRELIABLE: step {st.index} ({st.level:g}): its event-loop lag p99 was {g.lag_p99_ms} ms "
                       f"(limit {limit:g}): the load generator added latency, {_NOT_COUNTED}" + _held_off(g))
        elif not_counted(st) == "incomplete":
            out.append(f"NOT COUNTED: step {st.index} ({st.level:g}, {st.requests:,} requests): {WHY['incomplete']}, "
                       f"{_NOT_COUNTED}")
        if g.stamps_flagged:
            d = st.delivery
            why = ("the reader fell behind and one receive brought several chunks under one time" if
                   isinstance(d, UnsetType) or d.cause is None else
                   "the reader was away when they came (its loop lag p99 "
                   f"{g.lag_p99_ms} ms), though they came bunched anyway (see {_DELIVERY[d.cause]})")
            out.append(f"TIMING: step {st.index} ({st.level:g}): {g.shared_stamp_share:.1%} of its requests had chunk "
                       f"times that may be late by more than 1 ms (limit {SHARED_STAMP_LIMIT:.0%}): {why}; their ITL "
                       "and TTFT are uncertain at that scale")
    return out


_NOT_COUNTED = "so the step is not counted: it neither moves the knee nor passes or fails an SLO"

_DELIVERY = {"path": "BUFFERED", "server_writes": "BATCHED WRITES"}
"""The console's word for each cause of bunched chunks (``analysis.delivery``)."""


def token_lines(summary: Summary) -> list[str]:
    """One line per step whose output-token counts disagree (``analysis.token_counts``)."""
    from harness.analysis.token_counts import token_line

    return [f"TOKENS: step {st.index} ({st.level:g}): {line}" for st in summary.steps
            if st.complete and (line := token_line(st))]


def delivery_lines(summary: Summary) -> list[str]:
    """One line per cause of bunched chunks (``analysis.delivery``): the steps it was seen in and the first's words."""
    by: dict[str, list] = {}
    for st in summary.steps:
        if not isinstance(st.delivery, UnsetType) and st.delivery.cause is not None:
            by.setdefault(st.delivery.cause, []).append(st)
    return [f"{_DELIVERY[cause]}: step{'s' if len(steps) > 1 else ''} {', '.join(str(s.index) for s in steps)} "
            f"({', '.join(f'{s.level:g}' for s in steps)}): {steps[0].delivery.line}"
            for cause, steps in by.items()]


SHORT_ANSWER_WARN = 0.01
CEILING_GAP = 0.05
"""``workload.trace``: a server hit rate this far below the trace's ceiling is named (a few points are block edges)."""
"""Above this share of short answers (over the run's measured steps) the verdict says so."""


def short_answers(summary: Summary) -> list[str]:
    """One line when more than ``SHORT_ANSWER_WARN`` of the answers that asked for an exact length ended before it:
    the endpoint (or a gateway) did not honour ``ignore_eos``/``min_tokens``, so the run measured other lengths
    than the scenario's."""
    seen = [(st, st.answers) for st in summary.steps if not isinstance(st.answers, UnsetType)]
    asked = sum(a.length_asked for _, a in seen)
    short = sum(a.short for _, a in seen)
    if not asked or short / asked <= SHORT_ANSWER_WARN:
        return []
    why: dict[str, int] = {}
    for _, a in seen:
        for reason, n in a.short_by_finish_reason.items():
            why[reason] = why.get(reason, 0) + n
    reasons = ", ".join(f"{k} {v:,}" for k, v in sorted(why.items(), key=lambda kv: -kv[1]))
    got = [a.tokens_got_over_asked for _, a in seen if a.tokens_got_over_asked is not None]
    ratio = f"; output tokens got/asked {min(got):.2f}-{max(got):.2f} by step" if got else ""
    return [f"SHORT ANSWERS: {short / asked:.1%} of the {asked:,} answers that asked for an exact length ended "
            f"before it (finish_reason: {reasons}{ratio}): the endpoint did not honour ignore_eos/min_tokens, so "
            "these output lengths are not the scenario's; slo.short_answer_rate fails such a run"]


def ceiling_lines(summary: Summary) -> list[str]:
    """``workload.trace``: the server's prefix-cache hits beside the trace's own ceiling, by load; whether the blocks
    were token-exact; a step the server hit well below the ceiling named with its KV cache's fill."""
    seen = [(st, st.prefix_cache, st.prefix_cache.ceiling)
            for st in sorted(summary.steps, key=lambda st: st.level)
            if not isinstance(st.prefix_cache, UnsetType) and st.prefix_cache and st.prefix_cache.ceiling]
    if not seen:
        return []
    parts, below = [], []
    for st, cache, ceiling in seen:
        hit, share = cache.server.hit_rate, float(ceiling["share"])
        parts.append(f"{st.level:g}: {'?' if hit is None else f'{hit:.0%}'} of a {share:.0%} ceiling")
        if hit is not None and hit < share - CEILING_GAP:
            kv = st.server.kv_cache_usage_max if not isinstance(st.server, UnsetType) else None
            below.append(f"at {st.level:g} the server hit {hit:.0%} against a {share:.0%} ceiling: its cache "
                         f"evicts{'' if kv is None else f' (KV usage {kv:.0%})'} or holds less than the trace reuses")
    blocks = {str(c.get("blocks")) for _, _, c in seen}
    say = "token-exact blocks" if blocks == {"token-exact"} else \
        "blocks approximate: the prompts' token counts were not the trace's, so its block edges are not the " \
        "server's" if "approximate" in blocks else "blocks unmeasured: the server reported no prompt tokens"
    return ["prefix cache (trace): the server's hits against what an unbounded cache could serve, by load: "
            + ", ".join(parts) + f" ({say})" + ("" if all(c.server.hit_rate is not None for _, c, _ in seen) else
                                               " (?: the server reports no prefix-cache counters)"), *below]


def answers_lines(summary: Summary) -> list[str]:
    """``verify:``: the load where greedy answers began to differ from their references (``ANSWERS CHANGED``, with the
    share by step and one example), or that they did not; with checks, the same for answers that failed them."""
    seen = sorted(((st, st.verify) for st in summary.steps if not isinstance(st.verify, UnsetType)),
                  key=lambda sv: sv[0].level)
    if not seen:
        return []
    return _changed_lines(summary, seen) + _check_lines(summary, seen)


def _changed_lines(summary: Summary, seen: list) -> list[str]:
    compared = [(st, v) for st, v in seen if v.verified]
    if not compared:
        return []
    first = next(((st, v) for st, v in compared if v.changed), None)
    if first is None:
        return [f"answers: the same at every step ({sum(v.verified for _, v in compared):,} re-asked answers "
                "compared with their references)"]
    st, v = first
    by_step = ", ".join(f"{s.level:g}: {w.changed_share:.0%} of {w.verified}" for s, w in compared)
    e = v.examples[0] if v.examples else None
    said = f"; e.g. prompt {e.prompt}: {_words(e.reference)!r} became {_words(e.answer)!r}" if e else ""
    return [f"ANSWERS CHANGED: from {st.level:g} {level_unit(summary.mode)} on (step {st.index}): "
            f"{v.changed_share:.1%} of {v.verified} re-asked greedy answers differ from their references, first at "
            f"word {v.first_difference_median} (median){said}. By load: {by_step}{_by_class(st, 'changed')}"]


def _check_lines(summary: Summary, seen: list) -> list[str]:
    checked = [(st, v) for st, v in seen if v.checked]
    if not checked:
        return []
    first = next(((st, v) for st, v in checked if v.failed), None)
    if first is None:
        return [f"answers: every checked answer passed ({sum(v.checked for _, v in checked):,} answers checked)"]
    st, v = first
    by_step = ", ".join(f"{s.level:g}: {w.failed_share:.0%} of {w.checked}" for s, w in checked)
    reasons = ", ".join(f"{k} {n}" for k, n in v.failed_by.items())
    e = v.check_examples[0] if v.check_examples else None
    said = f"; e.g. prompt {e.prompt} ({e.failed}): ...{e.answer[-60:]!r}" if e else ""
    return [f"ANSWERS FAILED CHECKS: from {st.level:g} {level_unit(summary.mode)} on (step {st.index}): "
            f"{v.failed_share:.1%} of {v.checked} checked answers failed ({reasons}){said}. By load: {by_step}"
            f"{_by_class(st, 'failed')}"]


def _by_class(st: Step, what: str) -> str:
    """"; by class at that load: chat 0% of 40, rag 12% of 33" (a mix's classes that asked verify requests)."""
    whole = "verified" if what == "changed" else "checked"
    classes = st.classes if isinstance(st.classes, list) else []
    seen = [(c.name, c.answers.get(what) or 0, c.answers.get(whole) or 0) for c in classes if c.answers]
    return "; by class at that load: " + ", ".join(f"{name} {part / n:.0%} of {n:g}" for name, part, n in seen if n) \
        if any(n for _, _, n in seen) else ""


def _words(text: str, most: int = 6) -> str:
    words = text.split()
    return " ".join(words[:most]) + (" ..." if len(words) > most else "")


def _held_off(g: Generator) -> str:
    """Who made the loop late, when the kernel says: other processes, if it waited for a CPU longer than it ran."""
    wait, cpu = g.runqueue_wait_s, g.cpu_s
    if not isinstance(wait, float | int) or not isinstance(cpu, float | int) or wait <= cpu:
        return ""
    return (f"; its loops waited {wait:.1f} s for a CPU while running {cpu:.1f} s: other processes held the cores "
            "(a co-located server? give kneecap its own cores or machine, or run both from one shell: "
            "docs/real-engines.md)")


def write_processes(out: str, children: list[Child], report_cpu: list[float], say: Callable[[str], None]) -> None:
    """Write OUT/processes.json (CPU per role, the client's µs per streamed token) and say its line."""
    from harness.sinks.files import write_json_atomic

    me = resource.getrusage(resource.RUSAGE_SELF)
    rep_user, rep_sys = report_cpu if report_cpu else (0.0, 0.0)
    roles = [RoleCpu(role="parent", user_s=me.ru_utime - rep_user, sys_s=me.ru_stime - rep_sys,
                     max_rss_mb=round(me.ru_maxrss / 1024, 1))]
    roles += [RoleCpu(role=c.name, user_s=c.rusage.ru_utime, sys_s=c.rusage.ru_stime,
                      max_rss_mb=round(c.rusage.ru_maxrss / 1024, 1)) for c in children if c.rusage is not None]
    if report_cpu:
        roles.append(RoleCpu(role="report", user_s=rep_user, sys_s=rep_sys))
    try:
        steps = _read_summary(os.path.join(out, "summary.json")).steps
    except (OSError, ValueError):
        steps = []
    tokens, in_steps = step_totals(steps)
    block = processes_block(roles, output_tokens=tokens, workers_cpu_in_steps=in_steps)
    try:
        write_json_atomic(os.path.join(out, "processes.json"), block)
    except OSError as exc:
        say(f"processes.json not written: {exc}")
    say(cost_line(block))


def keep_checkpoint(out: str, returncode: int | None, say: Callable[[str], None]) -> bool:
    """After a master that ended without ``summary.json`` (killed, crashed, out of memory): its last checkpoint
    (``load/master.py``: the first is written as the run begins) becomes the summary, marked ``incomplete``, with exit
    code MASTER_LOST; True then. False when the master wrote its summary, or ended before the run began."""
    from harness.analysis.verdict import ExitFacts, run_exit_code
    from harness.sinks.files import CHECKPOINT, write_json_atomic

    path, kept = os.path.join(out, "summary.json"), os.path.join(out, CHECKPOINT)
    if os.path.exists(path):
        return False
    how = f"killed by {signal.Signals(-returncode).name}" if returncode is not None and returncode < 0 else \
        f"exit {returncode}"
    try:
        with open(kept, encoding="utf-8") as f:
            data = json.load(f)
        steps = [s for s in data["steps"] if s.get("complete")]
    except (OSError, ValueError, KeyError, TypeError):
        say(f"the master ended ({how}) before the run began: no results")
        return False
    data["incomplete"] = (f"the master was lost ({how}); the steps judged up to its last checkpoint "
                          f"({len(steps)} complete of {len(data['steps'])})")
    data["exit_code"] = run_exit_code((), None, ExitFacts(master_lost=True))
    write_json_atomic(path, data)
    os.remove(kept)
    say(f"MASTER LOST: {data['incomplete']}")
    return True


def class_lines(summary: Summary) -> list[str]:
    """``workload.mix``: one line per class, at the knee's step (else the last judged step with classes)."""
    at, probes = mix_step(summary), probe_line(summary)
    lines = [f"class {name} (step {at.index}): {text}" for name, text in class_figures(at)] if at else []
    tails = [f"class {name} {line}" for name, line in class_tail_lines(at, summary.knee.metric)] if at else []
    return lines + tails + ([probes] if probes else []) + _hangup_lines(summary)


def _hangup_lines(summary: Summary) -> list[str]:
    """Users who hung up: whether the server freed their slots, at the knee's step (else the last judged one)."""
    steps = [st for st in summary.steps if not isinstance(st.cancelled_slots, UnsetType)]
    at = next((st for st in steps if st.index == summary.knee.step_index), steps[-1] if steps else None)
    # steps keeps only set cancelled_slots
    return [f"hang-ups (step {at.index}): {at.cancelled_slots.words}"] if at else []  # type: ignore[union-attr]


def say_verdict(out: str, say: Callable[[str], None], report_cpu: list[float] | None = None, *,
                report: bool = True) -> int:
    """The run's last lines from its summary, and the report (unless ``report`` is False); ``report_cpu`` gets the
    report build's user and system CPU seconds."""
    path = os.path.join(out, "summary.json")
    try:
        summary = _read_summary(path)
    except OSError:
        say(f"no valid summary was written ({path}); see the messages above")
        return exitcodes.NO_VALID_RESULT
    except ValueError as exc:  # not what kneecap writes: the first problem, with its key path
        say(f"no valid summary was written ({exc}); see the messages above")
        return exitcodes.NO_VALID_RESULT
    knee, unit = summary.knee, level_unit(summary.mode)
    if knee.found:
        # the finder's own words (elasticities) stay in summary.json and the report
        say(f"knee: {knee.level:g} {unit} ({knee.confidence} confidence) - {knee_words(summary) or knee.reason}")
    else:
        say(f"knee: not found ({knee.reason})")
    events = summary.fleet_events
    if events:
        lost = [e for e in events if e.kind == "lost"]
        steps = sorted({i for e in events for i in e.steps})
        say(("DEGRADED: " if lost else "fleet: ") + f"{len(lost)} worker(s) lost, {len(events) - len(lost)} joined; "
            f"steps {', '.join(map(str, steps)) or 'none'} not judged (their levels were re-run)")
    if not isinstance(summary.invalid, UnsetType):
        say(f"INVALID: {summary.invalid}")
    for line in _untrusted(summary) + delivery_lines(summary) + short_answers(summary) + answers_lines(summary) \
            + token_lines(summary) + ceiling_lines(summary):
        say(line)
    slo = summary.slo
    if slo.thresholds:
        verdict = "PASSED" if slo.passed else "FAILED"
        within = "None" if slo.max_load_within_slo is None else f"{slo.max_load_within_slo:g}"
        say(f"SLO {verdict} up to the knee; largest load within SLO: {within}")
    for line in class_lines(summary):
        say(line)
    if summary.cost_line:  # the master logged it mid-output; the verdict's lines are where a user looks
        say(summary.cost_line)
    if not report:
        say(f"results: {path} (no report asked; kneecap report {out} builds it)")
        return summary.exit_code
    t0 = _thread_cpu()
    try:
        from harness.report.html import write_report  # here: its imports count as the report's cost

        say(f"results: {path}, report: {write_report(out)}")
    except Exception as exc:  # the summary is the result: a report failure must not hide it or the exit code
        say(f"results: {path} (report not written: {type(exc).__name__}: {exc}; try: kneecap report {out})")
    if report_cpu is not None:
        t1 = _thread_cpu()
        report_cpu[:] = [t1[0] - t0[0], t1[1] - t0[1]]
    return summary.exit_code
