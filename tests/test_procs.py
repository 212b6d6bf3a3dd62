"""procs.LogRelay on plain files: warnings and errors relayed as they come, whole lines only, rate-limited; a master's
large allocations stay mapped (``large_blocks_mapped``), in a process of their own."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from harness.procs import RELAY_LINES, Child, LogRelay


@pytest.mark.integration
def test_relays_important_whole_lines_and_rate_limits(tmp_path):
    log = tmp_path / "worker-0.log"
    log.write_text("INFO fine\n[x] WARNING kneecap: slow\npartial ERROR li")
    said: list[str] = []
    relay = LogRelay([Child("worker-0", None, str(log))], said.append)  # type: ignore[arg-type]
    relay.poll()
    assert said == ["worker-0: [x] WARNING kneecap: slow"]  # the partial line waits for its end
    with log.open("a") as f:
        f.write("ne\n" + "".join(f"ERROR number {i}\n" for i in range(20)))
    relay.poll()
    assert said[1] == "worker-0: partial ERROR line"
    assert len(said) == RELAY_LINES  # then muted for the rest of the window
    relay.stop()
    assert said[-1] == f"worker-0: {21 - (RELAY_LINES - 1)} more warning/error lines in {log}"


_REAP = """
import sys
from harness.procs import start_child, stop_child
child = start_child("busy", [sys.executable, "-c", "sum(range(3_000_000))"], sys.argv[1])
assert child.wait(30) == 0 and child.poll() == 0 and child.proc.poll() == 0  # Popen does not wait again
stop_child(child)  # already reaped: nothing to do
print(child.rusage.ru_utime + child.rusage.ru_stime)
"""


@pytest.mark.integration
def test_a_reaped_child_keeps_its_cpu_seconds(tmp_path):
    """In a fresh interpreter, as ``kneecap run`` is: once gevent has patched a process (other tests import
    Locust), its child watcher reaps every child first and no rusage is left to read."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _REAP, str(tmp_path / "busy.log")], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert float(done.stdout) > 0.01



ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_AFTER_A_LARGE_FREE = """
import sys
from harness.load.soak import _malloc
from harness.procs import large_blocks_mapped
if sys.argv[1] == "mapped":
    large_blocks_mapped()
big = bytearray(8 << 20)  # mapped either way (past the start threshold), then freed: glibc raises its threshold
del big
before = _malloc()["malloc_mmap_mb"]
held = bytearray(600 << 10)  # a seal's temporary: from the heap, unless large blocks stay mapped
print(round(_malloc()["malloc_mmap_mb"] - before, 2), len(held))
"""


@pytest.mark.integration
@pytest.mark.parametrize("mode, mapped_mb", [("mapped", 0.59), ("default", 0.0)])
def test_large_blocks_stay_mapped_after_a_large_free(mode: str, mapped_mb: float) -> None:
    out = subprocess.run([sys.executable, "-c", _AFTER_A_LARGE_FREE, mode], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout.split()
    assert float(out[0]) == pytest.approx(mapped_mb, abs=0.02), out
