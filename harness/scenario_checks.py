"""Checks across a scenario's sections, each problem with its key path into ``check``: sessions (the workload's or a
mix class's) against the API and the session metrics, images against the API, a mix's classes (their SLO metrics,
fixed users in open loop) and the class a knee follows."""

from __future__ import annotations

import dataclasses

from harness.checker import Checker, did_you_mean
from harness.metrics.vocabulary import CLASS_KNEE_METRICS, CLASS_SLO_METRICS, WHOLE_ANSWER_SLO_METRICS
from harness.spec.load import LoadPlan
from harness.workload.arrivals import trace_gaps
from harness.workload.images import IMAGE_APIS
from harness.workload.mix import Workload

__all__ = ["check_classes", "check_images", "check_knee_class", "check_sessions", "trace_arrivals"]



def check_sessions(workload: Workload, api: str, knee_metric: str | None, slo: tuple, check: Checker) -> None:
    """Sessions (the workload's, or a class's of its mix) need a chat-like API; session metrics need sessions."""
    talking = ["workload.sessions"] if workload.sessions is not None else \
        [f"workload.mix.{c.name}.sessions" for c in workload.mix if c.workload.sessions is not None]
    if talking and api == "embeddings":
        check.fail(talking[0], "embeddings have no conversations: use input_tokens (and batch)")
    if talking:
        return
    if knee_metric is not None and knee_metric.startswith("session_"):  # None: already a problem
        check.fail("load.knee.metric", f"{knee_metric} needs workload.sessions; use ttft, tpot, itl or e2e")
    for t in slo:
        if t.metric.startswith("session_"):
            check.fail(f"slo.{t.metric}", "session metrics need workload.sessions")


def check_images(workload: Workload | None, api: str, check: Checker) -> None:
    """``workload.images`` (or a class's) only where the API takes images; a class without its own has the
    workload's, so that is named once."""
    if workload is None or api in IMAGE_APIS:
        return
    for where in ["workload"] if workload.images else [f"workload.mix.{c.name}" for c in workload.mix
                                                       if c.workload.images]:
        check.fail(f"{where}.images", f"images are for api: chat or messages (this endpoint's api is {api})")


def check_knee_class(load: LoadPlan, names: tuple[str, ...], check: Checker) -> None:
    if load.knee_class not in names:
        check.fail("load.knee.class", f"no class '{load.knee_class}' in workload.mix" + (
            # called only with a knee class
            f"{did_you_mean(load.knee_class, names)} (classes: {', '.join(names)})" if names else  # type: ignore[arg-type]
            ": a knee follows one class of a mix (workload.mix)"))
    if load.knee_metric not in CLASS_KNEE_METRICS:
        check.fail("load.knee.metric", f"{load.knee_metric} is not measured per class; a class's knee follows "
                                       f"{', '.join(CLASS_KNEE_METRICS)}")


def check_classes(workload: Workload, streams: bool, check: Checker, *, open_loop: bool) -> None:
    for c in workload.mix:
        if c.users is not None and open_loop:
            check.fail(f"workload.mix.{c.name}.users", "open loop has no users to fix: each arrival draws its class "
                                                       "by weight; give a weight")
        for t in c.slo:
            where = f"workload.mix.{c.name}.slo.{t.metric}"
            if t.metric not in CLASS_SLO_METRICS:
                check.fail(where, f"not judged per class; a class's slo takes {', '.join(CLASS_SLO_METRICS)} (put "
                                  f"{t.metric} in the scenario's own slo)")
            elif not streams and t.metric not in WHOLE_ANSWER_SLO_METRICS:
                check.fail(where, "needs a streamed answer; without streaming (stream: false, embeddings) use "
                                  f"{', '.join(WHOLE_ANSWER_SLO_METRICS)}")


def trace_arrivals(load: LoadPlan, workload: Workload | None, check: Checker) -> LoadPlan:
    """``load.arrival: {process: trace}`` without a file replays ``workload.trace``'s own timestamps (rescaled per
    step, as a file's are)."""
    if load.arrival != "trace" or load.trace_gaps is not None or check.problems:
        return load
    if workload is None or workload.trace is None or workload.trace.tree is not None:
        check.fail("load.arrival", "process: trace needs a file (file, column) or a JSON-lines workload.trace to "
                                   "take its timestamps from (a weka trace's sessions arrive as the process says)")
        return load
    try:
        gaps = trace_gaps([r.t_ms / 1000 for r in workload.trace.requests])
    except ValueError as exc:
        check.fail("workload.trace.file", f"{exc}: its timestamps cannot be arrivals")
        return load
    return dataclasses.replace(load, trace_gaps=tuple(gaps))
