"""Live results into a real time-series database over the InfluxDB v2 write API (VictoriaMetrics, see
DESIGN.md §5): numbers equal the summary's, an outage loses nothing, a database never up leaves a
complete spool that ``kneecap influx-replay`` loads."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.kit.influx import scenario, summary_of
from tests.kit.procs import Lines, free_port, port_below_ephemeral
from tests.kit.run import KNEECAP, start_kneecap_run
from tests.kit.scenarios import STAIRS

pytestmark = pytest.mark.integration


@contextmanager
def victoria(data_dir, port: int) -> Iterator[str]:
    binary = shutil.which("victoria-metrics")
    assert binary, "victoria-metrics is not installed (.ci/run installs Debian's victoria-metrics)"
    proc = subprocess.Popen([binary, f"-storageDataPath={data_dir}", f"-httpListenAddr=127.0.0.1:{port}",
                             "-retentionPeriod=100y"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    log = Lines(proc.stderr)  # type: ignore[arg-type]
    try:
        log.wait_for("starting http server at", timeout=15)
        # The line comes just before the listen call: confirm with /health, which answers at once after it.
        deadline = time.monotonic() + 5
        while True:
            try:
                with urllib.request.urlopen(url + "/health", timeout=1):
                    break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "victoria-metrics did not start:\n" \
                    + log.text()
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
        log.join()


def export(url: str, run: str) -> dict[tuple, list[float]]:
    """{(metric name, sorted labels…): values} for one run."""
    urllib.request.urlopen(url + "/internal/force_flush", timeout=10).read()
    query = urllib.parse.urlencode({"match[]": f'{{run="{run}"}}'})
    out = {}
    with urllib.request.urlopen(f"{url}/api/v1/export?{query}", timeout=10) as resp:
        for line in resp.read().decode().splitlines():
            d = json.loads(line)
            m = d["metric"]
            key = (m.pop("__name__"), *sorted((k, v) for k, v in m.items() if k not in ("run", "scenario", "model")))
            out[key] = d["values"]
    return out


def finish(proc: subprocess.Popen, out: Lines) -> str:
    """Wait for a run whose output ``out`` is reading; all of its output."""
    proc.wait(timeout=120)
    out.join()
    return out.text()


COST = "cost: {per_hour: 4.2, input_per_mtok: 0.5, output_per_mtok: 1.5}\n"


def test_steps_in_the_database_equal_the_summary_and_the_server_queue_rises_at_the_knee(tmp_path):
    with victoria(tmp_path / "vm", free_port()) as url:
        out, _ = start_kneecap_run(scenario(tmp_path, STAIRS + COST, url), "--sim-arg=--max-num-seqs=8",
                                   out=tmp_path / "out").communicate(timeout=120)
        s = summary_of(tmp_path)
        points = export(url, s["run_id"])
    assert s["influx"]["unwritten"] == 0 and s["influx"]["written"] > 50, (s.get("influx"), out)
    for step in s["steps"]:
        for metric in ("ttft", "tpot", "e2e"):
            got = points[("kneecap_step_p99", ("metric", metric), ("step", str(step["index"])))]
            assert got == [step["latency_ms"][metric]["p99"]]
        if step.get("ttft_split"):  # where TTFT went: the summary's means, one point per step
            got = points[("kneecap_step_ttft_client_ttft_ms", ("step", str(step["index"])))]
            assert got == [step["ttft_split"]["client"]["ttft"]["mean_ms"]]
        if step.get("tail"):  # why the tail: a point per metric and quantile (its words are string fields, which
            # VictoriaMetrics does not keep; InfluxDB does)
            assert ("kneecap_step_tail_load", ("metric", "ttft"), ("q", "p99"), ("step", str(step["index"]))) in points
        cost = step["cost"]  # the cost view (docs/cost.md): the summary's figures, one point per step
        for field in ("flat_per_mtok", "metered_blended_per_mtok", "output_tokens"):
            value = cost["tokens"]["output"] if field == "output_tokens" else cost[field]
            got = points[(f"kneecap_step_cost_{field}", ("currency", "USD"), ("step", str(step["index"])))]
            assert got == [pytest.approx(value, rel=1e-9)], (field, got, cost)
    windows = sorted(v for k, vs in points.items() if k[0] == "kneecap_throughput_window" for v in vs)
    assert windows == list(range(len(windows))) and len(windows) >= 10
    # The server's side: its waiting queue is (about) empty up to the knee and grows past it. A request can
    # wait for the next iteration even below capacity, so the mean, not the max, tells.
    knee = s["knee"]
    assert knee["found"] and "server: waiting requests" in knee["reason"], knee
    before = [st["server"]["waiting_mean"] for st in s["steps"] if st["index"] <= knee["step_index"] and "server" in st]
    after = [st["server"]["waiting_mean"] for st in s["steps"] if st["index"] > knee["step_index"] and "server" in st]
    assert before and after and 2 * sum(before) / len(before) < sum(after) / len(after), (before, after)


CONSTANT = "load: {mode: constant, users: 4, duration_s: 12, step: {warmup_s: 0.5}}\n"


def test_an_outage_loses_no_point(tmp_path):
    port = port_below_ephemeral()  # free for the 4 s outage: no other test is handed a port below that range
    with victoria(tmp_path / "vm", port) as url:
        proc = start_kneecap_run(scenario(tmp_path, CONSTANT, url), out=tmp_path / "out")
        lines = Lines(proc.stdout)  # type: ignore[arg-type]
        lines.wait_for("step 0", timeout=60)  # the load is on (startup takes ~3 s, more on a busy machine)
        time.sleep(1.5)  # the run writes its first window while the database is up
    time.sleep(4)  # the database is down for ~4 s of the run (the outage under test)
    with victoria(tmp_path / "vm", port) as url:
        out = finish(proc, lines)
        s = summary_of(tmp_path, out)
        points = export(url, s["run_id"])
    assert s["influx"]["unwritten"] == 0 and s["influx"]["last_error"], (s.get("influx"), out)
    assert s["steps"][0]["failures"] == {} and s["exit_code"] == 0  # the load did not notice
    indexes = sorted(v for k, vs in points.items() if k[0] == "kneecap_throughput_window" for v in vs)
    assert indexes == list(range(len(indexes))) and len(indexes) >= 10, indexes
    assert not (tmp_path / "out" / "influx-spool.lp").exists()


def test_database_never_up_spools_everything_and_replay_loads_it(tmp_path):
    # a port no other test is handed while this run finds nothing on it: with free_port(), another lane's simulator
    # once took it (its /health answered for victoria-metrics, its 404 for the replay: a fresh-clone CI, 2026-12-07)
    port = port_below_ephemeral()
    out, _ = start_kneecap_run(scenario(tmp_path, CONSTANT.replace("12", "4"), f"http://127.0.0.1:{port}"),
                               out=tmp_path / "out").communicate(timeout=120)
    s = summary_of(tmp_path)
    spool = tmp_path / "out" / "influx-spool.lp"
    lines = spool.read_text().splitlines()
    assert s["exit_code"] == 0 and s["influx"]["written"] == 0, out
    assert s["influx"]["unwritten"] == len(lines) > 5 and s["influx"]["spool_file"] == str(spool)
    with victoria(tmp_path / "vm", port) as url:
        proc = subprocess.run([*KNEECAP, "influx-replay", str(spool), "--url", url], capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 0 and f"wrote {len(lines)} points" in proc.stdout
        points = export(url, s["run_id"])
    windows = [v for k, vs in points.items() if k[0] == "kneecap_throughput_window" for v in vs]
    assert len(windows) == sum(line.startswith("kneecap_throughput,") for line in lines)
