"""harness/load/live.py WindowHistory: the dashboard's windows as float arrays, read back as the dicts they were."""

from __future__ import annotations

import json

from harness.load.live import WindowHistory


def test_windows_read_back_as_the_dicts_they_were() -> None:
    entries = [{"t": 0.0, "load": 0.0},  # warm-up: no latency yet
               {"t": 5.0, "load": 48.0, "ttft_p50": 49.28, "ttft_p99": 103.5},  # no TPOT in this window
               *({"t": 10.0 + 5 * i, "load": 48.0, "ttft_p50": 49.0 + i / 7, "ttft_p99": 100.0 - i,
                  "tpot_p50": 20.04, "tpot_p99": 31.0 + i} for i in range(50))]
    history = WindowHistory()
    for e in entries:
        history.append(e)
    assert len(history) == 52
    assert history[0] == entries[0] and history[1] == entries[1] and history[-1] == entries[-1]
    assert history[-1440:] == entries and history[-3:] == entries[-3:] and history[5:5] == []
    assert json.loads(json.dumps(history[:])) == entries  # what the page gets
    assert WindowHistory()[-1440:] == []
