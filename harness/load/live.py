"""Master side, while the run goes: the live window, to InfluxDB and to the web UI's live dashboard (``/kneecap/``).

One greenlet: every ``window_s`` the fleet's window (everything merged since the last one) becomes
points. It only queues — the InfluxDB write is the sink's ``flush``, on a second greenlet, which never raises
and spools on failure: a database that answers late delays the writes, not the windows. The master hands each
merged report to ``observe``; the server's last scrape comes from the ``load/scraper.py`` input
(``last_sample``); nothing else reaches into this object's state.
"""

from __future__ import annotations

import logging
import math
import os
import time
from array import array
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, overload

import gevent

from harness.analysis.knee import KneeFinding
from harness.analysis.results import StepResult
from harness.analysis.steps import StepInfo
from harness.client.server_metrics import ServerSample
from harness.metrics.aggregate import LATENCIES, Bucket
from harness.metrics.protocol import GeneratorSample, Report
from harness.metrics.vocabulary import LIVE
from harness.scenario import Scenario
from harness.sinks.config import DEFAULT_WINDOW_S, InfluxConfig
from harness.sinks.points import event_point, generator_point, server_point, step_points, window_points

if TYPE_CHECKING:
    from harness.sinks.influx import InfluxSink

__all__ = ["Live", "WindowHistory"]

log = logging.getLogger("kneecap")
HISTORY_SKETCHES = LIVE
"""The metrics of the web UI's live dashboard (``history``): the registry's ``live`` ones."""
_HISTORY_FIELDS = ("t", "load", *(f"{m}_{p}" for m in HISTORY_SKETCHES for p in ("p50", "p99")))


class WindowHistory(Sequence):
    """The dashboard's windows: a float array a field (NaN where a window has none), 48 bytes a window where a
    dict was ~400 (a traced soak: 98 KB in 20 minutes, ``benchmarks/soak.py --trace``); read back as dicts, only
    those asked for (the page takes the last ``web.dashboard.MAX_HISTORY``)."""

    def __init__(self) -> None:
        self._cols = [array("d") for _ in _HISTORY_FIELDS]

    def append(self, entry: dict[str, float]) -> None:
        for name, col in zip(_HISTORY_FIELDS, self._cols, strict=True):
            col.append(entry.get(name, math.nan))

    def __len__(self) -> int:
        return len(self._cols[0])

    @overload
    def __getitem__(self, i: int) -> dict[str, float]: ...
    @overload
    def __getitem__(self, i: slice) -> list[dict[str, float]]: ...

    def __getitem__(self, i: int | slice) -> dict[str, float] | list[dict[str, float]]:
        if isinstance(i, slice):
            return [{k: v for k, v in zip(_HISTORY_FIELDS, values, strict=True) if v == v}  # NaN != NaN: absent
                    for values in zip(*(col[i] for col in self._cols), strict=True)]
        return {k: col[i] for k, col in zip(_HISTORY_FIELDS, self._cols, strict=True) if col[i] == col[i]}


