"""InfluxDB for the sink tests: a scenario that writes to one (``scenario``), the summary its run left
(``summary_of``), and a database that is slow, not down (``slow_db``): an InfluxDB write endpoint on loopback (a
stand-in: only the write API is needed, and a real database cannot be made to hang on cue) that first accepts
writes and never answers, then answers each after ``SLOW_WRITE_S``, then at once. Shared by the sink tests and the
secrets test, which reads what reached the database and with which token."""

from __future__ import annotations

import http.server
import json
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from tests.kit.run import write_scenario

__all__ = ["HANG_S", "SLOW_S", "SLOW_WRITE_S", "SlowDb", "scenario", "slow_db", "summary_of"]

HANG_S, SLOW_S, SLOW_WRITE_S = 5.5, 5.0, 3.0
"""Phases from the first write: no answer at all (the first write times out at 5 s), then each write answered after
SLOW_WRITE_S (two of them), then at once."""


def scenario(tmp_path, load: str, influx_url: str, window_s: float = 1.0):
    return write_scenario(tmp_path, textwrap.dedent(f"""
        name: influx-test
        endpoint: {{api: chat, model: sim-tiny}}
        workload: {{input_tokens: 100, output_tokens: 20}}
        sinks: {{influxdb: {{url: "{influx_url}", org: kneecap, bucket: kneecap, window_s: {window_s}}}}}
    """) + load)


def summary_of(tmp_path, output: str = "") -> dict:
    path = tmp_path / "out" / "summary.json"
    assert path.exists(), f"the run wrote no summary.json; its output:\n{output}"
    return json.loads(path.read_text())


class SlowDb(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Write)
        self.lines: list[str] = []
        self.sizes: list[int] = []
        """Lines per write stored."""
        self.tokens: set[str] = set()
        """The Authorization headers the writes came with."""
        self.first: float | None = None
        self.lock = threading.Lock()
        self.closing = threading.Event()

    def phase(self) -> str:
        since = time.monotonic() - (self.first or time.monotonic())
        return "hang" if since < HANG_S else "slow" if since < HANG_S + SLOW_S else "fast"


class _Write(http.server.BaseHTTPRequestHandler):
    server: SlowDb

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        db = self.server
        with db.lock:
            db.first = db.first or time.monotonic()
            db.tokens.add(self.headers.get("Authorization", ""))
        phase = db.phase()
        if phase == "hang":  # take the request, never answer: the client's timeout must end it
            db.closing.wait(30)
            return
        if phase == "slow":
            time.sleep(SLOW_WRITE_S)
        with db.lock:
            db.lines += body.decode().splitlines()
            db.sizes.append(len(body.decode().splitlines()))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *_: object) -> None:
        pass


@contextmanager
def slow_db() -> Iterator[SlowDb]:
    db = SlowDb()
    thread = threading.Thread(target=db.serve_forever, daemon=True)
    thread.start()
    try:
        yield db
    finally:
        db.closing.set()
        db.shutdown()
        db.server_close()
