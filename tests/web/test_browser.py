"""The web UI's LLM tabs, the live dashboard, report.html and compare.html in a real headless Chromium.

Screenshots go to test-artifacts/. Chromium is Debian's (.ci/run installs it); Playwright drives it
through its executable path, nothing is downloaded. The dashboard is read while the run goes (a new window
redraws it) and at its end; its search panel mid-search, from a summary served to the page (``tests/kit``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from harness.analysis.plain import rounded
from tests.kit.dashboard import BASE, LINE, mid_search, serve
from tests.kit.procs import Lines, free_port
from tests.kit.run import LANE_LAG_MS, kneecap_run, write_scenario
from tests.kit.sim import start_sim

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("browser")]  # one shared run per module
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ARTIFACTS = os.path.join(ROOT, "test-artifacts")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run"]


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright import sync_api as playwright
    except ImportError:
        pytest.fail("playwright is missing: pip install -e '.[test]' installs it")
    path = shutil.which("chromium")
    assert path, "Debian's chromium is not installed (.ci/run installs it)"
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        yield b
        b.close()


def open_page(browser, url: str):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    # Failed loads are reported with their URL by the response hook, not the console's generic line.
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" and "Failed to load resource"
            not in m.text else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    # Our routes must answer; a missing asset of Locust's own UI (seen once: an unnamed 404) is not ours to judge.
    page.on("response", lambda r: errors.append(f"HTTP {r.status} {r.url}") if r.status >= 400 and (
        "/kneecap/" in r.url or "/stats/" in r.url or r.url.startswith("file:")) else None)
    page.goto(url)
    return page, errors


def wait_listening(port: int, timeout: float = 30.0) -> None:
    """Until a TCP connect to 127.0.0.1:``port`` succeeds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise AssertionError(f"nothing listens on port {port} after {timeout:g} s") from None
            time.sleep(0.05)


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def scenario(tmp_path) -> str:
    # max_lag_ms: the lanes' limit (tests/kit/run.py), as kneecap_run passes it: this run is a plain locust one
    return str(write_scenario(tmp_path, f"""
        name: ui-test
        endpoint: {{api: chat, model: sim-tiny}}
        workload: {{input_tokens: 100, output_tokens: 20}}
        load:
          users: {{start: 2, step: 2, max: 16}}
          step: {{warmup_s: 0.5, min_duration_s: 2, min_requests: 60, max_duration_s: 5, max_lag_ms: {LANE_LAG_MS:g}}}
        slo: {{ttft: "p(95)<100"}}
        cost: {{per_hour: 2.5, currency: EUR, input_per_mtok: 0.2, output_per_mtok: 0.8}}
    """))


def rows_of(page, selector: str) -> list[list[str]]:
    """Each row's cell texts (a table of Locust's React UI or of the dashboard)."""
    return page.locator(selector).evaluate_all("rows => rows.map(r => [...r.cells].map(c => c.innerText.trim()))")


DRAWN = """() => {
  const d = window.kneecapLive, n = (c, k) => document.querySelectorAll(`#${c} g[data-key="${k}"] circle`).length;
  const count = (rows, k) => rows.filter(r => r[k] !== null && r[k] !== undefined).length;
  return {history: d.history.length, load: n("chart-time", "load"), ttft: n("chart-time", "ttft_p99"),
          ttft_windows: count(d.history, "ttft_p99"), steps: count(d.steps, "ttft_p99"),
          step_points: n("chart-ttft", "ttft_p99"), tpot_points: n("chart-tpot", "tpot_p99"),
          knee_marks: document.querySelectorAll("#chart-ttft line.knee").length,
          slo_lines: document.querySelectorAll("#chart-ttft line.slo").length};
}"""
"""What the dashboard drew against the payload it drew it from, read in one go (no poll lands in between)."""
LOAD_POINTS = "document.querySelectorAll('#chart-time g[data-key=\"load\"] circle').length"


