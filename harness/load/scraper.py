"""Master side, while the run goes: the endpoint's Prometheus /metrics, scraped into the running step.

An input of the run, not a sink: every ``SCRAPE_EVERY_S`` one greenlet samples /metrics and hands the
sample to the ledger (``Ledger.server_sample``), which keeps the waiting queue for tail attribution and the
measured part's samples for the step's server summary. The live sinks read the last sample only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import gevent

from harness.analysis.ledger import Ledger
from harness.client.server_metrics import ServerSample, scrape
from harness.client.target import Target
from harness.scenario import Scenario

__all__ = ["SCRAPE_EVERY_S", "Scraper", "metrics_url"]

log = logging.getLogger("kneecap")
SCRAPE_EVERY_S = 0.5


def metrics_url(scenario: Scenario, host: str | None) -> str | None:
    """Where the endpoint's /metrics is: ``endpoint.metrics`` (a URL, ``off``, or ``auto``: the host's)."""
    setting = scenario.endpoint.metrics
    if setting == "off":
        return None
    if setting != "auto":
        return setting
    host = (host or "").rstrip("/")
    return f"{host}/metrics" if host else None


class Scraper:
    """Usage: ``Scraper(scenario, options, host=..., ledger=..., measuring=...).start()``; ``stop()`` at the end.
    ``host``: ``--host`` or ``endpoint.host`` (none: no /metrics to guess)."""

    def __init__(self, scenario: Scenario, options: Any, *, host: str | None, ledger: Ledger,
                 measuring: Callable[[], bool]) -> None:
        self.ledger = ledger
        self.measuring = measuring
        """True past the running step's warm-up: only then do scrapes count for the step's server summary."""
        self.url = metrics_url(scenario, host)
        target = Target.of(scenario.endpoint, host, insecure=bool(getattr(options, "insecure", False)))
        self._tls = target.tls() if (self.url or "").startswith("https:") else None  # the endpoint's TLS: its too
        self.last_sample: ServerSample | None = None
        self._greenlet: gevent.Greenlet | None = None

    def start(self) -> None:
        """Scrape once; if the endpoint has no /metrics, say so and stop here; else scrape on a greenlet."""
        if self.url and scrape(self.url, context=self._tls) is None:
            log.info("kneecap: no Prometheus metrics at %s; server metrics off", self.url)
            self.url = None
        if self.url:
            self._greenlet = gevent.spawn(self._loop)

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=False)

    def _loop(self) -> None:
        while True:
            sample = scrape(self.url, context=self._tls)  # type: ignore[arg-type]  # spawned only with a url
            if sample is not None and self.ledger.current is not None:
                self.last_sample = sample
                self.ledger.server_sample(sample, time.perf_counter(), measuring=self.measuring())
            gevent.sleep(SCRAPE_EVERY_S)
