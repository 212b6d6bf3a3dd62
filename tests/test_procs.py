"""procs.LogRelay on plain files: warnings and errors relayed as they come, whole lines only, rate-limited."""

from __future__ import annotations

from harness.procs import RELAY_LINES, Child, LogRelay


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