class Live:
    """Owns the live window (everything merged since the last one), each worker's latest health and the chart
    history; reads the running step through ``current`` and the server's last scrape through ``last_sample``."""

    def __init__(self, scenario: Scenario, options: Any, *, run_id: str, out_dir: str,
                 current: Callable[[], StepInfo | None],
                 last_sample: Callable[[], ServerSample | None] = lambda: None) -> None:
        self.scenario = scenario
        self.run_id = run_id
        self.current = current
        self.last_sample = last_sample
        cfg = InfluxConfig.resolve(options, scenario.influxdb)
        self.sink: InfluxSink | None = None
        self.window_s = DEFAULT_WINDOW_S
        if cfg and cfg.url:
            from harness.sinks.influx import InfluxSink  # here: influxdb_client only when a sink is configured

            self.window_s = cfg.window_s
            try:
                token = cfg.token
            except ValueError as exc:  # the database will refuse us: every point goes to the spool, said at the end
                log.error("kneecap: %s", exc)
                token = None
            self.sink = InfluxSink(url=cfg.url, token=token, org=cfg.org, bucket=cfg.bucket,
                                   spool_path=os.path.join(out_dir, "influx-spool.lp"), slow_s=cfg.window_s)
        elif cfg:
            log.warning("kneecap: sinks.influxdb has no URL (url_env unset?); not writing to InfluxDB")
        self.tags = {"run": run_id, "scenario": scenario.name, "model": scenario.endpoint.model}
        self.window = 0
        self._bucket = Bucket()
        self._gen: dict[str, GeneratorSample] = {}
        self._cost: dict[str, list[float]] = {}
        """Per worker over the window: [CPU seconds, longest GC pause (s)] (-1: not measured)."""
        self.history = WindowHistory()
        """One entry per window for the web UI's live dashboard (t, load, p50/p99 of ttft and tpot)."""
        self._t0 = time.monotonic()
        self._greenlets: list[gevent.Greenlet] = []

    def start(self) -> None:
        self.event("run_start", f"run {self.run_id}: scenario {self.scenario.name}", None)
        self._greenlets.append(gevent.spawn(self._window_loop))
        if self.sink is not None:  # its own greenlet: a slow database delays the writes, never the windows
            self._greenlets.append(gevent.spawn(self._write_loop))

    def observe(self, worker: str, report: Report) -> None:
        """A merged worker report: its deltas join the window, its health replaces the worker's last one."""
        for _, _, delta in report.buckets:
            if self.sink is not None:  # the sink's points: the latencies and the counters
                self._bucket.merge(delta, rows=False, sketches=LATENCIES)
            else:  # the dashboard's charts only (a master merges every report twice: the half of it that is needed)
                self._bucket.merge_sketches(delta, HISTORY_SKETCHES)
        if report.gen is not None:
            self._gen[worker] = report.gen
            cost = self._cost.setdefault(worker, [0.0, -1.0])  # a window can hold several reports: add them up
            cost[0] += sum(report.gen.cpu_s.values())
            if report.gen.gc is not None:
                cost[1] = max(cost[1], report.gen.gc[0])

    def _window_loop(self) -> None:
        while True:
            gevent.sleep(self.window_s)
            self.write_window()

    def _write_loop(self) -> None:
        assert self.sink is not None
        while True:
            gevent.sleep(self.window_s)
            self.sink.flush()

    def write_window(self) -> None:
        """Close a window: keep it for the live dashboard and, with a sink, write it."""
        sink = self.sink
        ts = int(time.time() * 1000)
        step = self.current()
        b, self._bucket = self._bucket, Bucket()
        gens, self._gen = self._gen, {}
        costs, self._cost = self._cost, {}
        entry = {"t": round(time.monotonic() - self._t0, 1), "load": step.level if step else 0.0}
        for metric in HISTORY_SKETCHES:
            s = b.sketches.get(metric)
            if s is not None and s.count:
                entry[f"{metric}_p50"] = s.quantile(0.5) * 1000
                entry[f"{metric}_p99"] = s.quantile(0.99) * 1000
        self.history.append(entry)
        if sink is None:
            return
        lines = window_points(b, tags=self.tags, ts_ms=ts, window=self.window, step=step.index if step else -1,
                              load=step.level if step else 0.0, duration_s=self.window_s)
        for worker, gen in gens.items():
            if gen.lag.count:
                cpu_s, gc_max = costs.get(worker, (0.0, -1.0))
                lines.append(generator_point(worker, round(gen.lag.quantile(0.99) * 1000, 3),
                                             round(gen.lag.max * 1000, 3), gen.cpu, tags=self.tags, ts_ms=ts,
                                             window=self.window, cpu_s=round(cpu_s, 4) if gen.cpu_s else None,
                                             gc_pause_max_ms=round(gc_max * 1000, 3) if gc_max >= 0 else None))
        sample = self.last_sample()
        if sample is not None and step is not None:
            lines.append(server_point(sample, tags=self.tags, ts_ms=ts, window=self.window, step=step.index))
        self.window += 1
        sink.add(lines)

    def event(self, kind: str, text: str, load: float | None) -> None:
        if self.sink is not None:
            self.sink.add([event_point(kind, text, load, tags=self.tags, ts_ms=int(time.time() * 1000))])

    def close(self, steps: list[StepResult], knee: KneeFinding, knee_reason: str,
              stop_reason: str | None) -> dict | None:
        """Stop the greenlets; with a sink, write the last window, the judged steps and the end events."""
        for g in self._greenlets:  # a write cut short keeps its lines queued (``InfluxSink.flush``)
            g.kill(block=True)
        if self.sink is None:
            return None
        self.write_window()
        ts = int(time.time() * 1000)
        for s in steps:
            self.sink.add(step_points(s, tags=self.tags, ts_ms=ts))
        if knee.found:
            self.event("knee", knee_reason, knee.load)
        self.event("run_end", f"run {self.run_id} ended: {stop_reason or 'done'}", None)
        return self.sink.close()