def check_dashboard(dash, live: dict) -> None:
    """The ended run's dashboard: each step a point with the knee and the SLO marked, the percentile table all
    numbers, the why, the staircase's levels as good or past the knee."""
    drawn = dash.evaluate(DRAWN)
    steps = [s for s in live["steps"] if not s.get("fleet_changed") and s["requests"]]
    assert drawn["step_points"] == drawn["tpot_points"] == drawn["steps"] == len(steps), drawn
    assert drawn["knee_marks"] == 1 and drawn["slo_lines"] == 1, drawn
    knee = live["knee"]
    assert dash.locator("#knee").inner_text().startswith(f"knee: {knee['users']:g} users ("), live["knee"]
    table = rows_of(dash, "#pct tbody tr")
    assert [r[0] for r in table][:2] == ["ttft (ms)", "tpot (ms)"] and all(float(c) >= 0 for r in table for c in r[1:])
    why = dict(rows_of(dash, "#why tbody tr"))
    assert why["cost"] == live["cost"]["line"] and why["knee"].startswith(f"{knee['users']:g} users (")
    judged = [st for st in live["steps"] if st.get("ttft_split")]
    assert f"where TTFT goes (step {judged[-1]['index']})" in why
    path = rows_of(dash, "#search-path tbody tr")
    assert dash.locator("#search-range circle.tried").count() == len(path) == len(live["steps"])
    verdicts = {(float(r[1]), r[2]) for r in path}
    assert (knee["users"], "good") in verdicts and all(
        v == "not judged" or (v == "good") == (level <= knee["users"]) for level, v in verdicts), verdicts
    assert [r[0] for r in rows_of(dash, "#cache tr")] == ["client", "server"]
    # sections only with data: no sessions, one class of requests
    assert not dash.locator("#sessions").is_visible() and not dash.locator("#classes").is_visible()
    assert dash.locator("#cache").is_visible()


def check_llm_tabs(page, live: dict) -> None:
    """Locust's own UI: the LLM tab a percentile table (numbers only under the percentiles), "LLM why" the rest."""
    page.get_by_role("tab", name="LLM", exact=True).click()
    page.get_by_text("ttft (ms)").wait_for(timeout=10_000)
    assert page.locator("table thead th").all_inner_texts() == [
        "LLM metric", "count", "p50", "p90", "p95", "p99", "p999", "max"]
    rows = rows_of(page, "table tbody tr")
    assert all(float(c) >= 0 for r in rows for c in r[1:]), rows  # only numbers under count … max
    assert all(len(c.partition(".")[2]) <= 2 for r in rows for c in r[1:]), rows  # at a reader's precision
    ttft = next(r for r in rows if r[0] == "ttft (ms)")
    # the last step, or the one before when the knee was confirmed in the last one's warm-up (no request in it)
    shown = next(st for st in reversed(live["steps"]) if st["requests"])
    last = shown["latency_ms"]["ttft"]
    assert float(ttft[2]) == rounded(last["p50"]) and float(ttft[5]) == rounded(last["p99"])
    page.screenshot(path=os.path.join(ARTIFACTS, "web-llm-tab.png"), full_page=True)

    page.get_by_role("tab", name="LLM why", exact=True).click()
    page.get_by_text("where TTFT goes").wait_for(timeout=10_000)
    why = dict(rows_of(page, "table tbody tr"))
    judged = [st for st in live["steps"] if st.get("ttft_split")]
    p50 = judged[-1]["ttft_split"]["client"]["ttft"]["p50_ms"]
    assert f"ttft {p50:.1f} = headers " in why[f"where TTFT goes (step {judged[-1]['index']})"]
    assert why["cost"] == live["cost"]["line"]  # the console's cost line, in the tab
    assert why["step"].startswith(f"step {shown['index']}: ") and "run ended" in why["step"]
    assert why["knee"].startswith(f"{live['knee']['users']:g} users (")
    page.screenshot(path=os.path.join(ARTIFACTS, "web-llm-why-tab.png"), full_page=True)


def check_report(browser, out, summary: dict) -> None:
    """report.html as a newcomer opens it: the knee's sentence and the answer's chart on the first screen (1366x768),
    no negative figure in any table, a step without measured requests no row of zeros."""
    page, errors = open_page(browser, f"file://{out}/report.html")
    page.set_viewport_size({"width": 1366, "height": 768})
    for what in ("#knee", "#knee-why", "#capacity svg"):
        box = page.locator(what).bounding_box()
        assert box is not None and box["y"] >= 0 and box["y"] + box["height"] <= 768, (what, box)
    cells = page.locator("td").all_inner_texts()
    assert cells and not [c for c in cells if c.strip().startswith("-") and c.strip()[1:2].isdigit()], cells
    rows = rows_of(page, "#steps tr")[1:]
    for st, row in zip(summary["steps"], rows, strict=True):
        assert row[0] == str(st["index"]) and (st["requests"] or row[4:-1] == [""] * len(row[4:-1])), row
    page.close()
    assert not errors, errors


