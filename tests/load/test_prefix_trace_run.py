"""``workload.trace`` end to end: the shipped Mooncake-format sample replayed against the simulator with its prefix
cache on; the server's own hit rate lands on the trace's ceiling, and a salt per request (the control) leaves it
nothing to hit; the control's server is too short for the longest prompts: a run that overflows is invalid."""

from __future__ import annotations

import pathlib
import shutil

import pytest

from tests.kit.run import kneecap_run, write_scenario

pytestmark = pytest.mark.integration

SAMPLE = pathlib.Path(__file__).resolve().parents[2] / "scenarios" / "traces" / "mooncake_sample.jsonl"


def run(tmp_path: pathlib.Path, salt: str, out: str, *sim_args: str, code: int = 0) -> dict:
    shutil.copy(SAMPLE, tmp_path / "trace.jsonl")
    r = kneecap_run(write_scenario(tmp_path, f"""
        name: trace-test
        endpoint: {{api: chat, model: sim-small}}
        workload:
          trace: {{file: trace.jsonl, format: mooncake, block_tokens: 64, salt: {salt}}}
        load: {{mode: constant, users: 6, duration_s: 4, step: {{warmup_s: 0.5}}}}
    """), "--sim-arg=--prefix-cache=on", *sim_args, out=tmp_path / out)
    assert r.code == code, r.output
    return r.summary["steps"][0]["prefix_cache"] | {"output": r.output, "summary": r.summary}


def test_the_servers_hits_reach_the_traces_ceiling_and_a_salt_per_request_leaves_none(tmp_path):
    same = run(tmp_path, "run", "a")
    ceiling, server = same["ceiling"], same["server"]
    assert ceiling["share"] > 0.4, ceiling  # the sample's first requests already share system prompts
    # the simulator's cache holds the whole sample: what it hits is what the trace allows (its block 16 = the
    # ceiling's server_block), within 2 points
    assert server["hit_rate"] == pytest.approx(ceiling["share"], abs=0.02), (server, ceiling)
    assert "prefix cache (trace): the server's hits against what an unbounded cache could serve" in same["output"]
    # the simulator has no /tokenize and counts ~1.3 tokens a word: the console says the blocks were approximate
    assert "(blocks approximate: the prompts' token counts were not the trace's" in same["output"]
    # the control, on a server of 800 tokens of context: the sample's longest prompts (up to ~1,800) overflow it, each
    # classed context_overflow; past 1% of the requests the run is invalid (exit 4) and says why
    control = run(tmp_path, "request", "b", "--sim-arg=--max-model-len=800", code=4)
    assert control["ceiling"]["share"] == 0 and control["server"]["hit_rate"] < 0.02, control
    summary, step = control["summary"], control["summary"]["steps"][0]
    assert step["failures"]["context_overflow"] > 0 and "maximum context length" in \
        step["failure_samples"]["context_overflow"], step["failures"]
    assert "overflowed the model's context" in summary.get("invalid", "") and "INVALID: " in control["output"]
