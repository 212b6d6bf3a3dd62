"""The InfluxDB sink (v2 write API, influxdb-client), run on the master. Never blocks the load, never loses points.

``add`` only queues lines. ``flush`` (called by its own greenlet every window, and at the end: ``load/live.py``)
writes the spool's backlog first, then the queue (points carry their own times: order does not matter). A line
leaves the queue only once the database has taken it, so a flush cut short (the end of a run) loses nothing:
InfluxDB keeps one point per series and time, so a batch sent twice is stored once. When the database does not
answer (down, or no answer within ``timeout_s``), the queue goes to a line-protocol spool file in the results
folder. Bounds: memory, the queue's ``MAX_PENDING`` lines (past it, ``add`` spools them) plus one ``BATCH`` read
back from the spool; disk, the spool, which holds every point not yet written (~200 bytes a line, ~8 lines a 1 s
window on two workers and one more per worker: ~6 MB an hour of outage; ``tests/sinks/test_slow_influx.py``).
What is still unwritten at the end stays in the spool file, which ``kneecap influx-replay FILE`` loads later;
``close()`` reports the counts for the summary. The console: one line when the database goes away, one when a
write takes longer than a window (``slow_s``: the sink is behind, points queue), one when it has caught up.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from influxdb_client import InfluxDBClient, WritePrecision
from influxdb_client.client.write_api import SYNCHRONOUS

__all__ = ["BATCH", "MAX_PENDING", "InfluxSink", "replay"]

log = logging.getLogger("kneecap")
BATCH = 5000
MAX_PENDING = 20_000
"""Lines queued in memory at most; more go to the spool file at once."""


class InfluxSink:
    """Usage: ``sink = InfluxSink(url=..., token=..., org=..., bucket=..., spool_path=...)``;
    ``sink.add(lines)``; ``sink.flush()`` periodically; ``sink.close()`` at the end."""

    def __init__(self, *, url: str, token: str | None, org: str, bucket: str, spool_path: str,
                 timeout_s: float = 5.0, slow_s: float = 1.0) -> None:
        self.url, self.org, self.bucket, self.spool_path = url, org, bucket, spool_path
        self._client = InfluxDBClient(url=url, token=token or "", org=org, timeout=int(timeout_s * 1000),
                                      retries=False)
        self._write = self._client.write_api(write_options=SYNCHRONOUS)
        self.slow_s = slow_s
        self.pending: list[str] = []
        self.written = 0
        self.spooled = 0
        """Lines in the spool file not yet written to the database."""
        self._spool_done = 0
        """Bytes at the start of the spool file already written (replayed)."""
        self.down = False
        self.behind = False
        """A write took longer than ``slow_s``, or the spool has a backlog: the database lags the run."""
        self.last_error = ""
        self._sending = 0
        """Lines at the head of ``pending`` that a write has in flight."""
        self._took = 0.0

    def add(self, lines: list[str]) -> None:
        self.pending.extend(lines)
        if len(self.pending) > MAX_PENDING:  # a slow database: memory stays bounded, the disk takes the rest
            self._spool(self.pending[self._sending:])  # not the lines a write has in flight (``flush``)
            del self.pending[self._sending:]

    def _send(self, lines: list[str]) -> bool:
        t0 = time.monotonic()
        try:
            self._write.write(bucket=self.bucket, org=self.org, record=lines,
                              write_precision=WritePrecision.MS)  # type: ignore[arg-type]  # the client's str constant
        except Exception as exc:  # any client or network error (a timeout too) means "not written now"
            self.last_error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
            if not self.down:
                log.warning("kneecap: InfluxDB at %s not writable (%s); spooling to %s", self.url, self.last_error,
                            self.spool_path)
            self.down = True
            return False
        took = self._took = time.monotonic() - t0
        if self.down:
            log.info("kneecap: InfluxDB at %s is back; writing the backlog", self.url)
        if took > self.slow_s and not self.behind:
            log.warning("kneecap: InfluxDB at %s is behind: a write of %d points took %.1f s (window %g s); points "
                        "queue meanwhile", self.url, len(lines), took, self.slow_s)
            self.behind = True
        self.down = False
        return True

    def _spool(self, lines: list[str]) -> None:
        os.makedirs(os.path.dirname(os.path.abspath(self.spool_path)), exist_ok=True)
        with open(self.spool_path, "a", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))
            f.flush()
            os.fsync(f.fileno())
        self.spooled += len(lines)

    def _backlog(self) -> bool:
        """Write the spool's unwritten lines, a batch at a time from where the last write ended; True when none is
        left."""
        with open(self.spool_path, "rb") as f:
            while self.spooled:
                f.seek(self._spool_done)
                batch = [f.readline() for _ in range(BATCH)]
                batch = [line for line in batch if line.endswith(b"\n")]  # a line cut short is not one yet
                if not batch or not self._send([line[:-1].decode() for line in batch]):
                    return False
                self._spool_done += sum(map(len, batch))
                self.written += len(batch)
                self.spooled -= len(batch)
        return True

    def flush(self) -> None:
        """Write the spool's backlog, then the queue; whatever fails goes (stays) on disk."""
        if self.spooled and not self._backlog():
            if self.pending:
                self._spool(self.pending)
                self.pending = []
            return
        while self.pending:
            lines = self.pending[:BATCH]
            self._sending = len(lines)
            try:
                sent = self._send(lines)
            finally:
                self._sending = 0
            if not sent:
                self._spool(self.pending)
                self.pending = []
                return
            del self.pending[:len(lines)]  # only now: a flush cut short mid-write keeps them
            self.written += len(lines)
        if self.behind and not self.spooled and self._took <= self.slow_s:
            log.info("kneecap: InfluxDB at %s has caught up", self.url)
            self.behind = False

    def close(self) -> dict:
        """Last flush; leaves exactly the unwritten lines in the spool file (or no file). Returns counts."""
        self.flush()
        if os.path.exists(self.spool_path):
            with open(self.spool_path, "rb") as f:
                f.seek(self._spool_done)
                rest = f.read()
            if rest.strip():
                with open(self.spool_path, "wb") as f:
                    f.write(rest)
            else:
                os.unlink(self.spool_path)
        self._client.close()
        unwritten = self.spooled
        if unwritten:
            log.warning("kneecap: %d InfluxDB points unwritten, kept in %s (load them with: kneecap influx-replay "
                        "%s)", unwritten, self.spool_path, self.spool_path)
        return {"url": self.url, "bucket": self.bucket, "written": self.written, "unwritten": unwritten,
                "spool_file": self.spool_path if unwritten else None, "last_error": self.last_error or None}


def replay(path: str, **connection: Any) -> int:
    """Write a spool file (line protocol, ms timestamps); returns the number of lines written. Raises on failure."""
    with open(path, encoding="utf-8") as f:
        lines = [line for line in f.read().splitlines() if line.strip()]
    org, bucket = connection.pop("org"), connection.pop("bucket")
    with InfluxDBClient(org=org, **connection) as client:
        write = client.write_api(write_options=SYNCHRONOUS)
        for i in range(0, len(lines), BATCH):
            write.write(bucket=bucket, org=org, record=lines[i:i + BATCH], write_precision=WritePrecision.MS)
    return len(lines)
