"""A 3 × 2 sweep on the built-in simulator: its wall time, and a resume after the sweep is killed in cell 3.

    python -m benchmarks.sweep_resume [--kill-at 3] [--signal KILL|INT]

Two slot counts (``sim: max_num_seqs``) × three prompt medians (``matrix``), a short staircase per cell. First the
whole sweep, timed; then the same sweep in a new folder, killed (SIGKILL by default: nothing of kneecap's own
cleanup runs, only the children's parent-death signal) once it prints ``cell K/6``, then resumed with ``--out``.
Prints one JSON line per phase: wall seconds, which cells ran, and the server/worker processes left behind.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

BASE = """
name: sweep-bench
endpoint: {api: chat, model: sim-tiny}
workload: {input_tokens: {dist: lognormal, median: 200, sigma: 0.5, min: 16, max: 2000}, output_tokens: 40, seed: 1}
load:
  mode: staircase
  users: {start: 2, step: 2, max: 10}
  step: {warmup_s: 0.5, min_duration_s: 2, min_requests: 30, max_duration_s: 4}
slo: {ttft: ["p(95)<300"]}
"""
SWEEP = """
name: slots-by-prompt
scenario: base.yaml
sim: {max_num_seqs: [4, 8]}
matrix: {workload.input_tokens.median: [128, 256, 512]}
"""


def _sweep(folder: str, out: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "harness.cli", "sweep", os.path.join(folder, "sweep.yaml"),
                             "--out", out, "--workers", "1"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def _ran(lines: list[str]) -> list[int]:
    """The cells that ran (``cell K/N: name``), not the ones taken as finished."""
    return [int(m.group(1)) for line in lines if (m := re.match(r"^cell (\d+)/\d+: ", line))]


def _left() -> list[str]:
    """kneecap processes still running (a simulator, a master or a worker of the killed sweep)."""
    ps = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, check=False).stdout
    return [line.strip() for line in ps.splitlines() if "harness.cli sim" in line or "locust" in line]


def whole(folder: str) -> dict:
    t0 = time.monotonic()
    p = _sweep(folder, os.path.join(folder, "whole"))
    lines = [line.rstrip() for line in p.stdout or []]
    code = p.wait()
    best = next((line for line in lines if line.startswith("Best")), None)
    return {"phase": "whole", "wall_s": round(time.monotonic() - t0, 1), "exit_code": code, "ran": _ran(lines),
            "best": best}


def killed_and_resumed(folder: str, kill_at: int, sig: int) -> list[dict]:
    out = os.path.join(folder, "killed")
    t0 = time.monotonic()
    p = _sweep(folder, out)
    lines = []
    for line in p.stdout or []:
        lines.append(line.rstrip())
        if line.startswith(f"cell {kill_at}/"):
            time.sleep(3)  # into the cell's first step
            p.send_signal(sig)
            break
    code = p.wait()
    for line in p.stdout or []:
        lines.append(line.rstrip())
    time.sleep(2)  # the children's SIGTERM from their dead parent, then their own exit
    killed = {"phase": "killed", "signal": signal.Signals(sig).name, "wall_s": round(time.monotonic() - t0, 1),
              "exit_code": code, "ran": _ran(lines), "left_running": _left()}
    t1 = time.monotonic()
    p = _sweep(folder, out)
    lines = [line.rstrip() for line in p.stdout or []]
    resumed = {"phase": "resumed", "wall_s": round(time.monotonic() - t1, 1), "exit_code": p.wait(),
               "ran": _ran(lines), "skipped": [int(m.group(1)) for line in lines
                                               if (m := re.match(r"^cell (\d+)/\d+ .*finished before", line))]}
    return [killed, resumed]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kill-at", type=int, default=3)
    ap.add_argument("--signal", choices=["KILL", "INT"], default="KILL")
    ap.add_argument("--skip-whole", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "base.yaml"), "w") as f:
            f.write(textwrap.dedent(BASE))
        with open(os.path.join(folder, "sweep.yaml"), "w") as f:
            f.write(textwrap.dedent(SWEEP))
        if not args.skip_whole:
            print(json.dumps(whole(folder)), flush=True)
        for row in killed_and_resumed(folder, args.kill_at, getattr(signal, f"SIG{args.signal}")):
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
