"""A step whose chunk times may be late says so: a CPU hog on the core of the whole ``kneecap run``.

The simulator streams 500 tokens/s to 24 users from its own core; ``kneecap run`` (parent, master, worker) shares
the other core with a process that never sleeps, so the worker's reader comes late and finds several chunks
waiting, merged by the kernel under the newest one's time. More than 1% of requests are hit: the step is flagged in
the summary (``stamps_flagged``, with the share) and on the console (``TIMING: step 0 ...``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.kit.run import kneecap_run, write_scenario
from tests.kit.sim import start_sim

pytestmark = [pytest.mark.integration, pytest.mark.timing,
              pytest.mark.skipif((os.cpu_count() or 1) < 2 or not shutil.which("taskset") or sys.platform != "linux",
                                 reason="needs two cores, taskset and Linux's kernel receive stamps")]

SCENARIO = """
    name: hog
    endpoint: {api: chat, model: sim-small}
    workload: {input_tokens: 32, output_tokens: 64}
    load: {mode: constant, users: 24, duration_s: 4, step: {warmup_s: 1}}
"""


def test_a_reader_behind_a_cpu_hog_is_flagged(tmp_path):
    path = write_scenario(tmp_path, SCENARIO)
    with start_sim("--iter-base-ms", "2", "--iter-per-seq-ms", "0", "--iter-per-kv-ktoken-ms", "0",
                   "--prefill-per-ktoken-ms", "0", "--max-num-seqs", "64") as sim:
        os.sched_setaffinity(sim.proc.pid, {0})
        hog = subprocess.Popen(["taskset", "-c", "1", sys.executable, "-c", "while True: pass"])
        try:
            r = kneecap_run(path, out=tmp_path / "out", host=sim.url, prefix=["taskset", "-c", "1"],
                            lag_limit_ms=None)
        finally:
            hog.kill()
            hog.wait()
    g = r.summary["steps"][0]["generator"]
    assert g["shared_stamp_share"] > 0.01 and g["shared_stamps"] > 0 and g["stamps_flagged"], (g, r.output)
    assert "TIMING: step 0" in r.output and "may be late by more than 1 ms" in r.output, r.output
    assert r.code == (0 if g["reliable"] else 4), r.output  # flagged, still judged (unless its loop lag broke too)
