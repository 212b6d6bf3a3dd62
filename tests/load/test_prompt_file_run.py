"""Prompts from a file, end to end: ``kneecap run`` against the simulator, its trace as the truth.

Two classes share one JSON-lines file of real text (quotes, line breaks, non-ASCII): ``asis`` sends each prompt as it
is (no ``input_tokens``; ``unique_prompts: false``, so the simulator's hash of the message is the file's text's),
``sized`` cuts or pads them to drawn lengths, calibrated on the simulator's count (1.3 tokens a word).
"""

from __future__ import annotations

import json

import pytest

from harness.sim.prefix import message_hash
from harness.workload.corpus import builtin
from tests.kit.run import kneecap_run, write_scenario
from tests.kit.sim import start_sim

pytestmark = pytest.mark.integration

SCENARIO = """
    name: prompt-file
    endpoint: {api: chat, model: sim-tiny}
    workload:
      seed: 3
      mix:
        - {name: asis, weight: 1, prompts: {file: prompts.jsonl}, unique_prompts: false, output_tokens: 4}
        - name: sized
          weight: 1
          prompts: {file: prompts.jsonl, field: text}
          input_tokens: {dist: lognormal, median: 400, sigma: 0.6, min: 150, max: 2000}
          output_tokens: 4
    load: {mode: constant, users: 4, duration_s: 6, step: {warmup_s: 1}}
"""


def _prompts() -> list[str]:
    """40 paragraphs of the prose corpus (20 to 300 words), with non-ASCII and a tab the JSON must escape."""
    paragraphs = [p for p in builtin("prose", 0).text.split("\n") if 20 <= len(p.split()) <= 300]
    return [f"{p}\n\tRésumé — «{i}»" for i, p in enumerate(paragraphs[:40])]


def test_requests_carry_the_files_text_at_the_calibrated_lengths(tmp_path):
    texts = _prompts()
    with (tmp_path / "prompts.jsonl").open("w") as f:
        for t in texts:
            f.write(json.dumps({"prompt": t, "text": t}, ensure_ascii=False) + "\n")
    trace = tmp_path / "trace.jsonl"
    with start_sim("--preset", "tiny", "--tokens-per-word", "1.3", "--iter-per-seq-ms", "0",
                   "--trace-file", str(trace)) as sim:
        r = kneecap_run(write_scenario(tmp_path, SCENARIO), "--save-requests", host=sim.url, out=tmp_path / "out")
    assert r.code == 0, r.output
    served = {row["id"]: row for row in map(json.loads, trace.read_text().splitlines())}
    records = sorted((rec for rec in r.records if rec["ok"]), key=lambda rec: rec["start"])
    asis = [served[rec["response_id"]] for rec in records if rec["class"] == "asis"]
    sized = [(rec, served[rec["response_id"]]) for rec in records if rec["class"] == "sized"]
    assert len(asis) > 50 and len(sized) > 50, (len(asis), len(sized))

    # as it is: the message the simulator hashed is one of the file's prompts, character for character
    hashes = {message_hash("user", t): t for t in texts}
    sent = [row["message_hashes"] for row in asis]
    assert all(len(h) == 1 and h[0] in hashes for h in sent), sent[:3]
    assert len({h[0] for h in sent}) > 20  # drawn across the file
    assert all(rec.get("prompt_tokens_target") is None for rec in records if rec["class"] == "asis")

    # sized: the simulator's count hits each drawn target within 1% once the first few taught the calibration
    off = [abs(row["prompt_tokens"] - rec["prompt_tokens_target"]) / rec["prompt_tokens_target"]
           for rec, row in sized[8:]]
    assert max(off) < 0.01, sorted(off)[-5:]
    targets = [rec["prompt_tokens_target"] for rec, _ in sized]
    assert min(targets) < 300 < 600 < max(targets), targets  # cut (short targets) and padded (long ones)
