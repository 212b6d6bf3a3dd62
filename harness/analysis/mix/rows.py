"""What each class of a mix says beyond its quantiles: its own tail attribution, TTFT split, hang-ups, answers
(``verify:``), tokens and metered cost (``steps[].classes[]``). Pure.

A class's tail is explained among its own requests (a RAG class's p99 against the RAG class's rest, not against
the chat requests beside it, whose prompts are ten times shorter): the same ``explain_rows`` on the class's rows,
the server's queue and the step's ITL as for the whole step. It costs one more attribution per class (about the
step's own over all classes together); a class with fewer than ``MIN_ROWS`` rows gets none (its p99 is one or two
requests). Hang-ups are not rows (they are outside the step's requests), nor are answers compared: the workers
count them per class in the bucket's counters (``CLASS_CANCEL_KEY``, ``CLASS_ANSWERS_KEY``).

Cost per class: its measured requests' tokens (uncached input, cached input, output) and, with metered prices,
what they cost and what one request costs. A flat price is not divided between classes (by output tokens, by
GPU-seconds, by share of requests: a policy, not a measurement); ``output_share`` is there for whoever splits it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from operator import itemgetter
from typing import Any

from harness.analysis.cost.pricing import metered_cost
from harness.analysis.mix.classes import ClassStep, class_rows
from harness.analysis.step_columns import StepColumns
from harness.analysis.why.attribute import StepTails
from harness.analysis.why.decompose import ttft_split
from harness.metrics.aggregate import CLASS_ANSWERS_KEY, CLASS_CANCEL_KEY
from harness.spec.cost import CostSpec
from harness.summary import Server, Tokens

__all__ = ["MIN_ROWS", "NOT_PER_CLASS", "add_counted", "add_rows_detail", "subset"]

MIN_ROWS = 50
"""A class's tail and TTFT split need at least this many rows (p99 of 50 is the largest but one)."""


def subset(cols: Mapping[str, Sequence[Any]], idx: list[int]) -> Mapping[str, Sequence[Any]]:
    """The columns of the rows ``idx`` only (a C-level gather per column; a ``StepColumns``' arrays by one)."""
    if isinstance(cols, StepColumns):
        return cols.take(idx)
    if len(idx) == 1:
        return {k: [v[idx[0]]] for k, v in cols.items()}
    get = itemgetter(*idx) if idx else (lambda _: ())
    return {k: list(get(v)) for k, v in cols.items()}


NOT_PER_CLASS = Server(stages_note="not per class: the server's /metrics histograms are the whole step's (every "
                                   "class); see the step's ttft_split")
"""A class's TTFT split has the server's side only where it is per request (llama.cpp's ``timings``)."""


def add_rows_detail(classes: Sequence[ClassStep], cols: Mapping[str, Sequence[Any]], *,
                    explain: Callable[[StepColumns], StepTails], cost: CostSpec | None) -> None:
    """Each class's tail (``explain``: the step's ``explain_rows`` with its queue and ITL bound), TTFT split,
    tokens and cost, into ``classes`` (in the mix's order, as ``class_steps`` made them)."""
    output_all = sum(o or 0 for o in cols["output"])
    for cls, idx in zip(classes, class_rows(cols, len(classes)), strict=True):
        mine = StepColumns(subset(cols, idx))  # its tail and split share its arrays
        if len(idx) >= MIN_ROWS:
            cls.tail = explain(mine).to_dict()
            cls.ttft_split = ttft_split(mine, NOT_PER_CLASS)
        tokens = _tokens(mine)
        cls.tokens = tokens
        cls.cost = _cost(cost, tokens, len(idx), output_all) if cost is not None else None


def add_counted(classes: Sequence[ClassStep], extra: dict[str, int]) -> None:
    """Each class's hang-ups from the bucket's counters (``CLASS_CANCEL_KEY``), and their share of its requests; its
    answers compared and checked (``verify:``, ``CLASS_ANSWERS_KEY``), and the shares changed and failed."""
    for i, cls in enumerate(classes):
        n = extra.get(f"{CLASS_CANCEL_KEY}{i}", 0)
        cls.cancelled = n
        cls.cancelled_share = round(n / (cls.requests + n), 6) if n else None
        got = {what: extra.get(f"{CLASS_ANSWERS_KEY}{i}:{what}", 0) for what in ("verified", "changed", "checked",
                                                                                  "failed")}
        if got["verified"] or got["checked"]:
            cls.answers = {**got, "changed_share": round(got["changed"] / got["verified"], 4) if got["verified"]
                           else None, "failed_share": round(got["failed"] / got["checked"], 4) if got["checked"]
                           else None}


def _tokens(c: Mapping[str, Sequence[Any]]) -> dict[str, int]:
    """Uncached input, cached input and output tokens of the rows (failed ones too: the server read their prompts;
    their output is what came before the failure, none counted when unknown)."""
    prompt = sum(p or 0 for p in c["prompt"])
    cached = sum(k or 0 for k in c["cached"])
    return {"input": max(prompt - cached, 0), "cached_input": cached, "output": sum(o or 0 for o in c["output"])}


def _cost(spec: CostSpec, tokens: dict[str, int], requests: int, output_all: int) -> dict[str, Any]:
    out: dict[str, Any] = {"currency": spec.currency,
                           "output_share": round(tokens["output"] / output_all, 6) if output_all else None}
    test = metered_cost(spec, Tokens(**tokens))
    if test is not None:
        out.update(test_cost=round(test, 6), per_request=round(test / requests, 9) if requests else None)
    return out
