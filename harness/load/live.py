"""Master side, while the run goes: windows to InfluxDB and the endpoint's /metrics scraped per step.

Two greenlets: every ``window_s`` the fleet's window (everything merged since the last one) becomes
points; every 0.5 s the server's /metrics is sampled into the current step. Both only queue and
sample — the InfluxDB write is the sink's ``flush``, which never raises and spools on failure.
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING, Any

import gevent

from harness.analysis.server import ServerStep
from harness.client.server_metrics import scrape
from harness.metrics.wire import decode_sketch
from harness.sinks.influx import InfluxSink
from harness.sinks.points import event_point, generator_point, server_point, step_points, window_points

if TYPE_CHECKING:
    from harness.load.plugin import Kneecap

__all__ = ["Live", "influx_config"]

log = logging.getLogger("kneecap")
SCRAPE_EVERY_S = 0.5


def influx_config(options: Any, scenario_influx: dict | None) -> dict | None:
    """The sink's settings: ``--influx-url`` (with --influx-org/-bucket/-token-env) wins over the scenario's
    ``sinks.influxdb``; None when neither asks for InfluxDB. Tokens come from environment variables only."""
    url = getattr(options, "influx_url", "") if options else ""
    if url:
        return {"url": url, "org": options.influx_org, "bucket": options.influx_bucket,
                "token": os.environ.get(options.influx_token_env), "window_s": 5.0}
    if not scenario_influx:
        return None
    c = scenario_influx
    return {"url": c.get("url") or os.environ.get(c.get("url_env", ""), ""), "org": c["org"], "bucket": c["bucket"],
            "token": os.environ.get(c["token_env"]) if c.get("token_env") else None,
            "window_s": float(c.get("window_s", 5.0))}


class Live:
    def __init__(self, k: Kneecap, out_dir: str) -> None:
        self.k = k
        self.server: dict[int, ServerStep] = {}
        self.last_sample = None
        self.metrics_url = self._metrics_url()
        cfg = influx_config(k.options, k.scenario.influxdb)
        self.sink: InfluxSink | None = None
        self.window_s = 5.0
        if cfg and cfg["url"]:
            self.window_s = cfg["window_s"]
            self.sink = InfluxSink(url=cfg["url"], token=cfg["token"], org=cfg["org"], bucket=cfg["bucket"],
                                   spool_path=os.path.join(out_dir, "influx-spool.lp"))
        elif cfg:
            log.warning("kneecap: sinks.influxdb has no URL (url_env unset?); not writing to InfluxDB")
        self.tags = {"run": k.run_id, "scenario": k.scenario.name, "model": k.scenario.endpoint.model}
        self.window = 0
        self.history: list[dict] = []
        """One entry per window for the web UI's chart page (t, load, p50/p99 of ttft and tpot)."""
        self._t0 = time.monotonic()
        self._greenlets: list[gevent.Greenlet] = []

    def _metrics_url(self) -> str | None:
        setting = self.k.scenario.endpoint.metrics
        if setting == "off":
            return None
        if setting != "auto":
            return setting
        host = (self.k.env.host or self.k.scenario.endpoint.host or "").rstrip("/")
        return f"{host}/metrics" if host else None

    def start(self) -> None:
        if self.metrics_url and scrape(self.metrics_url) is None:
            log.info("kneecap: no Prometheus metrics at %s; server metrics off", self.metrics_url)
            self.metrics_url = None
        if self.metrics_url:
            self._greenlets.append(gevent.spawn(self._scrape_loop))
        self.event("run_start", f"run {self.k.run_id}: scenario {self.k.scenario.name}", None)
        self._greenlets.append(gevent.spawn(self._window_loop))

    def _scrape_loop(self) -> None:
        while True:
            sample = scrape(self.metrics_url)  # type: ignore[arg-type]
            if sample is not None and self.k.steps:
                self.last_sample = sample
                self.server.setdefault(self.k.steps[-1].index, ServerStep()).add(sample)
            gevent.sleep(SCRAPE_EVERY_S)

    def _window_loop(self) -> None:
        while True:
            gevent.sleep(self.window_s)
            self.write_window()

    def write_window(self) -> None:
        """Close a window: keep it for the chart page and, with a sink, write it."""
        k, sink = self.k, self.sink
        ts = int(time.time() * 1000)
        step = k.steps[-1] if k.steps else None
        b = k.fleet.take_window()
        entry = {"t": round(time.monotonic() - self._t0, 1), "load": step.level if step else 0.0}
        for metric in ("ttft", "tpot"):
            s = b.sketches.get(metric)
            if s is not None and s.count:
                entry[f"{metric}_p50"] = s.quantile(0.5) * 1000
                entry[f"{metric}_p99"] = s.quantile(0.99) * 1000
        self.history.append(entry)
        if sink is None:
            return
        lines = window_points(b, tags=self.tags, ts_ms=ts, window=self.window, step=step.index if step else -1,
                              load=step.level if step else 0.0, duration_s=self.window_s)
        for worker, gen in k.worker_gen.items():
            lag = decode_sketch(gen["lag"])
            if lag.count:
                lines.append(generator_point(worker, round(lag.quantile(0.99) * 1000, 3), round(lag.max * 1000, 3),
                                             gen["cpu"], tags=self.tags, ts_ms=ts, window=self.window))
        k.worker_gen.clear()
        if self.last_sample is not None and step is not None:
            lines.append(server_point(self.last_sample, tags=self.tags, ts_ms=ts, window=self.window, step=step.index))
        self.window += 1
        sink.add(lines)
        sink.flush()

    def event(self, kind: str, text: str, load: float | None) -> None:
        if self.sink is not None:
            self.sink.add([event_point(kind, text, load, tags=self.tags, ts_ms=int(time.time() * 1000))])

    def close(self, steps: list[dict], level_key: str, knee: dict) -> dict | None:
        for g in self._greenlets:
            g.kill(block=False)
        if self.sink is None:
            return None
        self.write_window()
        ts = int(time.time() * 1000)
        for s in steps:
            self.sink.add(step_points(s, tags=self.tags, ts_ms=ts, level_key=level_key))
        if knee.get("found"):
            self.event("knee", knee["reason"], knee.get(level_key))
        self.event("run_end", f"run {self.k.run_id} ended: {self.k.stop_reason or 'done'}", None)
        return self.sink.close()
