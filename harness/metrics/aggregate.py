"""Per-step aggregates of request records: sketches per metric plus counters, mergeable across a fleet.

A ``Bucket`` holds one (step, phase) of one worker, or the fleet's merge of them. Workers fill a
``Recorder`` and ship its ``drain()`` deltas (``metrics/protocol.py`` puts them on the wire); the
master ``Fleet.merge``s them. Latency sketches hold successful requests only; failures are counted by
class and enter the SLO math as misses (``analysis``), never silently dropped. Values are seconds (tokens/s for
``tokens_per_s``); summaries print milliseconds.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from harness.metrics.record import RequestRecord
from harness.metrics.rows import check_rows, encode_row
from harness.metrics.sessions import SessionRecord, SessionStats, turn_sketch
from harness.metrics.sketch import Sketch
from harness.metrics.wire import decode_sketch, encode_sketch

__all__ = ["LATENCIES", "METRICS", "Bucket", "Delta", "Fleet", "Recorder", "ci_ranks", "quantile_ci",
           "summarize_sketch"]

ROWS_CAP = 100_000
"""Request rows kept per bucket (a step's, on the master): ~30 MB; past it a uniform sample (``Bucket.add_rows``)."""

METRICS = ("ttft", "tpot", "itl", "itl_token", "e2e", "tokens_per_s", "headers", "send_lag", "ttft_intended",
           "e2e_intended", "ttfo", "reasoning_time", "tpot_content", "tool_call")
"""ttft/tpot/itl (per chunk)/itl_token/e2e/headers in s; tokens_per_s per user; send_lag and the *_intended
latencies (from the arrival schedule's intended start) in open-loop mode only; ttfo (first answer token),
reasoning_time, tpot_content (answer tokens only) and tool_call (first tool-call delta) where the stream has
them. ``tokens_per_chunk`` (a count) is a sketch too, when the server gives exact per-chunk counts."""
LATENCIES = tuple(m for m in METRICS if m != "tokens_per_s")
"""The metrics that are durations (seconds in sketches, milliseconds in summaries)."""

_WIRE_FIELDS = (("n", "requests"), ("ok", "ok"), ("good", "good"), ("fail", "failures"), ("out", "output_tokens"),
                ("in", "input_tokens"), ("counted", "counted_outputs"), ("perr", "prompt_error_sum"),
                ("pn", "prompt_error_n"), ("arr", "arrivals"), ("drop", "dropped"))
"""A bucket's counters on the wire, in wire order: (short key, field); the sketches go first, under "sk"."""


@dataclass
class Bucket:
    sketches: dict[str, Sketch] = field(default_factory=dict)
    requests: int = 0
    ok: int = 0
    good: int = 0
    """Successful requests that met every per-request SLO limit (goodput)."""
    failures: dict[str, int] = field(default_factory=dict)
    output_tokens: int = 0
    input_tokens: int = 0
    counted_outputs: int = 0
    """Requests whose output length was counted from chunks because the server sent no usage."""
    prompt_error_sum: float = 0.0
    """Sum of |achieved − target| / target prompt lengths, over ``prompt_error_n`` requests."""
    prompt_error_n: int = 0
    arrivals: int = 0
    """Open loop: arrivals the schedule dispatched (sent or dropped)."""
    dropped: int = 0
    """Open loop: arrivals not sent because ``max_in_flight`` requests were already running."""
    failure_samples: dict[str, str] = field(default_factory=dict)
    """One detail per failure class (the first seen), for the console and the summary to explain failures."""
    cache: list[int] = field(default_factory=lambda: [0, 0, 0, 0])
    """Prefix cache as the client sees it: [requests that reported cached tokens, their prompt tokens, their
    cached tokens, how many of them reported it only in llama.cpp's timings.cache_n]."""
    sessions: SessionStats | None = None
    """Session calls and ended sessions (``metrics.sessions``); None when the workload has no sessions."""
    new_connections: int = 0
    """Requests (failed ones included) that opened a connection inside their own time (``RequestRecord.
    new_connection``): the first on a connection, or the server had closed the kept-alive one."""
    rows: list[list] = field(default_factory=list)
    """Measured requests as compact rows (``metrics.rows``) for tail attribution: at most ``ROWS_CAP`` per bucket,
    a uniform sample beyond (``rows_seen`` counts them all)."""
    rows_seen: int = 0
    extra: dict[str, int] = field(default_factory=dict)
    """Counters that apply to some endpoints only: ``exact_chunks`` (requests with exact per-chunk token counts),
    ``itl_token_unknown`` (several-token chunks without exact counts: no per-token ITL), ``reasoning_counted``
    (reasoning tokens counted from chunks, usage silent), ``inputs`` (embeddings inputs),
    ``continuous_usage_refused`` (the endpoint refused per-chunk usage: asked no more, those requests re-sent)."""

    def _sk(self, name: str) -> Sketch:
        s = self.sketches.get(name)
        if s is None:
            s = self.sketches[name] = Sketch()
        return s

    def add(self, rec: RequestRecord, good: Callable[[RequestRecord], bool] | None = None) -> None:
        self.requests += 1
        if rec.turn_bucket is not None:
            if self.sessions is None:
                self.sessions = SessionStats()
            self.sessions.add_call(rec.turn_bucket, rec.ok, rec.prompt_tokens, rec.cached_tokens, rec.ttft_s,
                                   rec.e2e_s, rec.output_tokens)
            if rec.ok and rec.ttft_s is not None:
                self._sk(turn_sketch(rec.turn_bucket)).add(rec.ttft_s)
        self.new_connections += rec.new_connection
        lag = rec.send_lag_s
        if lag is not None:
            self._sk("send_lag").add(max(lag, 0.0))
        if not rec.ok:
            self.failures[rec.error] = self.failures.get(rec.error, 0) + 1  # type: ignore[index]
            if rec.error_detail and rec.error not in self.failure_samples:
                self.failure_samples[rec.error] = rec.error_detail[:300]  # type: ignore[index]
            return
        self.ok += 1
        if good is None or good(rec):
            self.good += 1
        sk = self._sk
        if rec.ttft_s is not None:
            sk("ttft").add(rec.ttft_s)
            if lag is not None:
                sk("ttft_intended").add(rec.ttft_s + max(lag, 0.0))
        if rec.e2e_s is not None:
            sk("e2e").add(rec.e2e_s)
            if lag is not None:
                sk("e2e_intended").add(rec.e2e_s + max(lag, 0.0))
        if rec.headers_s is not None:
            sk("headers").add(rec.headers_s)
        tpot, speed = rec.tpot_s, rec.tokens_per_s
        if tpot is not None:
            sk("tpot").add(tpot)
        if speed is not None:
            sk("tokens_per_s").add(speed)
        if len(rec.chunk_times) > 1:
            gaps = rec.itl_chunks()
            itl = sk("itl")
            for g in gaps:
                itl.add(g)
            per_chunk = rec.chunk_tokens
            if per_chunk is not None:  # exact: a gap is shared by the tokens of the chunk that ends it
                itl_token = sk("itl_token")
                for g, k in zip(gaps, per_chunk[1:], strict=False):
                    if k > 0:
                        itl_token.add(g / k, k)
            elif rec.one_token_per_chunk:
                itl_token = sk("itl_token")
                for g in gaps:
                    itl_token.add(g)
            else:
                self._count("itl_token_unknown")
        if rec.chunk_tokens is not None:
            self._count("exact_chunks")
            tpc = sk("tokens_per_chunk")
            for k in rec.chunk_tokens:
                if k > 0:
                    tpc.add(k)
        if rec.ttfo_s is not None:
            sk("ttfo").add(rec.ttfo_s)
            tpot_content = rec.tpot_content_s
            if tpot_content is not None:
                sk("tpot_content").add(tpot_content)
        reasoning = rec.reasoning_s
        if reasoning is not None:
            sk("reasoning_time").add(reasoning)
        if rec.tool_call_s is not None:
            sk("tool_call").add(rec.tool_call_s)
        if rec.reasoning_tokens_counted:
            self._count("reasoning_counted")
        if rec.inputs:
            self._count("inputs", rec.inputs)
        if rec.output_tokens:
            self.output_tokens += rec.output_tokens
            self.counted_outputs += rec.output_tokens_counted
        if rec.prompt_tokens:
            self.input_tokens += rec.prompt_tokens
            if rec.cached_tokens is not None:
                c = self.cache
                c[0] += 1
                c[1] += rec.prompt_tokens
                c[2] += rec.cached_tokens
                c[3] += rec.cached_source == "timings.cache_n"
            if rec.prompt_tokens_target:
                self.prompt_error_sum += abs(rec.prompt_tokens - rec.prompt_tokens_target) / rec.prompt_tokens_target
                self.prompt_error_n += 1

    def _count(self, key: str, n: int = 1) -> None:
        self.extra[key] = self.extra.get(key, 0) + n

    def add_session(self, rec: SessionRecord) -> None:
        """One ended session: its counts, and its duration, model time, TTFT p99 and final context as sketches."""
        if self.sessions is None:
            self.sessions = SessionStats()
        self.sessions.add_session(rec)
        sk = self._sk
        sk("session_duration").add(rec.duration_s)
        sk("session_model_time").add(rec.model_time_s)
        sk("session_context").add(rec.context_tokens)
        if rec.ttft_p99_s is not None and not rec.failed:
            sk("session_ttft").add(rec.ttft_p99_s)

    def merge(self, other: Bucket, *, rows: bool = True, sketches: Collection[str] | None = None) -> None:
        """Add ``other``; ``rows=False`` leaves its per-request rows out and ``sketches`` names the only sketches
        to merge (a live window reads a few, never the rows: the master merges every report twice)."""
        for name, s in other.sketches.items():
            if sketches is None or name in sketches:
                self._sk(name).merge(s)
        self.requests += other.requests
        self.ok += other.ok
        self.good += other.good
        for k, v in other.failures.items():
            self.failures[k] = self.failures.get(k, 0) + v
        for k, detail in other.failure_samples.items():
            self.failure_samples.setdefault(k, detail)
        self.output_tokens += other.output_tokens
        self.input_tokens += other.input_tokens
        self.counted_outputs += other.counted_outputs
        self.prompt_error_sum += other.prompt_error_sum
        self.prompt_error_n += other.prompt_error_n
        self.arrivals += other.arrivals
        self.dropped += other.dropped
        self.new_connections += other.new_connections
        for i, v in enumerate(other.cache):
            self.cache[i] += v
        for k, v in other.extra.items():
            self.extra[k] = self.extra.get(k, 0) + v
        if other.sessions is not None:
            if self.sessions is None:
                self.sessions = SessionStats()
            self.sessions.merge(other.sessions)
        if rows and other.rows:
            self.add_rows(other.rows, other.rows_seen)

    def add_rows(self, rows: list[list], seen: int) -> None:
        """``rows``, a uniform sample of ``seen`` requests; past ``ROWS_CAP`` both are sampled down together."""
        total = self.rows_seen + seen
        if len(self.rows) + len(rows) <= ROWS_CAP:
            self.rows.extend(rows)
        else:  # each side keeps its share of the cap, drawn uniformly (seeded: the same data, the same rows)
            rng = random.Random(total)
            mine = round(ROWS_CAP * self.rows_seen / total)
            keep = min(mine, len(self.rows))
            new = rng.sample(rows, min(ROWS_CAP - mine, len(rows)))
            # Drop a uniform choice of the rows this bucket loses and put the new ones in their places: O(batch),
            # not O(cap), per merge — a master merges hundreds of small reports into a full bucket every 3 s.
            drop = rng.sample(range(len(self.rows)), len(self.rows) - keep)
            mine_rows = self.rows
            for i, row in zip(drop, new, strict=False):  # the shorter decides; the rest below
                mine_rows[i] = row
            if len(drop) > len(new):  # this side shrank more than the other side adds (two large buckets)
                gone = set(drop[len(new):])
                mine_rows[:] = [r for i, r in enumerate(mine_rows) if i not in gone]
            else:
                mine_rows.extend(new[len(drop):])
        self.rows_seen = total

    def to_wire(self) -> dict:
        out: dict = {"sk": {k: encode_sketch(s) for k, s in self.sketches.items()}}
        out.update((key, getattr(self, name)) for key, name in _WIRE_FIELDS)
        out["fail"] = dict(self.failures)  # a copy: the payload must not change with the bucket
        if self.failure_samples:  # only then: payloads without failure details keep their bytes
            out["why"] = dict(self.failure_samples)
        if self.cache[0]:  # likewise for the prefix cache and sessions
            out["cache"] = list(self.cache)
        if self.sessions is not None:
            out["sess"] = self.sessions.to_wire()
        if self.extra:
            out["x"] = dict(self.extra)
        if self.new_connections:
            out["conn"] = self.new_connections
        if self.rows:
            out["rows"] = list(self.rows)
            if self.rows_seen != len(self.rows):
                out["rows_seen"] = self.rows_seen
        return out

    @classmethod
    def from_wire(cls, d: dict) -> Bucket:
        fields = {name: d[key] for key, name in _WIRE_FIELDS}
        fields["failures"] = dict(fields["failures"])
        cache = [int(x) for x in d.get("cache", (0, 0, 0, 0))]
        if len(cache) != 4:
            raise ValueError("cache has 4 counters")
        rows = list(d.get("rows", ()))
        check_rows(rows)
        return cls(sketches={k: decode_sketch(v) for k, v in d["sk"].items()},
                   failure_samples={str(k): str(v) for k, v in d.get("why", {}).items()}, cache=cache,
                   sessions=SessionStats.from_wire(d["sess"]) if "sess" in d else None,
                   extra={str(k): int(v) for k, v in d.get("x", {}).items()}, new_connections=int(d.get("conn", 0)),
                   rows=rows, rows_seen=int(d.get("rows_seen", len(rows))), **fields)


Delta = tuple[int, str, Bucket]
"""One (step, phase) bucket of new data from one worker."""


class Recorder:
    """Worker side: records go to the bucket of the current step and phase; ``drain()`` ships deltas."""

    def __init__(self, *, warmup_s: float = 0.0, good: Callable[[RequestRecord], bool] | None = None) -> None:
        self.warmup_s = warmup_s
        self.good = good
        self.step = 0
        self.step_started: float | None = None
        self.worker = 0
        """This worker's index, in its request rows."""
        self._buckets: dict[tuple[int, str], Bucket] = {}

    def set_step(self, index: int, now: float) -> None:
        self.step, self.step_started = index, now

    def phase(self, now: float) -> str:
        if self.step_started is not None and now - self.step_started < self.warmup_s:
            return "warmup"
        return "measure"

    def _bucket(self, now: float) -> tuple[tuple[int, str], Bucket]:
        key = (self.step, self.phase(now))
        b = self._buckets.get(key)
        if b is None:
            b = self._buckets[key] = Bucket()
        return key, b

    def add(self, rec: RequestRecord, now: float) -> tuple[int, str]:
        key, b = self._bucket(now)
        b.add(rec, self.good)
        if key[1] == "measure":  # the rows tail attribution reads: the judged part of the step only
            b.add_rows([encode_row(rec, rec.start - (self.step_started or rec.start), self.worker)], 1)
        return key

    def note(self, key: str, now: float) -> None:
        """Count one event of ``key`` (``Bucket.extra``) in the current step and phase."""
        self._bucket(now)[1]._count(key)

    def add_session(self, rec: SessionRecord, now: float) -> None:
        """An ended session goes to the bucket of the step and phase it ended in."""
        self._bucket(now)[1].add_session(rec)

    def arrival(self, now: float, dropped: bool) -> None:
        """Open loop: one scheduled arrival, sent or dropped."""
        b = self._bucket(now)[1]
        b.arrivals += 1
        b.dropped += dropped

    def drain(self) -> list[Delta]:
        """The deltas since the last drain; the recorder starts empty again."""
        out = [(s, p, b) for (s, p), b in self._buckets.items()]
        self._buckets = {}
        return out


class Fleet:
    """Master side: the merge of every worker's deltas per (step, phase), and the step each worker is in."""

    def __init__(self) -> None:
        self.steps: dict[tuple[int, str], Bucket] = {}
        self.worker_step: dict[str, int] = {}

    def merge(self, worker: str, step: int, deltas: list[Delta]) -> None:
        """Add one worker's deltas; ``step`` is the step that worker is in now."""
        for index, phase, b in deltas:
            self.steps.setdefault((index, phase), Bucket()).merge(b)
        self.worker_step[worker] = step

    def forget(self, worker: str) -> None:
        """A lost worker: the steps it was in no longer wait for its reports."""
        self.worker_step.pop(worker, None)

    def bucket(self, index: int, phase: str = "measure") -> Bucket:
        """The merged bucket of a step's phase (a new empty one when nothing arrived yet)."""
        return self.steps.get((index, phase)) or Bucket()

    def step_complete(self, index: int, workers: int) -> bool:
        """Every worker has reported from a later step, so step ``index`` has all its data."""
        return len(self.worker_step) >= workers and all(s > index for s in self.worker_step.values())


def ci_ranks(n: int, q: float, z: float = 1.96) -> tuple[int, int]:
    """Distribution-free CI ranks of the q-quantile: n·q ± z·sqrt(n·q·(1−q)) (normal approximation of
    Binomial(n, q)), clamped to the sample (so with few samples the upper end is the sample max)."""
    half = z * math.sqrt(n * q * (1 - q))
    return max(0, math.floor(n * q - half)), min(n - 1, math.ceil(n * q + half))


def quantile_ci(s: Sketch, q: float, z: float = 1.96) -> tuple[float, float] | None:
    """The order-statistic CI of the q-quantile mapped to values through the sketch; None below 2 samples."""
    if s.count < 2:
        return None
    lo, hi = ci_ranks(s.count, q, z)
    return s.value_at_rank(lo), s.value_at_rank(hi)


def summarize_sketch(s: Sketch, scale: float = 1000.0) -> dict:
    """count, mean, p50…p99.9, max and the p99 CI, in ms by default (``scale`` 1 for tokens/s)."""
    if s.count == 0:
        return {"count": 0}
    ci = quantile_ci(s, 0.99)
    r = 3
    return {"count": s.count, "mean": round(s.mean * scale, r), "p50": round(s.quantile(0.5) * scale, r),
            "p90": round(s.quantile(0.9) * scale, r), "p95": round(s.quantile(0.95) * scale, r),
            "p99": round(s.quantile(0.99) * scale, r), "p999": round(s.quantile(0.999) * scale, r),
            "max": round(s.max * scale, r),
            "p99_ci": [round(ci[0] * scale, r), round(ci[1] * scale, r)] if ci else None}
