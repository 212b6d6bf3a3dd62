"""Did the server free the slots of users who hung up, end to end: a simulator that generates on for clients that
left (``--on-hang-up generate``) holds more requests than the client has in flight, and the step says it kept
working (the simulator that frees them at once: ``test_cancel_run.py``). Its trace as the truth."""

from __future__ import annotations

import json
import time

import pytest

from tests.kit.run import kneecap_run, write_scenario
from tests.kit.sim import start_sim

pytestmark = pytest.mark.integration

SCENARIO = """
    name: hang-ups-ignored
    endpoint: {api: chat, model: sim-tiny}
    workload:
      seed: 4
      input_tokens: 40
      output_tokens: 200
      cancel: {share: 0.5, after_s: 0.2}
    load: {mode: constant, users: 8, duration_s: 5, step: {warmup_s: 1}}
"""


def test_a_server_that_generates_on_for_no_one_is_said_to_keep_the_slots(tmp_path):
    trace = tmp_path / "trace.jsonl"
    with start_sim("--preset", "tiny", "--on-hang-up", "generate", "--trace-file", str(trace)) as sim:
        r = kneecap_run(write_scenario(tmp_path, SCENARIO), host=sim.url, out=tmp_path / "out")
        # The simulator generates on for the requests left at the run's end: let it write them (a run ends ~1 s
        # after its plan, 2026-12: the last ones were still generating when the simulator was stopped)
        _wait_for(lambda: _gone(trace) >= r.summary["steps"][0]["cancelled"], timeout_s=20)
    step = r.summary["steps"][0]
    assert step["cancelled"] > 5, r.output
    slots = step["cancelled_slots"]
    # 8 users in closed loop: about 8 in flight from the client (Little's law over the step: a request sent before
    # its end counts its whole duration, one sent in the warm-up none: 8.63 in a full-suite run); the server also
    # holds the requests they left
    assert 6 <= slots["client_in_flight_mean"] <= 9, slots
    assert slots["freed"] is False and slots["server_in_system_mean"] > 1.3 * slots["client_in_flight_mean"], slots
    assert f"hang-ups (step 0): {slots['words']}" in r.stdout and "kept working" in slots["words"]
    # the truth: every request the client left was generated to its end all the same
    gone = [row for row in map(json.loads, trace.read_text().splitlines()) if row["status"] == "client_gone"]
    assert len(gone) >= step["cancelled"] and all(row["output_tokens"] == 200 for row in gone[:-8]), gone[-8:]


def _gone(trace) -> int:
    """Requests the simulator generated to their end for a client that had left, as its trace says so far."""
    return sum('"client_gone"' in line for line in trace.read_text().splitlines()) if trace.exists() else 0


def _wait_for(done, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not done() and time.monotonic() < deadline:
        time.sleep(0.1)
