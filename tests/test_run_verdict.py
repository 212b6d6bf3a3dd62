"""``kneecap run``'s last lines from a summary: the knee, the fleet's changes, the exit code."""

from __future__ import annotations

import json

from harness.outcome import say_verdict
from tests.kit.summaries import written


def test_the_verdict_says_the_run_was_degraded(tmp_path):
    summary = {**written(), "exit_code": 5, "degraded": True,
               "knee": {**written()["knee"], "found": False, "users": None, "reason": "fewer than two judged steps"},
               "slo": {"thresholds": [], "passed": None, "max_load_within_slo": None},
               "fleet_events": [{"kind": "joined", "worker": "a", "at": 1.0, "steps": [1]},
                                {"kind": "lost", "worker": "a", "at": 2.0, "steps": [2, 3]}]}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    said: list[str] = []
    assert say_verdict(str(tmp_path), said.append) == 5
    assert "DEGRADED: 1 worker(s) lost, 1 joined; steps 1, 2, 3 not judged (their levels were re-run)" in said


def test_a_summary_kneecap_did_not_write_is_no_valid_result(tmp_path):
    from tests.kit.summaries import break_

    (tmp_path / "summary.json").write_text(json.dumps(break_("steps.0.ok", None)))
    said: list[str] = []
    assert say_verdict(str(tmp_path), said.append) == 4  # exitcodes.NO_VALID_RESULT, not the file's exit_code
    assert said == [f"no valid summary was written ({tmp_path / 'summary.json'}: steps[0].ok: expected an integer, "
                    "got null); see the messages above"]


def test_the_cost_line_is_said_from_the_figures(tmp_path):
    summary = written(cost=True)
    line, summary["cost"]["line"] = summary["cost"]["line"], "an older kneecap's prose"
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    said: list[str] = []
    say_verdict(str(tmp_path), said.append)
    assert line in said and "an older kneecap's prose" not in said


def test_a_step_sent_late_is_said_unreliable_with_its_send_lag(tmp_path):
    summary = written("open")
    gen = summary["steps"][0]["generator"]
    gen.update(reliable=False, send_lag_p99_ms=15.2, lag_limit_ms=10)
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    said: list[str] = []
    say_verdict(str(tmp_path), said.append)
    assert any(line.startswith("UNRELIABLE: step 0 (") and "its requests went out late (send lag p99 15.2 ms, "
               "limit 10; event-loop lag p99 2.0 ms)" in line for line in said), said


def _unreliable(tmp_path, cpu_s: float, wait_s: float | None) -> list[str]:
    summary = written()
    gen = summary["steps"][0]["generator"]
    gen.update(reliable=False, lag_p99_ms=275.0, cpu_s=cpu_s, runqueue_wait_s=wait_s)
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    said: list[str] = []
    say_verdict(str(tmp_path), said.append)
    return [line for line in said if line.startswith("UNRELIABLE: step 0")]


def test_a_loop_held_off_the_cpu_blames_the_other_processes(tmp_path):
    # Beside a saturating vLLM, a worker in a scheduling group of its own waited ~5 s of every 10 for a CPU while
    # running 0.25 s (docs/real-engines.md): the kernel's run-queue wait says who made the loop late.
    [line] = _unreliable(tmp_path, cpu_s=0.5, wait_s=9.7)
    assert "waited 9.7 s for a CPU while running 0.5 s: other processes held the cores" in line, line
    [line] = _unreliable(tmp_path, cpu_s=6.0, wait_s=0.4)  # busy with its own work: no one else to blame
    assert "the load generator added latency" in line and "other processes" not in line, line
    [line] = _unreliable(tmp_path, cpu_s=0.5, wait_s=None)  # not measured (not Linux): nothing said of it
    assert "other processes" not in line, line
