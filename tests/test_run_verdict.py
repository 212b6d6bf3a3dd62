"""``kneecap run``'s last lines from a summary: the knee, the fleet's changes, the exit code."""

from __future__ import annotations

import json

from harness.run import _verdict


def test_the_verdict_says_the_run_was_degraded(tmp_path):
    summary = {"schema": "kneecap.summary/2", "mode": "closed", "steps": [], "exit_code": 5,
               "knee": {"found": False, "reason": "fewer than two judged steps"}, "slo": {"thresholds": []},
               "fleet_events": [{"kind": "joined", "worker": "a", "at": 1.0, "steps": [1]},
                                {"kind": "lost", "worker": "a", "at": 2.0, "steps": [2, 3]}]}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    said: list[str] = []
    assert _verdict(str(tmp_path), said.append) == 5
    assert "DEGRADED: 1 worker(s) lost, 1 joined; steps 1, 2, 3 not judged (their levels were re-run)" in said
