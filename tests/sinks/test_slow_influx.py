"""A database that is slow, not down: an InfluxDB write endpoint on loopback (a stand-in: only the write API is
needed, and a real database cannot be made to hang on cue) that first accepts writes and never answers, then
answers each after 3 s, then at once. The run's windows keep their rhythm (writes never hold the master's window
loop), the console says the sink is down, behind, back and caught up, and every point arrives once it recovers."""

from __future__ import annotations

import itertools
import re
import time

import pytest

from tests.kit.influx import HANG_S, SLOW_S, scenario, slow_db, summary_of
from tests.kit.run import start_kneecap_run

pytestmark = pytest.mark.integration


def test_a_slow_then_hung_database_delays_no_window_and_loses_no_point(tmp_path):
    load = "load: {mode: constant, users: 4, duration_s: 18, step: {warmup_s: 0.5}}\n"  # past the phases
    with slow_db() as db:
        url = f"http://127.0.0.1:{db.server_address[1]}"
        path = scenario(tmp_path, load, url, window_s=1.0)
        proc = start_kneecap_run(path, workers=2, out=tmp_path / "out")
        output, _ = proc.communicate(timeout=120)
        assert db.phase() == "fast", output  # the run outlived the hang and the slow phase
        received = list(db.lines)
    assert proc.returncode == 0, output
    summary = summary_of(tmp_path, output)
    influx = summary["influx"]
    assert influx["unwritten"] == 0 and influx["spool_file"] is None, influx
    assert not (tmp_path / "out" / "influx-spool.lp").exists()
    # the hung writes stored nothing and the slow ones were answered within the client's 5 s: every point once
    assert influx["written"] == len(received) == len(set(received)), (influx, len(received), len(set(received)))
    windows = _windows(received)
    assert [w for w, _ in windows] == list(range(len(windows))), "a window is missing"
    gaps = [(b - a) / 1000 for (_, a), (_, b) in itertools.pairwise(windows[:-1])]  # the last: the end's partial one
    assert max(gaps) < 1.5 and min(gaps) > 0.5, gaps  # one per second, through the hang and the slow writes
    for said in ("not writable", "is behind", "is back", "has caught up"):
        assert said in output, (said, output)


def _windows(lines: list[str]) -> list[tuple[int, int]]:
    """(window, timestamp ms) of each throughput point."""
    out = set()
    for line in lines:
        if line.startswith("kneecap_throughput"):
            w = re.search(r"window=(\d+)i", line)
            assert w, line
            out.add((int(w.group(1)), int(line.rsplit(" ", 1)[1])))
    return sorted(out)


def test_the_queue_spills_to_disk_past_its_bound_and_the_backlog_comes_back_in_batches(tmp_path):
    from harness.sinks.influx import BATCH, MAX_PENDING, InfluxSink

    with slow_db() as db:
        db.first = time.monotonic() - HANG_S - SLOW_S  # answers at once
        sink = InfluxSink(url=f"http://127.0.0.1:{db.server_address[1]}", token=None, org="o", bucket="b",
                          spool_path=str(tmp_path / "spool.lp"))
        lines = [f"m,k=v f={i}i {1_700_000_000_000 + i}" for i in range(MAX_PENDING + 2 * BATCH + 7)]
        sink.add(lines[:MAX_PENDING])
        assert sink.spooled == 0 and len(sink.pending) == MAX_PENDING
        sink.add(lines[MAX_PENDING:])  # past the bound: all of it to disk, none kept in memory
        assert sink.pending == [] and sink.spooled == len(lines)
        sink.flush()
        assert sink.spooled == 0 and sink.written == len(lines)
        assert db.lines == lines  # every line once, in order, in batches of at most BATCH
        assert max(db.sizes) == BATCH and len(db.sizes) == -(-len(lines) // BATCH), db.sizes
        counts = sink.close()
    assert counts["unwritten"] == 0 and not (tmp_path / "spool.lp").exists()
