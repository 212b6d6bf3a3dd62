"""What becomes of each request beyond the recorder: Locust's stats rows, and a failed record for an exception that
escaped the request path. A mixin of ``LLMUser`` (``environment``, ``kneecap``)."""

from __future__ import annotations

import logging
import time
from typing import Any

from harness.client.transport import Connection
from harness.errors import KneecapError
from harness.metrics.record import ERROR_CLASSES, RequestRecord

__all__ = ["RequestReports", "StreamFailure"]

log = logging.getLogger("kneecap")


class StreamFailure(KneecapError):
    """How a failed request appears in Locust's failure table: one row per error class."""


class RequestReports:
    """``_client_error``: a failed record for an exception; ``_report``: the request in Locust's stats."""

    environment: Any
    kneecap: Any

    def _client_error(self, exc: Exception, conn: Connection, start: float,
                      intended_start: float | None) -> RequestRecord:
        """``exc`` escaped the request path: a failed request of class client_error; the traceback, once per type."""
        conn.close()  # it may be anywhere in a response
        kind = type(exc)
        logged = self.kneecap.logged_errors
        if kind not in logged:
            logged.add(kind)
            log.error("kneecap: client_error: %s in the request path (a bug in kneecap, or in a user class built on "
                      "it); each such request counts as a failed client_error, this is logged once per exception type",
                      kind.__name__, exc_info=exc)
        detail = f"{kind.__name__}: {exc}"[:240] + " (traceback once in the worker's log)"
        return RequestRecord(start=start, intended_start=intended_start, error="client_error", error_detail=detail,
                             e2e_s=time.perf_counter() - start)

    def _report(self, name: str, rec: RequestRecord) -> None:
        env = self.environment
        e2e_ms = (rec.e2e_s or 0.0) * 1000
        if rec.cancelled is not None:  # neither a success nor a failure: a row of its own, at the hang-up
            env.events.request.fire(request_type="POST", name=f"{name} cancelled", response_time=e2e_ms,
                                    response_length=0, exception=None, context={})
            return
        exc = None if rec.ok else StreamFailure(f"{rec.error}: {ERROR_CLASSES.get(rec.error or '', '')}")
        env.events.request.fire(request_type="POST", name=name, response_time=e2e_ms, response_length=0,
                                exception=exc, context={})
        if rec.ok and env.stats is not None:
            if rec.ttft_s is not None:
                env.stats.get("ttft", "LLM").log(rec.ttft_s * 1000, 0)
            tpot = rec.tpot_s
            if tpot is not None:
                env.stats.get("tpot", "LLM").log(tpot * 1000, 0)
