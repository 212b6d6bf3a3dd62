"""The web UI's LLM tab, the chart page, report.html and compare.html in a real headless Chromium.

Screenshots go to test-artifacts/. Chromium is Debian's (.ci/run installs it); Playwright drives it
through its executable path, nothing is downloaded.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.request

import pytest

from tests.kit.procs import Lines, free_port
from tests.kit.run import kneecap_run, write_scenario
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



def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def scenario(tmp_path) -> str:
    return str(write_scenario(tmp_path, """
        name: ui-test
        endpoint: {api: chat, model: sim-tiny}
        workload: {input_tokens: 100, output_tokens: 20}
        load:
          users: {start: 2, step: 2, max: 16}
          step: {warmup_s: 0.5, min_duration_s: 2, min_requests: 60, max_duration_s: 5}
        slo: {ttft: "p(95)<100"}
        cost: {per_hour: 2.5, currency: EUR, input_per_mtok: 0.2, output_per_mtok: 0.8}
    """))


def test_llm_tab_charts_report_and_compare(browser, tmp_path):
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
            # Locust says this once the shape has ended and runner.stop() has returned: the numbers are final.
            lines.wait_for("--autoquit not specified", timeout=90)
            live = get_json(base + "/kneecap/summary.json")
            assert live.get("stop_reason"), live

            page, errors = open_page(browser, base + "/")
            page.get_by_role("tab", name="LLM").click()
            page.get_by_text("ttft (ms)").wait_for(timeout=10_000)
            row = page.get_by_role("row").filter(has_text="ttft (ms)")
            cells = [c.strip() for c in row.get_by_role("cell").all_inner_texts()]
            page.screenshot(path=os.path.join(ARTIFACTS, "web-llm-tab.png"), full_page=True)
            last = live["steps"][-1]["latency_ms"]["ttft"]
            assert float(cells[2]) == pytest.approx(last["p50"]) and float(cells[5]) == pytest.approx(last["p99"])
            judged = [st for st in live["steps"] if st.get("ttft_split")]
            split = page.get_by_role("row").filter(has_text=f"where TTFT goes, p50 ms (step {judged[-1]['index']})")
            p50 = judged[-1]["ttft_split"]["client"]["ttft"]["p50_ms"]
            assert f"ttft {p50:.1f}" in split.inner_text(timeout=10_000)
            cost = page.get_by_role("row").filter(has_text="cost at ")  # the console's cost line, in the tab
            assert live["cost"]["line"] in cost.inner_text(timeout=10_000)
            assert not errors, errors

            page, errors = open_page(browser, base + "/kneecap/charts")
            assert page.locator("#knee").inner_text().startswith("Knee: ") and "not found" not in page.content()
            assert page.locator("svg").count() >= 3
            page.screenshot(path=os.path.join(ARTIFACTS, "web-charts.png"), full_page=True)
            assert not errors, errors
        finally:
            locust.send_signal(signal.SIGTERM)
            locust.wait(timeout=30)
            lines.join()

    subprocess.run([sys.executable, "-m", "harness.cli", "report", str(out)], check=True, capture_output=True)
    page, errors = open_page(browser, f"file://{out}/report.html")
    summary = json.loads((out / "summary.json").read_text())
    assert page.locator("#knee").inner_text() == f"Knee: {summary['knee']['users']:g} users"
    assert os.path.getsize(out / "report.html") < 2_000_000
    page.screenshot(path=os.path.join(ARTIFACTS, "report.png"), full_page=True)
    assert not errors, errors

    # A run against a simulator with half the slots: compare shows two different knees.
    other = tmp_path / "half"
    kneecap_run(scenario(tmp_path), "--sim-arg=--max-num-seqs=4", out=other)
    cmp_file = tmp_path / "compare.html"
    subprocess.run([sys.executable, "-m", "harness.cli", "compare", str(out), str(other), "--out", str(cmp_file)],
                   check=True, capture_output=True)
    page, errors = open_page(browser, f"file://{cmp_file}")
    knees = page.locator("table tr td:nth-child(2)").all_inner_texts()
    other_knee = json.loads((other / "summary.json").read_text())["knee"]["users"]
    assert knees == [f"{summary['knee']['users']}", f"{other_knee}"] and knees[0] != knees[1], knees
    page.screenshot(path=os.path.join(ARTIFACTS, "compare.png"), full_page=True)
    assert not errors, errors
