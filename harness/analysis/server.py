"""The server's side of a step, from its scraped /metrics: queue, batch, KV cache, preemptions. Pure."""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator, MutableSequence, Sequence
from dataclasses import dataclass, field

from msgspec import UNSET

from harness.analysis.histogram import delta, mean, quantile
from harness.client.server_metrics import ServerSample
from harness.summary import Server, SplitPart

__all__ = ["NO_STAGE_DELTA", "STAGES", "ServerStep", "TimeSeries", "explain"]

STAGES = ("queue_time", "prefill_time", "decode_time", "ttft", "e2e", "time_per_token", "itl")
"""The server's latency histograms a step reports (``client.server_metrics``): their step deltas. Per request but
``itl``, one observation per output token after the first (the engine's own mean inter-token gap)."""
NO_STAGE_DELTA = ("not measured in this step: the server has the histograms, but no request ended between two of "
                  "the step's scrapes (a step cut short, or a counter reset)")


def _floats() -> array:
    return array("d")


class TimeSeries(Sequence[tuple[float, float]]):
    """(time, value) pairs, appended in time order, kept as two float arrays: a scrape every 0.5 s of an hour-long
    step is 7,200 of them (~110 bytes each as tuples of floats, 16 here; ``benchmarks/soak.py``)."""

    __slots__ = ("times", "values")

    def __init__(self) -> None:
        self.times, self.values = _floats(), _floats()

    def append(self, point: tuple[float, float]) -> None:
        self.times.append(point[0])
        self.values.append(point[1])

    def __len__(self) -> int:
        return len(self.times)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return list(zip(self.times[i], self.values[i], strict=True))
        return self.times[i], self.values[i]

    def __iter__(self) -> Iterator[tuple[float, float]]:
        return zip(self.times, self.values, strict=True)


@dataclass
class ServerStep:
    # arrays of floats, not lists: a scrape every 0.5 s of an hour-long step (see TimeSeries)
    waiting: MutableSequence[float] = field(default_factory=_floats)
    running: MutableSequence[float] = field(default_factory=_floats)
    kv: MutableSequence[float] = field(default_factory=_floats)
    preemptions: MutableSequence[float] = field(default_factory=_floats)
    cache_queries: MutableSequence[float] = field(default_factory=_floats)
    cache_hits: MutableSequence[float] = field(default_factory=_floats)
    first: ServerSample | None = None
    last: ServerSample | None = None
    """The step's first and last measured scrapes: their histogram deltas are the step's own requests."""
    first_t: float | None = None
    last_t: float | None = None
    """When they were taken (``time.perf_counter``): their token counters' deltas over that span are rates."""

    @property
    def waiting_mean(self) -> float | None:
        """Requests waiting at the server, on average over the step's scrapes (None: it does not say)."""
        return sum(self.waiting) / len(self.waiting) if self.waiting else None

    def add(self, s: ServerSample, now: float | None = None) -> None:
        if self.first is None:
            self.first, self.first_t = s, now
        self.last, self.last_t = s, now
        for name, values in (("waiting", self.waiting), ("running", self.running), ("kv_cache_usage", self.kv),
                             ("preemptions", self.preemptions), ("prefix_cache_queries", self.cache_queries),
                             ("prefix_cache_hits", self.cache_hits)):
            v = getattr(s, name)
            if v is not None:
                values.append(v)

    def summary(self) -> Server:
        """summary.json's ``server`` block of the step."""
        def stat(v: Sequence[float], f: Callable[[Sequence[float]], float]) -> float | None:
            return round(f(v), 3) if v else None

        def mean(v: Sequence[float]) -> float:
            return sum(v) / len(v)

        cache: dict[str, float] = {}
        if len(self.cache_queries) >= 2 and len(self.cache_hits) == len(self.cache_queries):
            # The step's delta between its first and last scrape (a scrape period at each end is not in it).
            cache = {"prefix_cache_queries": self.cache_queries[-1] - self.cache_queries[0],
                     "prefix_cache_hits": self.cache_hits[-1] - self.cache_hits[0]}
        stages = self.stages()
        # the server has the histograms, but this step has no delta of them: said, not taken for a silent server
        note = NO_STAGE_DELTA if not stages and any(getattr(self.first, n, None) is not None for n in STAGES) \
            else UNSET
        return Server(samples=max(len(self.waiting), len(self.running)), waiting_max=stat(self.waiting, max),
                      waiting_mean=stat(self.waiting, mean), running_max=stat(self.running, max),
                      running_mean=stat(self.running, mean), kv_cache_usage_max=stat(self.kv, max),
                      preemptions=round(self.preemptions[-1] - self.preemptions[0], 3) if self.preemptions else None,
                      **cache, **self.token_rates(), stages=stages or UNSET, stages_note=note)

    def token_rates(self) -> dict:
        """The server's own token counters over the step's measured scrapes, per second (``generation_tokens_per_s``,
        ``prompt_tokens_per_s``): what it says it generated, against the client's count (``analysis.token_counts``).
        Empty when it has no counters or the scrapes span no time."""
        a, b, t0, t1 = self.first, self.last, self.first_t, self.last_t
        if a is None or b is None or t0 is None or t1 is None or t1 - t0 <= 0:
            return {}
        out = {}
        for name in ("generation_tokens", "prompt_tokens"):
            x, y = getattr(a, name), getattr(b, name)
            if x is not None and y is not None and y >= x:  # a counter that went down: the server restarted
                out[f"{name}_per_s"] = round((y - x) / (t1 - t0), 1)
        return out

    def stages(self) -> dict[str, SplitPart]:
        """Per histogram the server has: the step's observations, their mean (exact) and p50/p95 in ms as
        [estimate, low, high] (the bucket's bounds; high None in the +Inf bucket)."""
        out = {}
        for name in STAGES:
            h = delta(getattr(self.first, name, None), getattr(self.last, name, None))
            if h is None or h.count <= 0:
                continue
            entry: dict = {"count": round(h.count), "mean_ms": round(mean(h) * 1000, 3)}  # type: ignore[operator]  # h.count > 0 checked: mean not None
            for q in (0.5, 0.95):
                v = quantile(h, q)
                if v is not None:
                    entry[f"p{round(q * 100)}_ms"] = [round(v.estimate * 1000, 3), round(v.low * 1000, 3),
                                                       None if v.high is None else round(v.high * 1000, 3)]
            out[name] = SplitPart(**entry)
        return out


def explain(before: Server | None, after: Server | None) -> str:
    """The server's part of the knee's reason, e.g. "server: waiting requests 0 -> 37, KV cache 98%"."""
    if before is None or after is None or before.waiting_mean is None or after.waiting_mean is None:
        return ""
    parts = [f"waiting requests {before.waiting_mean:.0f} -> {after.waiting_mean:.0f}"]
    if after.running_max is not None:
        parts.append(f"running {after.running_max:.0f}")
    if after.kv_cache_usage_max is not None:
        parts.append(f"KV cache {100 * after.kv_cache_usage_max:.0f}%")
    if after.preemptions:
        parts.append(f"{after.preemptions:.0f} preemptions")
    return "server: " + ", ".join(parts)
