"""The live dashboard's data (``/kneecap/live.json``) on plain summaries: the knee only once confirmed, the search's
bracket and path or a staircase's steps as good/past, the charts' points, sessions and prefix cache."""

from __future__ import annotations

from harness.report.validate import as_summary
from harness.web.dashboard import COLUMNS, MAX_HISTORY, payload, search_panel
from tests.kit.dashboard import LINE, mid_search
from tests.kit.summaries import with_classes, written


def live(data: dict, history: list[dict] | None = None) -> dict:
    return payload(data, history or [], [], "step 5: 28 users")


def test_the_knee_is_shown_once_confirmed_and_the_search_line_until_then():
    searching = live(mid_search())
    assert searching["knee"] is None and searching["headline"] == LINE
    assert any(r == {"topic": "search", "text": LINE} for r in searching["why"])
    assert searching["why"][0]["text"].startswith("24 users (candidate, not confirmed, low confidence)")
    done = live(mid_search(confirmed=True))
    assert done["knee"] == {"level": 24, "step": 3, "confidence": "medium", "confirmed": True}
    assert done["headline"] == "knee: 24 users (medium confidence)"


def test_a_staircase_knee_waits_for_confirmation_unless_the_run_ended():
    data = written()  # knee at 8 users, confirmed
    assert live(data)["headline"] == "knee: 8 users (high confidence)"
    candidate = {**data, "stop_reason": None, "knee": {**data["knee"], "confirmed": False, "confidence": "low"}}
    assert live(candidate)["knee"] is None and live(candidate)["headline"] == "no knee yet"
    ended = {**candidate, "stop_reason": "max load reached"}
    assert live(ended)["headline"] == "knee: 8 users (low confidence, not confirmed: the run ended)"
    none = {**ended, "knee": {**data["knee"], "found": False, "confirmed": False, "users": None}}
    assert live(none)["headline"] == "no knee found"


def test_the_search_block_is_passed_through_as_the_plan_said_it():
    data = mid_search()
    panel = live(data)["search"]
    assert {k: panel[k] for k in ("mode", "state", "bracket", "next", "line", "min", "max", "resolution")} == {
        "mode": "search", "state": "bracketing", "bracket": [24, 32], "next": 28, "line": LINE, "min": 2,
        "max": 256, "resolution": 2}
    assert panel["path"] == data["search"]["path"]
    # A block with fewer keys (an older plan, a key renamed): still a panel, the missing keys None.
    bare = search_panel(as_summary(written()), {"line": "growing: next 8", "path": [{"level": 8}]})
    assert bare["line"] == "growing: next 8" and bare["path"] == [
        {"step": None, "level": 8, "why": None, "verdict": None, "ended": None, "warmup_s": None, "warmup": None}]


def test_without_a_search_the_staircase_steps_are_good_or_past_the_knee():
    data = written()  # steps 4, 8 (the knee), 12 (its worker lost), 16 (cut short, no data); ended
    steps = data["steps"] + [{**data["steps"][1], "index": 4, "users": 20, "fleet_changed": False}]
    panel = live({**data, "steps": steps})["search"]
    assert [(p["level"], p["verdict"]) for p in panel["path"]] == [
        (4, "good"), (8, "good"), (12, "not judged"), (16, "not judged"), (20, "past")]
    assert panel["line"] == "staircase: 5 levels tried; knee at 8 users" and panel["bracket"] is None
    running = live({**data, "stop_reason": None, "knee": {**data["knee"], "found": False, "confirmed": False,
                                                          "users": None, "step_index": None}})["search"]
    assert [p["verdict"] for p in running["path"]] == ["good", "good", "not judged", "pending"]
    assert running["line"] == "staircase: 4 levels tried; no knee yet" and running["state"] == "growing"


def test_chart_points_slo_lines_and_table_columns():
    data = written()
    out = live(data, [{"t": float(i), "load": 4.0} for i in range(MAX_HISTORY + 5)])
    assert [p["level"] for p in out["steps"]] == [4, 8]  # not the fleet's step, nor the one without requests
    first = data["steps"][0]["latency_ms"]
    assert out["steps"][0]["ttft_p99"] == first["ttft"]["p99"] and out["steps"][0]["tpot_p50"] == first["tpot"]["p50"]
    assert out["slo"] == [{"metric": "ttft", "ms": 500.0, "label": "SLO p(95)<500"}]
    assert len(out["history"]) == MAX_HISTORY and out["history"][0]["t"] == 5.0  # the newest windows
    assert out["columns"] == ["metric", *COLUMNS] and COLUMNS[-1] == "max"


def test_sessions_and_prefix_cache_come_from_the_latest_step_that_has_them():
    out = live(mid_search())
    sessions, cache = out["sessions"], out["prefix_cache"]
    assert sessions["step"] == 3 and sessions["level"] == 28 and dict(sessions["figures"])["compactions"] == "0"
    assert [(t["turn"], t["calls"], t["cached"]) for t in sessions["turns"]] == [("1", 52, 0.0), ("2-4", 112, 0.8591)]
    assert cache["step"] == 3 and dict(cache["figures"])["client"].startswith("66% of 65,664 prompt tokens")
    assert live(written())["sessions"] is None  # a run without sessions


def test_a_mix_shows_each_class_at_the_knees_step():
    data = with_classes(30.0)
    out = live(data)["classes"]
    assert out["step"] == data["knee"]["step_index"] and [name for name, _ in out["figures"]] == ["chat", "rag"]
    chat, rag = (text for _, text in out["figures"])
    assert chat.startswith("75 requests (75%, weight 75%), TTFT p95 30.0 ms, TPOT p95 7.0 ms")
    assert rag.endswith("1 failed; SLO FAILED: error_rate: rate<0.01 (0.04)")
    assert live(written())["classes"] is None  # one class of requests
