"""The sweep: its file checked on plain data, resume and interrupt with a stand-in cell (the sweep's own logic),
real server launches (a scripted server that never gets ready, one that does), and one real sweep launching the
simulator twice through ``serve.cmd``."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import threading

import pytest

from harness.capacity.sweep import SweepOptions, run_sweep
from harness.capacity.sweep_spec import SweepError, cells, parse_sweep
from harness.scenario import DEFAULT_SCENARIO
from tests.kit.summaries import written

SIM_FLAGS = ["max_num_seqs", "iter_base_ms", "preset"]


def spec_of(raw: dict, scenario: dict | None = None):
    return parse_sweep(raw, source="sweep.yaml", scenario=("/tmp/base.yaml", scenario) if scenario else None,
                       sim_flags=SIM_FLAGS)


def problems(raw: dict) -> list[str]:
    with pytest.raises(SweepError) as err:
        spec_of(raw)
    return err.value.problems


def test_cells_are_the_product_server_params_outermost_with_short_names():
    spec = spec_of({"name": "s", "sim": {"max_num_seqs": [4, 8]},
                    "matrix": {"workload.input_tokens.median": [256, 2048], "load.knee.metric": ["ttft"]}})
    got = [(c.index, c.name, c.sim_args, c.overrides) for c in cells(spec)]
    assert got[0] == (1, "max_num_seqs=4, input_tokens.median=256, knee.metric=ttft", ("--max-num-seqs=4",),
                      {"workload.input_tokens.median": 256, "load.knee.metric": "ttft"})
    assert [g[2] for g in got] == [("--max-num-seqs=4",)] * 2 + [("--max-num-seqs=8",)] * 2
    assert len({c.key for c in cells(spec)}) == 4 and [c.folder for c in cells(spec)][-1] == "cell-04"
    same = spec_of({"name": "s", "sim": {"max_num_seqs": [4, 8]},
                    "matrix": {"workload.input_tokens.median": [256, 2048], "load.knee.metric": ["ttft"]}})
    assert [c.key for c in cells(same)] == [c.key for c in cells(spec)]  # a resume finds its cells
    other_base = spec_of({"name": "s", "sim": {"max_num_seqs": [4, 8]},
                          "matrix": {"workload.input_tokens.median": [256, 2048], "load.knee.metric": ["ttft"]}},
                         scenario={**DEFAULT_SCENARIO, "name": "other"})
    assert not {c.key for c in cells(other_base)} & {c.key for c in cells(spec)}


def test_every_problem_at_once_with_key_paths_and_did_you_mean():
    got = problems({"name": "s", "sim": {"max_num_seq": [4]}, "between": [{"post": "reset"}],
                    "matrix": {"workload.input_token.median": [256], "load.users.max": []}})
    assert any(p.startswith("sim.max_num_seq: not a simulator flag; did you mean 'max_num_seqs'") for p in got), got
    assert any(p.startswith("between[0].post: expected a path") for p in got), got
    assert any(p.startswith("matrix.load.users.max: an empty list") for p in got), got
    serve = problems({"name": "s", "serve": {"cmd": "vllm serve m --max-num-seqs {max_num_seq} --tp {tp}",
                                             "params": {"max_num_seqs": [64], "tp": [1, 2], "port": [1]}}})
    assert "serve.cmd: {max_num_seq} is not in serve.params; did you mean 'max_num_seqs'?" in serve, serve
    assert any(p.startswith("serve.params.max_num_seqs: serve.cmd does not use") for p in serve), serve
    assert any(p.startswith("serve.params.port: {port} is filled by kneecap") for p in serve), serve
    both = problems({"name": "s", "serve": {"cmd": "x --port {port}"}, "sim": {"max_num_seqs": [2]}})
    assert any(p.startswith("sim: the built-in simulator's flags apply only without serve") for p in both), both
    with pytest.raises(SweepError, match=re.escape("endpoint.host is http://10.0.0.7:8000: the cells load it")):
        spec_of({"name": "s", "sim": {"max_num_seqs": [2]}},
                scenario={**DEFAULT_SCENARIO, "endpoint": {"api": "chat", "host": "http://10.0.0.7:8000"}})


def test_an_axis_that_is_no_scenario_field_fails_with_the_scenarios_own_words():
    got = problems({"name": "s", "matrix": {"workload.input_token.median": [256, 512]}})
    assert len(got) == 1 and got[0].startswith("matrix: cell 1 (input_token.median=256): workload: unknown key "
                                               "'input_token'; did you mean 'input_tokens'?"), got
    bad_value = problems({"name": "s", "matrix": {"load.users.max": [64, -1]}})
    assert any("cell 2 (users.max=-1)" in p for p in bad_value), bad_value


def _fake_runner(ran: list[int], stop_at: int | None = None):
    """A stand-in cell: writes a valid summary (or, at ``stop_at``, a partial one and the interrupt)."""
    def run_cell(cell, folder, url, server, stop: threading.Event) -> int:
        ran.append(cell.index)
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "summary.json"), "w") as f:
            json.dump(written(), f)
        if cell.index == stop_at:
            stop.set()  # what kneecap run does when Ctrl-C ends the cell's plan early
        return 0
    return run_cell


def test_an_interrupted_sweep_resumes_with_the_cell_it_was_in_and_the_ones_after(tmp_path):
    spec = spec_of({"name": "s", "sim": {"max_num_seqs": [2, 4, 8]}, "matrix": {"workload.seed": [1, 2]}})
    opts = SweepOptions(out=str(tmp_path / "sw"), sweep_file="sweep.yaml")
    ran: list[int] = []
    lines: list[str] = []
    assert run_sweep(spec, opts, lines.append, run_cell=_fake_runner(ran, stop_at=3)) == 1  # not every cell
    assert ran == [1, 2, 3]
    assert any(line.startswith("interrupted: 2 of 6 cells finished; resume with: kneecap sweep sweep.yaml "
                               f"--out {opts.out}") for line in lines), lines
    assert not json.loads((tmp_path / "sw/cell-03/cell.json").read_text())["finished"]
    ran.clear()
    assert run_sweep(spec, opts, lines.append, run_cell=_fake_runner(ran)) == 0
    assert ran == [3, 4, 5, 6]
    sweeps = [json.loads(line) for line in (tmp_path / "index.jsonl").read_text().splitlines()]
    assert [(e["kind"], e["sweep"], e["cells"], e["exit_code"]) for e in sweeps] == [("sweep", "s", 6, 1),
                                                                                     ("sweep", "s", 6, 0)]
    body = json.loads((tmp_path / "sw/sweep.json").read_text())
    assert [c["name"] for c in body["cells"]] == [c.name for c in cells(spec)]
    assert (tmp_path / "sw/sweep.html").read_text().count("cell-0") >= 6
    changed = spec_of({"name": "s", "sim": {"max_num_seqs": [2, 4, 16]}, "matrix": {"workload.seed": [1, 2]}})
    ran.clear()
    run_sweep(changed, opts, lines.append, run_cell=_fake_runner(ran))
    assert ran == [5, 6]  # cells 5 and 6 are other cells now: run, not taken from the old folder


SERVER = textwrap.dedent("""
    import http.server, os, sys
    mode, port, pids = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    child = os.fork()  # a child of its own, as engines have: stopping must take the whole group
    if child == 0:
        import time; time.sleep(120); sys.exit(0)
    with open(pids, "a") as f:
        f.write(f"{os.getpid()} {child}\\n")
    if mode == "never":
        import time; time.sleep(120)
    if mode == "crash":  # ready, then gone 2 s later: during its first cell
        import threading; threading.Timer(2.0, os._exit, (3,)).start()
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b'{"version": "9.9"}' if self.path == "/version" else b'{"data": [{"id": "m1"}]}'
            self.send_response(200); self.end_headers(); self.wfile.write(body)
        def log_message(self, *a): pass
    http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
