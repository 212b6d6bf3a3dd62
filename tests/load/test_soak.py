"""The soak's short form (``benchmarks/soak.py`` is the hour): 30 s of constant load on a fast target, every
kneecap process sampling itself every 2 s (``harness/load/soak.py``). Thousands of requests, each on the same kept
connections: from the 10th second to the end no process gains a descriptor or a greenlet, and none grows its
memory by more than 10% (the master holds the step's request rows, so its objects grow with the requests; their
bound is ``ROWS_CAP``)."""

from __future__ import annotations

import json

import pytest

from harness.metrics.aggregate import ROWS_CAP
from tests.kit.run import kneecap_run, write_scenario

pytestmark = pytest.mark.integration
SECONDS, EVERY_S, FROM_S = 30, 2.0, 10.0


def test_thirty_seconds_of_load_grow_no_descriptor_greenlet_or_memory(tmp_path):
    path = write_scenario(tmp_path, f"""
        name: soak
        endpoint: {{api: chat, model: sim-tiny}}
        workload: {{input_tokens: 50, output_tokens: 10}}
        load: {{mode: constant, users: 8, duration_s: {SECONDS}, step: {{warmup_s: 1}}}}
    """)
    soak = tmp_path / "soak.jsonl"
    r = kneecap_run(path, out=tmp_path / "out", workers=2,
                    env={"KNEECAP_SOAK_FILE": str(soak), "KNEECAP_SOAK_EVERY_S": str(EVERY_S)})
    assert r.code == 0, r.output
    assert r.summary["steps"][0]["requests"] > 2000, r.summary["steps"][0]["requests"]
    by_process: dict[str, list[dict]] = {}
    for line in soak.read_text().splitlines():
        d = json.loads(line)
        by_process.setdefault(f"{d['role']} {d['pid']}", []).append(d)
    assert sorted(name.split()[0] for name in by_process) == ["master", "worker", "worker"], list(by_process)
    step_end = r.summary["started_at"] + r.summary["steps"][0]["warmup_s"] + r.summary["steps"][0]["duration_s"]
    for name, samples in by_process.items():
        start = samples[0]["t"]
        later = [s for s in samples if s["t"] - start >= FROM_S - EVERY_S and s["t"] <= step_end]  # load on
        assert len(later) >= 6, (name, len(samples))
        first, last = later[0], later[-1]
        assert last["fds"] <= first["fds"], (name, [s["fds"] for s in samples])
        assert last["greenlets"] <= first["greenlets"], (name, [s["greenlets"] for s in samples])
        assert last["rss_mb"] < 1.10 * first["rss_mb"], (name, [s["rss_mb"] for s in samples])
        if name.startswith("master"):
            assert 0 < last["rows"] <= ROWS_CAP
