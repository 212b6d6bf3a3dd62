"""Supervising a run's master until it ends: its output relayed, interrupts turned into an orderly stop.

Ctrl-C, SIGTERM and SIGHUP reach only ``kneecap run`` (its children have their own process groups, ``procs.py``);
the first asks the master to end the plan (SIGTERM: it writes a partial summary), a second, or a master that
has not finished ``GRACE_S`` later, stops it at once.
"""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from harness.procs import Child

__all__ = ["GRACE_S", "Supervisor"]

ENDING_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
GRACE_S = 60.0
"""How long the master may take to end the plan and write its partial summary after an interrupt."""
_LOG_PREFIX = re.compile(r"^\[[^]]+\] [^/]+/\w+/kneecap: (kneecap: )?")


class Supervisor:
    """Usage: ``with sup.signals(): ... sup.watch(master, log_path)`` (returns when the master has ended)."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self.interrupted = threading.Event()
        self.stopped_early = False
        """True once an interrupt has asked the master to end the plan: the summary is a partial one."""
        self.killed = False
        """True when this supervisor killed the master (a second interrupt, or past ``GRACE_S``)."""

    @contextmanager
    def signals(self) -> Iterator[None]:
        """While inside, an ending signal only sets ``interrupted``; the previous handlers come back after."""
        previous = {sig: signal.signal(sig, lambda *_: self.interrupted.set()) for sig in ENDING_SIGNALS}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def watch(self, master: Child, log_path: str) -> None:
        """Relay the master's lines and wait for it to end, turning interrupts into a stop (module docstring)."""
        relay = threading.Thread(target=_relay, args=(master.proc, log_path, self.say), daemon=True)
        relay.start()
        asked = None  # when the master was asked to end the plan
        while master.poll() is None:
            if self.interrupted.is_set():
                self.interrupted.clear()
                if asked is None:
                    self.say("interrupted: stopping the run, writing partial results (interrupt again to stop at once)")
                    master.proc.send_signal(signal.SIGTERM)
                    asked = time.monotonic()
                    self.stopped_early = True
                else:
                    self.say("interrupted again: stopping now, without results")
                    master.proc.kill()
                    self.killed = True
            elif asked is not None and time.monotonic() - asked > GRACE_S:
                self.say(f"the master did not finish within {GRACE_S:g} s: stopping it")
                master.proc.kill()
                self.killed = True
            time.sleep(0.2)
        relay.join(timeout=5)


def _relay(master: subprocess.Popen, log_path: str, say: Callable[[str], None]) -> None:
    """Pass the master's kneecap progress lines and any error on (Locust's tables only go to master.log)."""
    assert master.stdout is not None
    with open(log_path, "a", encoding="utf-8") as log:
        for line in master.stdout:
            log.write(line)
            log.flush()
            line = line.rstrip()
            if "/kneecap:" in line:
                say(_LOG_PREFIX.sub("", line))
            elif "ERROR" in line or "Traceback" in line or "CRITICAL" in line:
                say(line)
