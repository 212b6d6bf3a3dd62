"""Each class's own tail, TTFT split, tokens, cost and hang-ups (``analysis/mix/rows.py``). Pure."""

from __future__ import annotations

import math
import random

from harness.analysis.mix.classes import class_steps
from harness.analysis.mix.rows import MIN_ROWS, NOT_PER_CLASS, add_counted, add_rows_detail, subset
from harness.analysis.why.rows import columns, explain_rows
from harness.metrics.aggregate import CLASS_CANCEL_KEY
from harness.metrics.record import RequestRecord
from harness.metrics.rows import encode_row
from harness.spec.cost import CostSpec
from harness.workload.mix import TrafficClass, Workload

W = Workload(input_tokens=None, output_tokens=None, joint=None)
CLASSES = [TrafficClass(name="chat", weight=7, workload=W), TrafficClass(name="rag", weight=3, workload=W)]


def _rows(seed: int = 2, n: int = 3000, rare: int = 0):
    """Chat: 100-token prompts, TTFT ~50 ms whatever the prompt. RAG: 2% of its prompts are 8,000 tokens and take
    1.5 s to the first token, the rest 2,000 tokens and ~0.4 s: its own p99 is its long prompts. ``rare``: that many
    rows of a third class (index 2), too few for a tail."""
    rng, rows = random.Random(seed), []
    for i in range(n + rare):
        cls = 2 if i >= n else 0 if rng.random() < 0.7 else 1
        prompt = 100 if cls != 1 else 8000 if rng.random() < 0.02 else 2000
        ttft = rng.lognormvariate(math.log(0.05 if cls != 1 else 1.5 if prompt == 8000 else 0.4), 0.1)
        rec = RequestRecord(start=0.0, ttft_s=ttft, e2e_s=ttft + 1.0, ttfo_s=ttft, output_tokens=51,
                            prompt_tokens=prompt, cached_tokens=prompt // 2 if cls == 1 else 0,
                            chunk_times=[ttft, ttft + 1.0], class_index=cls)
        rows.append(encode_row(rec, i / 300, worker=i % 2))
    return rows


def _explain(c):
    return explain_rows(c)


def test_a_class_tail_is_explained_among_its_own_requests():
    cols = columns(_rows())
    classes = class_steps(cols, CLASSES, rows_seen=len(cols["flags"]))
    add_rows_detail(classes, cols, explain=_explain, cost=None)
    chat, rag = classes
    p99 = {c.name: next(a for a in c.tail["attributions"] if a["metric"] == "ttft_s" and a["quantile"] == 0.99)
           for c in classes}
    # RAG's slowest 1% are its 8,000-token prompts (2% of it): named as the cause within the class
    assert p99["rag"]["verdict"] == "cause" and "prompt_tokens" in p99["rag"]["causes"], p99["rag"]
    assert "prompt" in p99["rag"]["line"]
    # chat's tail is lognormal noise on equal prompts: nothing to name
    assert p99["chat"]["verdict"] != "cause" or "prompt_tokens" not in p99["chat"]["causes"], p99["chat"]
    # the TTFT split is the class's: its client part counts its own successful requests
    assert rag.ttft_split is not None and chat.ttft_split is not None
    assert rag.ttft_split["client"]["ttft"]["n"] == rag.requests, rag.ttft_split["client"]
    # the server's histograms are the whole step's: not split by class
    assert rag.ttft_split["server"] == {"source": NOT_PER_CLASS.stages_note}
    assert chat.cost is None


def test_subset_is_the_rows_of_the_class_alone():
    rows = _rows(n=400)
    cols = columns(rows)
    idx = [i for i, c in enumerate(cols["class"]) if c == 1]
    assert subset(cols, idx) == columns([rows[i] for i in idx])
    assert subset(cols, idx[:1]) == columns([rows[idx[0]]]) and subset(cols, [])["ttft"] == []


def test_tokens_cost_and_a_class_too_small_for_a_tail():
    cols = columns(_rows(n=600, rare=MIN_ROWS - 1))
    classes = class_steps(cols, [*CLASSES, TrafficClass(name="rare", weight=1, workload=W)],
                          rows_seen=len(cols["flags"]))
    spec = CostSpec(input_per_mtok=1.0, cached_input_per_mtok=0.25, output_per_mtok=4.0, currency="EUR")
    add_rows_detail(classes, cols, explain=_explain, cost=spec)
    mine = {c.name: [i for i, k in enumerate(cols["class"]) if k == n] for n, c in enumerate(classes)}
    for c in classes:
        prompt = sum(cols["prompt"][i] for i in mine[c.name])
        cached = sum(cols["cached"][i] for i in mine[c.name])
        out = sum(cols["output"][i] for i in mine[c.name])
        assert c.tokens == {"input": prompt - cached, "cached_input": cached, "output": out}, c.name
        test = ((prompt - cached) * 1.0 + cached * 0.25 + out * 4.0) / 1e6
        assert c.cost["test_cost"] == round(test, 6) and c.cost["currency"] == "EUR"
        assert c.cost["per_request"] == round(test / c.requests, 9)
        assert c.cost["output_share"] == round(out / sum(cols["output"]), 6)
    assert classes[2].requests == MIN_ROWS - 1 and classes[2].tail is None and classes[2].ttft_split is None
    assert classes[0].tail is not None
    # a flat price alone: the output share to split it by, no metered figures
    add_rows_detail(classes, cols, explain=_explain, cost=CostSpec(per_hour=2.0))
    assert set(classes[1].cost) == {"currency", "output_share"}


def test_hang_ups_per_class_from_the_bucket_counters():
    cols = columns(_rows(n=200))
    classes = class_steps(cols, CLASSES, rows_seen=len(cols["flags"]))
    add_counted(classes, {f"{CLASS_CANCEL_KEY}1": 5, "adapter:a0": 3})
    chat, rag = classes
    assert (chat.cancelled, chat.cancelled_share) == (0, None)
    assert rag.cancelled == 5 and rag.cancelled_share == round(5 / (rag.requests + 5), 6)
