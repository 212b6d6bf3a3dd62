"""Ground-truth trace file, and the ``kneecap sim`` command line."""

from __future__ import annotations

import contextlib
import http.client
import json
import socket

import pytest
from click.testing import CliRunner

from harness.cli import main
from tests.kit.sim import start_sim
from tests.kit.sim_http import CHAT, chat, post


@pytest.mark.integration
def test_trace_file_has_server_side_times_per_token(tmp_path):
    trace = tmp_path / "trace.jsonl"
    with start_sim("--preset", "tiny", "--trace-file", str(trace)) as sim:
        for n in (3, 12):
            _, resp = post(sim, CHAT, chat(n, stream=True))
            resp.read()
        _, resp = post(sim, CHAT, chat(8, stream=True), {"x-kneecap-fault": "reset"})
        with contextlib.suppress(OSError, http.client.HTTPException):  # the reset is the point
            resp.read()
    rows = [json.loads(line) for line in trace.read_text().splitlines()]
    assert [(r["status"], r["output_tokens"]) for r in rows] == [("ok", 3), ("ok", 12), ("reset", 4)]
    for r in rows:
        times = r["token_times"]
        assert len(times) == r["output_tokens"] and times == sorted(times)
        assert r["arrival"] <= r["admitted"] <= r["first_token"] == times[0] <= r["finished"]
        assert r["finished_wall"] - r["arrival_wall"] == pytest.approx(r["finished"] - r["arrival"], abs=1e-6)
        assert r["id"].startswith("chatcmpl-") and r["prompt_tokens"] == 11


@pytest.mark.parametrize("args,message", [
    (["--preset", "huge"], "'huge' is not one of"),
    (["--max-num-seqs", "0"], "max_num_seqs must be >= 1"),
    (["--iter-base-ms", "-2"], "iter_base_ms must be >= 0"),
    (["--kv-cache-tokens", "10"], "must hold one full context"),
    (["--fault", "reset=1.5"], "probability must be within [0, 1]"),
    (["--fault", "gremlin=0.1"], "KIND one of"),
    (["--max-waiting", "-1"], "--max-waiting must be >= 0"),
    (["--eos-sigma", "-1"], "--eos-sigma must be >= 0"),
    (["--reasoning-tokens", "lots"], "--reasoning-tokens 'lots': expected N, LO-HI or lognormal:MEDIAN:SIGMA"),
    (["--embedding-dim", "0"], "--embedding-dim must be >= 1"),
    (["--tool-call-p", "2"], "--tool-call-p must be within [0, 1]"),
    (["--reasoning-field", "thoughts"], "'thoughts' is not one of 'reasoning_content', 'reasoning'"),
    (["--model", "m", "--serve-model", "a"], "--model 'm' and --serve-model both name"),
    (["--serve-model", "a:-3"], "--serve-model a:-3: iter_base_ms must be >= 0"),
    (["--serve-model", ":3"], "--serve-model ':3': expected NAME[:ITER_BASE_MS]"),
    (["--lora", "x@nope"], "--lora x@nope: no served model 'nope' (served: sim-small)"),
    (["--lora", "@base"], "--lora '@base': expected NAME or NAME@BASE"),
    (["--lora", "sim-small"], "repeated: sim-small"),
    (["--lora-count", "-1"], "-1 is not in the range x>=0"),
    (["--max-loras", "0"], "max_loras must be >= 1"),
    (["--image-patch-px", "0"], "--image-patch-px must be >= 1"),
])
def test_bad_flags_are_usage_errors_without_traceback(args, message):
    result = CliRunner().invoke(main, ["sim", *args], prog_name="kneecap")
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert "Try 'kneecap sim --help' for help." in result.output
    assert result.output.rstrip().splitlines()[-1].startswith("Error:")


def test_port_in_use_is_a_clear_error():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(main, ["sim", "--port", str(port)])
    assert result.exit_code == 1 and f"Error: cannot serve on 127.0.0.1:{port}" in result.output
