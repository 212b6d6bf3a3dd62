"""``load.mode: search`` end to end: real simulator (its trace as ground truth), master and worker processes.

Two known capacities (the simulator's slots; one server that publishes /metrics, one that does not, so the
prediction comes from the batch size once and from Little's law once), and one capacity above ``max``. Short
steps: the point is where the search goes and what it says, not a precise p99.
"""

from __future__ import annotations

import json

import pytest

from tests.kit.run import kneecap_run, write_scenario
from tests.kit.sim import start_sim

pytestmark = pytest.mark.integration

STEP = "step: {warmup_s: 0.5, min_duration_s: 1.5, min_requests: 30, max_duration_s: 6}"


def _search(tmp_path, slots: int, top: int, metrics: str = "auto") -> tuple[dict, list[dict], str]:
    trace = tmp_path / "trace.jsonl"
    scenario = write_scenario(tmp_path, f"""
        name: search
        endpoint: {{api: chat, model: sim-tiny, metrics: {metrics}}}
        workload: {{input_tokens: 100, output_tokens: 30}}
        load: {{mode: search, users: {{min: 2, max: {top}, resolution: 2}}, {STEP}}}
    """)
    with start_sim("--preset", "tiny", "--max-num-seqs", str(slots), "--trace-file", str(trace)) as sim:
        r = kneecap_run(scenario, host=sim.url, out=tmp_path / "out")
    rows = [json.loads(line) for line in trace.read_text().splitlines()]
    return r.summary, rows, r.output


def _in_server_at(rows: list[dict], t: float, arrived_before: float) -> list[dict]:
    """Requests that arrived before ``arrived_before`` and were still queued or generating at ``t`` (wall)."""
    return [r for r in rows if r["arrival_wall"] < arrived_before < t < r["finished_wall"]]


@pytest.mark.xdist_group("search_a")
def test_a_search_brackets_a_known_knee_and_a_lighter_step_does_not_inherit_the_queue(tmp_path):
    summary, rows, output = _search(tmp_path, slots=6, top=24)
    knee, search = summary["knee"], summary["search"]
    assert knee["found"] and abs(knee["users"] - 6) <= 2, output[-3000:]
    assert knee["confirmed"] and search["state"] == "done" and search["next"] is None
    assert summary["stop_reason"].startswith("search done: knee at"), summary["stop_reason"]
    path = search["path"]
    assert [e["level"] for e in path] == [s["users"] for s in summary["steps"]]  # visiting order
    assert len(path) < 12 and len(path) == len({e["level"] for e in path}), path  # fewer than the grid, no repeats
    a, b = search["bracket"]
    assert a == knee["users"] and b - a <= 2
    assert {e["verdict"] for e in path if e["level"] <= a} == {"good"}
    assert {e["verdict"] for e in path if e["level"] > a} == {"past"}
    assert all(e["ended"] in ("min", "max_duration") and e["why"] for e in path)
    # going down: the heavier step's requests were all served before the lighter one's measured part began
    down = [(prev, s) for prev, s in zip(summary["steps"], summary["steps"][1:], strict=False)
            if s["users"] < prev["users"]]
    assert down, f"the search never went down in load: {[e['level'] for e in path]}"
    for prev, s in down:
        measured_from = s["started_at"] + s["warmup_s"]
        assert not _in_server_at(rows, measured_from, s["started_at"]), (prev["users"], s["users"], s["warmup_s"])
        entry = path[s["index"]]
        assert entry["warmup_s"] == s["warmup_s"]
        assert entry["warmup"] == "the plan's" or entry["warmup"].startswith(f"drain after {prev['users']} users")
    assert "knee between" in output or "knee at" in output  # the console said where the search stood


@pytest.mark.xdist_group("search_b")
def test_a_server_without_metrics_is_searched_by_littles_law(tmp_path):
    summary, _, output = _search(tmp_path, slots=10, top=20, metrics="off")
    knee, path = summary["knee"], summary["search"]["path"]
    assert knee["found"] and abs(knee["users"] - 10) <= 2, output[-3000:]
    assert all("server" not in s for s in summary["steps"])
    assert any("Little's law" in e["why"] for e in path), [e["why"] for e in path]


# timing: the simulator's iterations are real time and share the two cores with the client; beside two other lanes
# its latency rose at 8 users and a knee was found below max (fresh-clone CI 2026-12-03 and 2026-12-04: knees at 6,
# once with every step past it flagged TIMING, once with only the knee's step flagged). The premise — capacity above
# max — holds only on cores the test has to itself.
@pytest.mark.timing
@pytest.mark.xdist_group("search_c")
def test_a_knee_above_max_is_no_knee_not_a_guess(tmp_path):
    summary, _, output = _search(tmp_path, slots=32, top=8)
    assert not summary["knee"]["found"], output[-3000:]
    levels = [e["level"] for e in summary["search"]["path"]]
    assert levels[:2] == [2, 4] and levels[-1] == 8 and levels == sorted(levels), levels  # up to max, not past
    assert summary["search"]["state"] == "no knee" and summary["search"]["line"] == "no knee up to max 8 users"
    assert "no knee up to max 8" in summary["stop_reason"]
    assert summary["exit_code"] == 0