def check_timeline(browser, out, summary: dict) -> None:
    """A run against an engine that stalls 300 ms every 2 s: a step with pauses gets a timeline, each pause a stripe
    as wide as its length on the time axis, over the requests' lines."""
    page, errors = open_page(browser, f"file://{out}/report.html")
    paused = [st for st in summary["steps"]
              if st.get("timeline") and st.get("tail", {}).get("pauses", {}).get("listed")]
    assert paused, [(st["index"], st.get("tail", {}).get("pauses")) for st in summary["steps"]]
    st = paused[0]
    chart = page.locator(f"#timeline-{st['index']}")
    assert chart.count() == 1, f"no timeline for step {st['index']}, whose pauses are {st['tail']['pauses']}"
    stripes = chart.locator("g[id^='pause-']")
    assert stripes.count() == len(st["tail"]["pauses"]["listed"])
    axis = chart.locator("svg").bounding_box()
    widths = [stripes.nth(k).bounding_box()["width"] for k in range(stripes.count())]
    per_s = axis["width"] / st["timeline"]["end_s"]  # an upper bound: the axes are narrower than the svg
    for w, p in zip(widths, st["tail"]["pauses"]["listed"], strict=True):
        assert 0.3 * per_s * p["length_ms"] / 1000 < w <= per_s * p["length_ms"] / 1000 + 2, (w, p, per_s)
    assert "server-wide pauses" in chart.inner_text()
    page.screenshot(path=os.path.join(ARTIFACTS, "report-timeline.png"), full_page=True)
    page.close()
    assert not errors, errors


