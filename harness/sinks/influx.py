"""The InfluxDB sink (v2 write API, influxdb-client), run on the master. Never blocks the load, never loses points.

``add`` only queues lines. ``flush`` (called every window by a greenlet, and at the end) writes the
queue; when the database does not answer, the queue goes to a line-protocol spool file in the results
folder and memory is freed (bounded memory whatever the outage length). When the database answers
again, the spool's backlog is written first, in order. What is still unwritten at the end stays in the
spool file, which ``kneecap influx-replay FILE`` loads later; ``close()`` reports the counts for the
summary. One log line when the database goes away, one when it comes back.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from influxdb_client import InfluxDBClient, WritePrecision
from influxdb_client.client.write_api import SYNCHRONOUS

__all__ = ["InfluxSink", "replay"]

log = logging.getLogger("kneecap")
BATCH = 5000


class InfluxSink:
    """Usage: ``sink = InfluxSink(url=..., token=..., org=..., bucket=..., spool_path=...)``;
    ``sink.add(lines)``; ``sink.flush()`` periodically; ``sink.close()`` at the end."""

    def __init__(self, *, url: str, token: str | None, org: str, bucket: str, spool_path: str,
                 timeout_s: float = 5.0) -> None:
        self.url, self.org, self.bucket, self.spool_path = url, org, bucket, spool_path
        self._client = InfluxDBClient(url=url, token=token or "", org=org, timeout=int(timeout_s * 1000),
                                      retries=False)
        self._write = self._client.write_api(write_options=SYNCHRONOUS)
        self.pending: list[str] = []
        self.written = 0
        self.spooled = 0
        """Lines in the spool file not yet written to the database."""
        self._spool_done = 0
        """Lines at the start of the spool file already written (replayed)."""
        self.down = False
        self.last_error = ""

    def add(self, lines: list[str]) -> None:
        self.pending.extend(lines)

    def _send(self, lines: list[str]) -> bool:
        try:
            for i in range(0, len(lines), BATCH):
                self._write.write(bucket=self.bucket, org=self.org, record=lines[i:i + BATCH],
                                  write_precision=WritePrecision.MS)
        except Exception as exc:  # any client or network error means "not written now"
            self.last_error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
            if not self.down:
                log.warning("kneecap: InfluxDB at %s not writable (%s); spooling to %s", self.url, self.last_error,
                            self.spool_path)
            self.down = True
            return False
        if self.down:
            log.info("kneecap: InfluxDB at %s is back; writing the backlog", self.url)
        self.down = False
        return True

    def _spool(self, lines: list[str]) -> None:
        os.makedirs(os.path.dirname(os.path.abspath(self.spool_path)), exist_ok=True)
        with open(self.spool_path, "a", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))
            f.flush()
            os.fsync(f.fileno())
        self.spooled += len(lines)

    def flush(self) -> None:
        """Write the spool's backlog, then the queue; whatever fails goes (stays) on disk."""
        lines, self.pending = self.pending, []
        if self.spooled:
            with open(self.spool_path, encoding="utf-8") as f:
                backlog = f.read().splitlines()[self._spool_done:]
            if not self._send(backlog):
                if lines:
                    self._spool(lines)
                return
            self.written += len(backlog)
            self._spool_done += len(backlog)
            self.spooled = 0
        if lines:
            if self._send(lines):
                self.written += len(lines)
            else:
                self._spool(lines)

    def close(self) -> dict:
        """Last flush; leaves exactly the unwritten lines in the spool file (or no file). Returns counts."""
        self.flush()
        if os.path.exists(self.spool_path):
            with open(self.spool_path, encoding="utf-8") as f:
                rest = f.read().splitlines()[self._spool_done:]
            if rest:
                with open(self.spool_path, "w", encoding="utf-8") as f:
                    f.write("".join(line + "\n" for line in rest))
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