""")


def run_cli(args: list[str]) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True, timeout=110,
                       check=False)
    r.output = r.stdout + r.stderr  # type: ignore[attr-defined]
    return r


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is dead: its parent has not reaped it yet
        return f.read().split(")")[-1].split()[0] != "Z"


@pytest.mark.integration
def test_a_server_never_ready_or_dying_fails_its_cells_and_the_sweep_goes_on_leaving_no_process(tmp_path):
    (tmp_path / "server.py").write_text(SERVER)
    pids = tmp_path / "pids"
    spec = spec_of({"name": "s", "matrix": {"workload.seed": [1, 2]},
                    "serve": {"cmd": f"{sys.executable} {tmp_path / 'server.py'} {{mode}} {{port}} {pids}",
                              "params": {"mode": ["never", "crash", "ok"]}, "ready": "/health", "timeout_s": 1}})
    ran: list[int] = []
    seen: list[tuple] = []

    def run_cell(cell, folder, url, server, stop):
        seen.append((url, server["version"], server["models"]))
        if cell.params["mode"] == "crash":
            stop.wait(3.0)  # the server dies under this cell
        return _fake_runner(ran)(cell, folder, url, server, stop)

    lines: list[str] = []
    code = run_sweep(spec, SweepOptions(out=str(tmp_path / "sw")), lines.append, run_cell=run_cell)
    assert code == 1 and ran == [3, 5, 6], lines
    assert seen[0][0].startswith("http://127.0.0.1:") and seen[0][1:] == ("9.9", ["m1"])
    cells_json = [json.loads((tmp_path / f"sw/cell-0{i}/cell.json").read_text()) for i in range(1, 7)]
    assert cells_json[0]["error"].startswith("the server was not ready at /health within 1 s"), cells_json[0]
    assert cells_json[0]["server"]["cmd"][2] == "never"
    for died in cells_json[2:4]:  # the cell it died under, and the next, which does not run
        assert died["error"].startswith("the server exited with code 3 during the sweep") and not died["finished"]
    assert [c["finished"] for c in cells_json] == [False] * 4 + [True] * 2
    body = json.loads((tmp_path / "sw/sweep.json").read_text())
    assert [c["result"] for c in body["cells"]] == [False] * 4 + [True] * 2  # no figures of a dying server
    launched = [int(p) for line in pids.read_text().splitlines() for p in line.split()]
    assert len(launched) == 6 and not [p for p in launched if _alive(p)]


@pytest.mark.integration
@pytest.mark.timing  # beside two lanes (fresh-clone CI, 2026-12-04) its 2-slot cell flagged late stamps, 3.6-14%
@pytest.mark.xdist_group("sweep")
def test_a_sweep_launching_the_simulator_per_slot_count_finds_knees_that_follow_the_slots(tmp_path):
    (tmp_path / "base.yaml").write_text(textwrap.dedent("""
        name: slots
        endpoint: {api: chat, model: sim-tiny}
        workload: {input_tokens: 100, output_tokens: 30}
        load:
          mode: staircase
          users: {start: 2, step: 2, max: 6}
          step: {warmup_s: 0.5, min_duration_s: 1, min_requests: 20, max_duration_s: 3}
    """))
    (tmp_path / "sweep.yaml").write_text(textwrap.dedent(f"""
        name: slots
        scenario: base.yaml
        serve:
          cmd: {sys.executable} -m harness.cli sim --port {{port}} --preset tiny --max-num-seqs {{slots}}
          params: {{slots: [2, 4]}}
          ready: /v1/models
          timeout_s: 60
    """))
    out = tmp_path / "sw"
    r = run_cli(["sweep", str(tmp_path / "sweep.yaml"), "--out", str(out), "--workers", "1"])
    assert r.returncode == 0, r.output[-3000:]
    body = json.loads((out / "sweep.json").read_text())
    for cell, slots in zip(body["cells"], (2, 4), strict=True):
        summary = json.loads((out / cell["run_dir"] / "summary.json").read_text())
        # each cell loaded its own server: the slots it ran at once, as the server's /metrics said
        assert max(s["server"]["running_max"] for s in summary["steps"]) == slots, cell["name"]
        # the knee is at the slots, or a step the knee needed was not judged and the console said why
        unjudged = [s["users"] for s in summary["steps"] if not s["generator"]["reliable"]]
        if not unjudged or cell["knee"]["load"] == slots:
            assert cell["knee"]["found"] and cell["knee"]["load"] == slots, r.output[-3000:]
        else:
            assert "UNRELIABLE: step" in r.output, r.output[-3000:]
    assert body["frontier"] and (out / "sweep.html").is_file()
    # the best cell is a knee's; when neither cell's knee could be judged (said above), the line says so
    found = any(cell["knee"]["found"] for cell in body["cells"])
    assert ("Best" if found else "no cell found a knee") in body["best"]["line"], body["best"]
    running = os.popen("ps -eo args").read()
    for cell in ("cell-01", "cell-02"):
        info = json.loads((out / cell / "cell.json").read_text())["server"]
        assert info["models"] == ["sim-tiny"] and "--max-num-seqs" in info["cmd"]
        assert " ".join(info["cmd"][1:]) not in running  # its server is not left running
    again = run_cli(["sweep", str(tmp_path / "sweep.yaml"), "--out", str(out)])
    assert again.returncode == 0 and again.output.count("finished before, not run again") == 2, again.output


@pytest.mark.integration
def test_the_sweep_command_refuses_a_bad_file_with_exit_2(tmp_path):
    (tmp_path / "sweep.yaml").write_text("name: s\nmatrix: {workload.input_token.median: [1]}\nsim: {slots: [1]}\n")
    r = run_cli(["sweep", str(tmp_path / "sweep.yaml")])
    assert r.returncode == 2 and "Traceback" not in r.output
    assert "did you mean 'input_tokens'" in r.output and "sim.slots: not a simulator flag" in r.output, r.output