def test_llm_tabs_dashboard_report_and_compare(browser, tmp_path):
    os.makedirs(ARTIFACTS, exist_ok=True)
    out = tmp_path / "ui-run"
    port = free_port()
    with start_sim("--preset", "tiny") as sim:
        locust = subprocess.Popen(
            [sys.executable, "-m", "locust", "-f", f"{ROOT}/locustfile.py,{ROOT}/harness/load/shape_file.py",
             "--autostart", "--web-host", "127.0.0.1", "--web-port", str(port), "--host", sim.url,
             "--scenario", scenario(tmp_path), "--results-dir", str(out)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines = Lines(locust.stdout)  # type: ignore[arg-type]
        base = f"http://127.0.0.1:{port}"
        try:
            lines.wait_for("Starting web interface", timeout=30)
            wait_listening(port)  # Locust says so before its server has bound the port
            dash, dash_errors = open_page(browser, base + "/kneecap/")
            # While the run goes: a window every 5 s, each drawn as it arrives (one point a window).
            dash.wait_for_function(f"{LOAD_POINTS} >= 1", timeout=30_000)
            first = dash.evaluate(DRAWN)
            assert first["load"] == first["history"] and first["ttft"] == first["ttft_windows"], first
            dash.wait_for_function(f"{LOAD_POINTS} > {first['load']}", timeout=20_000)
            again = dash.evaluate(DRAWN)
            assert again["load"] == again["history"] > first["history"], again

            # Locust says this once the shape has ended and runner.stop() has returned: the numbers are final.
            lines.wait_for("--autoquit not specified", timeout=90)
            live = get_json(base + "/kneecap/summary.json")
            assert live.get("stop_reason") and live["knee"]["found"], live
            dash.wait_for_function("window.kneecapLive.stop_reason", timeout=10_000)
            check_dashboard(dash, live)
            dash.screenshot(path=os.path.join(ARTIFACTS, "web-dashboard.png"), full_page=True)
            dash.close()
            assert not dash_errors, dash_errors

            page, errors = open_page(browser, base + "/")
            check_llm_tabs(page, live)
            page.close()
            assert not errors, errors
            with urllib.request.urlopen(base + "/kneecap/charts", timeout=10) as r:  # the old chart page
                assert r.geturl() == base + "/kneecap/" and b"kneecapLive" in r.read()
        finally:
            locust.send_signal(signal.SIGTERM)
            locust.wait(timeout=30)
            lines.join()

    subprocess.run([sys.executable, "-m", "harness.cli", "report", str(out)], check=True, capture_output=True)
    page, errors = open_page(browser, f"file://{out}/report.html")
    summary = json.loads((out / "summary.json").read_text())
    assert page.locator("#knee").inner_text() == f"Knee: {summary['knee']['users']:g} users"
    check_report(browser, out, summary)
    assert os.path.getsize(out / "report.html") < 2_000_000
    page.screenshot(path=os.path.join(ARTIFACTS, "report.png"), full_page=True)
    assert not errors, errors

    # A run against a simulator with half the slots: compare shows two different knees.
    other = tmp_path / "half"
    # It stalls too (300 ms every 2 s): its report's timelines show the pauses.
    kneecap_run(scenario(tmp_path), "--sim-arg=--max-num-seqs=4", "--sim-arg=--engine-stall-every-s=2",
                "--sim-arg=--engine-stall-s=0.3", out=other, report=True)
    check_timeline(browser, other, json.loads((other / "summary.json").read_text()))
    cmp_file = tmp_path / "compare.html"
    subprocess.run([sys.executable, "-m", "harness.cli", "compare", str(out), str(other), "--out", str(cmp_file)],
                   check=True, capture_output=True)
    page, errors = open_page(browser, f"file://{cmp_file}")
    knees = page.locator("table tr td:nth-child(2)").all_inner_texts()
    other_knee = json.loads((other / "summary.json").read_text())["knee"]["users"]
    # the half-slot run's knee (4 users) stands unless a 300 ms stall caught one of that step's requests: its p99's
    # interval then reaches the stalls and no break stands beyond noise (a fresh-clone CI: "no break up to 16").
    # Either way compare shows each run's own knee, none as an empty cell.
    shown = [("" if k is None else f"{k}") for k in (summary["knee"]["users"], other_knee)]
    assert knees == shown and knees[0] != knees[1], knees
    page.screenshot(path=os.path.join(ARTIFACTS, "compare.png"), full_page=True)
    assert not errors, errors


WATCH = """() => {
  window.seen = [];  // at each redraw: the header and the knee marks drawn (charts and search range)
  const knee = document.getElementById("knee");
  new MutationObserver(() => window.seen.push([knee.textContent, document.querySelectorAll("line.knee").length]))
    .observe(knee, {childList: true, characterData: true, subtree: true});
}"""


def test_dashboard_search_panel_and_a_knee_only_once_confirmed(browser):
    """Mid-search the page shows the bracket, the levels tried by verdict and the next one; a candidate knee that
    comes and goes between polls never reaches the header or the charts; once confirmed it does."""
    searching = mid_search()
    refuted = {**searching, "knee": {**searching["knee"], "found": False, "users": None, "step_index": None}}
    polls = {"n": 0, "confirmed": False}

    def answer() -> dict:
        polls["n"] += 1
        return mid_search(confirmed=True) if polls["confirmed"] else (searching, refuted)[polls["n"] % 2]

    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    serve(page, answer)
    page.goto(BASE + "?poll_ms=100")
    page.wait_for_function("document.body.dataset.polls >= 1")
    page.evaluate(WATCH)
    page.wait_for_function("window.seen.length >= 4")
    assert {tuple(s) for s in page.evaluate("window.seen")} == {(LINE, 0)}  # no flicker
    assert page.locator("#search-line").inner_text() == LINE
    assert page.locator("#search-state").inner_text() == "search: bracketing, 2–256 users, to within 2 users"
    tried = page.locator("#search-range circle.tried").evaluate_all("cs => cs.map(c => c.getAttribute('class'))")
    assert tried == [f"tried v-{v}" for v in ("good", "good", "past", "past", "good", "pending")]
    assert page.locator("#search-range rect.bracket").count() == 1 and page.locator("#search-range circle.next").count()
    assert rows_of(page, "#search-path tbody tr")[0] == ["0", "2", "good", "start at min", "precision",
                                                         "5 s (the plan's)"]
    assert [r[0] for r in rows_of(page, "#turns tbody tr")] == ["1", "2-4"]
    assert "66% of 65,664 prompt tokens cached" in page.locator("#cache").inner_text()
    assert rows_of(page, "#pct tbody tr") == [["ttft (ms)", "120", "41.5", "60.3", "70", "90.1", "99", "102"]]
    page.screenshot(path=os.path.join(ARTIFACTS, "web-dashboard-search.png"), full_page=True)

    polls["confirmed"] = True
    page.wait_for_function("document.getElementById('knee').textContent.startsWith('knee: ')")
    assert page.locator("#knee").inner_text() == "knee: 24 users (medium confidence)"
    assert page.locator("#chart-ttft line.knee").count() == 1 and page.locator("#search-range line.knee").count() == 1
    assert page.locator("#search-range circle.next").count() == 0
    page.close()
    assert not errors, errors
