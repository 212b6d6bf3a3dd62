"""``kneecap fit`` on session logs: the fitted lognormals recover the parameters a synthetic log was drawn
from, and the printed ``workload: sessions:`` block is accepted by ``sessions_from_spec`` as it is."""

from __future__ import annotations

import json
import math
import random
import statistics

import pytest
import yaml
from click.testing import CliRunner

from harness.checker import Checker
from harness.cli import main
from harness.workload.fit import _count_mle
from harness.workload.sessions import sessions_from_spec

TRUE = {"turns": (4.0, 0.6), "first_input_tokens": (2000.0, 0.5), "turn_input_tokens": (300.0, 0.8),
        "output_tokens": (150.0, 0.7), "think_time_s": (3.0, 1.0)}
"""(median, sigma) of each quantity of the synthetic log."""
MEDIAN_REL, SIGMA_ABS = 0.07, 0.05
"""Tolerances of the round trip: about 4 standard errors at 1500 sessions (SE of ln median = sigma/sqrt(n) is
at most 0.6/sqrt(1500) = 0.016 for turns, the smallest sample; SE of sigma = sigma/sqrt(2n) <= 0.011)."""


def draw(rng: random.Random, key: str, params: dict = TRUE) -> float:
    median, sigma = params[key]
    return rng.lognormvariate(math.log(median), sigma)


def synthetic_log(path, sessions: int, seed: int, *, cap: int | None = None, keep: int = 0) -> list[dict]:
    """Whole-prompt rows with start times and durations, drawn as kneecap draws lengths (max(1, round(X))).
    With ``cap``, a turn whose context would pass it compacts the history to ``keep`` tokens first."""
    rng = random.Random(seed)
    rows = []
    for s in range(sessions):
        turns = max(1, round(draw(rng, "turns")))
        prompt = max(1, round(draw(rng, "first_input_tokens")))
        start, out, dur = 1_700_000_000.0 + 3600 * s, 0, 0.0
        for k in range(turns):
            if k:
                new = max(1, round(draw(rng, "turn_input_tokens")))
                prompt = prompt + out + new
                if cap is not None and prompt > cap:
                    prompt = keep + new
                start += dur + draw(rng, "think_time_s")
            out = max(1, round(draw(rng, "output_tokens")))
            dur = 0.2 + 0.01 * out
            rows.append({"conversation_id": f"c{s}", "turn": k + 1, "prompt_tokens": prompt, "completion_tokens": out,
                         "timestamp": round(start, 6), "e2e_s": round(dur, 6)})
    rng.shuffle(rows)  # lines of a real log interleave; turn numbers restore the order
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return rows


def fitted_block(tmp_path, log, *args: str) -> tuple[str, dict]:
    out = tmp_path / "w.yaml"
    result = CliRunner().invoke(main, ["fit", str(log), "--out", str(out), *args])
    assert result.exit_code == 0, result.output
    block = out.read_text()
    assert block in result.output  # the block printed is the block written
    return result.output, yaml.safe_load(block)


def check_spec(doc: dict):
    assert set(doc) == {"workload"} and set(doc["workload"]) == {"sessions", "seed"}
    check = Checker()
    spec = sessions_from_spec(doc["workload"]["sessions"], "workload.sessions", check)
    assert check.problems == [] and spec is not None
    return spec


def test_round_trip_recovers_the_generating_lognormals(tmp_path):
    log = tmp_path / "sessions.jsonl"
    synthetic_log(log, 1500, seed=11)
    output, doc = fitted_block(tmp_path, log)
    assert "sessions: 1500 by conversation_id" in output and "input_mode whole" in output
    sessions = doc["workload"]["sessions"]
    for key, (median, sigma) in TRUE.items():
        got = sessions[key]
        assert got["dist"] == "lognormal", key
        assert got["median"] == pytest.approx(median, rel=MEDIAN_REL), key
        assert got["sigma"] == pytest.approx(sigma, abs=SIGMA_ABS), key
    check_spec(doc)


def test_the_block_parses_with_compaction_and_the_largest_context(tmp_path):
    log = tmp_path / "agent.jsonl"
    rows = synthetic_log(log, 300, seed=12, cap=6000, keep=1500)
    output, doc = fitted_block(tmp_path, log)
    sessions = doc["workload"]["sessions"]
    biggest = max(r["prompt_tokens"] + r["completion_tokens"] for r in rows)
    assert sessions["max_context_tokens"] == biggest
    assert 1500 <= sessions["compaction"]["keep_tokens"] < biggest  # the summary, without the turn's message
    assert " compactions" in output and "0 compactions" not in output
    spec = check_spec(doc)
    assert spec.max_context_tokens == biggest and spec.compaction_keep_tokens == sessions["compaction"]["keep_tokens"]


def test_without_compactions_the_largest_context_is_offered_commented(tmp_path):
    log = tmp_path / "sessions.jsonl"
    synthetic_log(log, 50, seed=13)
    output, doc = fitted_block(tmp_path, log)
    assert "# max_context_tokens:" in output and "max_context_tokens" not in doc["workload"]["sessions"]


def test_a_new_token_log_with_the_mode_given(tmp_path):
    rng = random.Random(14)
    log = tmp_path / "new.csv"
    lines = ["session_id,input_tokens,output_tokens,delay_s"]
    news = []
    for s in range(400):
        for k in range(max(1, round(draw(rng, "turns")))):
            n = max(1, round(draw(rng, "first_input_tokens" if k == 0 else "turn_input_tokens")))
            news += [n] if k else []
            lines.append(f"s{s},{n},{max(1, round(draw(rng, 'output_tokens')))},{draw(rng, 'think_time_s'):.4f}")
    log.write_text("\n".join(lines) + "\n")
    output, doc = fitted_block(tmp_path, log, "--input-mode", "new")
    assert "input_mode new" in output
    got = doc["workload"]["sessions"]["turn_input_tokens"]
    assert got["median"] == pytest.approx(math.exp(statistics.fmean(math.log(n) for n in news)), rel=0.02)
    check_spec(doc)


def test_zero_think_times_and_single_turn_sessions(tmp_path):
    log = tmp_path / "s.jsonl"
    log.write_text("".join(json.dumps({"session_id": s, "prompt_tokens": p, "completion_tokens": 9}) + "\n"
                           for s, p in (("a", 100), ("a", 250), ("b", 80), ("b", 190), ("b", 300))))
    output, doc = fitted_block(tmp_path, log)
    assert doc["workload"]["sessions"]["think_time_s"] == 0 and "no delay or timestamp column" in output
    check_spec(doc)
    log.write_text("".join(json.dumps({"session_id": s, "prompt_tokens": 100 + s, "completion_tokens": 9}) + "\n"
                           for s in range(5)))
    output, doc = fitted_block(tmp_path, log)
    assert "every session of" in output and "has one turn: fitted as single requests" in output
    assert "joint" in doc["workload"]


def test_a_log_without_sessions_keeps_the_single_request_output(tmp_path):
    log = tmp_path / "r.jsonl"
    log.write_text("".join(json.dumps({"prompt_tokens": 10 * i + 5, "completion_tokens": i + 1}) + "\n"
                           for i in range(20)))
    output, doc = fitted_block(tmp_path, log)
    assert "\nsessions:" not in output and set(doc["workload"]) == {"joint", "seed"}


def test_a_broken_session_log_is_exit_2_with_file_and_line(tmp_path):
    log = tmp_path / "s.csv"
    log.write_text("session_id,turn,prompt_tokens,completion_tokens\na,1,5,3\na,1,9,3\n")
    result = CliRunner().invoke(main, ["fit", str(log)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "Error: " in result.output and "s.csv:3: session 'a' has turn 1 twice (also line 2)" in result.output


@pytest.mark.parametrize("median,sigma", [(1.5, 0.5), (2.0, 1.0), (3.0, 0.8), (8.0, 0.4), (400.0, 0.9)])
def test_count_fit_undoes_rounding_and_the_floor_of_one(median, sigma):
    """Turns per session are small integers: the naive fit (mean and std of ln k) is biased there; the
    interval likelihood is not. 4000 draws: SE of ln median <= 0.016, of sigma <= 0.011."""
    rng = random.Random(int(median * 100 + sigma * 10))
    values = [max(1, round(rng.lognormvariate(math.log(median), sigma))) for _ in range(4000)]
    mu, s = _count_mle(values)
    assert math.exp(mu) == pytest.approx(median, rel=0.06)
    assert s == pytest.approx(sigma, abs=0.045)
    if (median, sigma) == (2.0, 1.0):  # ... where the naive fit is off by more than the tolerance
        logs = [math.log(v) for v in values]
        assert math.exp(statistics.fmean(logs)) > median * 1.1 and statistics.pstdev(logs) < sigma - 0.1
