"""Per-step aggregates of request records: sketches per metric plus counters, mergeable across a fleet.

A ``Bucket`` holds one (step, phase) of one worker, or the fleet's merge of them. Workers fill a ``Recorder`` and
ship its ``drain()`` deltas (``metrics/protocol.py`` puts them on the wire); the master ``Fleet.merge``s them (both
in ``metrics/by_step.py``). Latency sketches hold successful requests only; failures are counted by class and enter
the SLO math as misses (``analysis``), never silently dropped. Cancelled requests (the user hung up:
``workload/cancel.py``) are counted apart, by reason, outside ``requests``: neither failed nor ok, they give only the
times the registry marks (``Metric.cancelled``: TTFT when the first token came before the hang-up). Values are
seconds (tokens/s for ``tokens_per_s``); summaries print milliseconds.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, fields
from operator import attrgetter, itemgetter

from harness.metrics.extract import add_request, add_session
from harness.metrics.quantiles import ci_min_samples, ci_ranks, quantile_ci, summarize_sketch
from harness.metrics.record import RequestRecord
from harness.metrics.row_columns import RowColumns
from harness.metrics.row_sample import RowSample
from harness.metrics.sessions import SessionRecord, SessionStats, turn_sketch
from harness.metrics.sketch import Sketch
from harness.metrics.vocabulary import METRICS, REQUEST_LATENCIES
from harness.metrics.wire import decode_sketch, encode_sketch

__all__ = ["ADAPTER_KEY", "ANSWER_AT_KEY", "ANSWER_CHECK_KEY", "ANSWER_EXAMPLES", "ANSWER_FAILED_KEY", "ANSWER_KEY",
           "BUSY_KEY", "CLASS_ANSWERS_KEY", "CLASS_CANCEL_KEY", "HELD_KEY", "LATENCIES", "REFERENCE_KEY", "SHAPE_KEY",
           "SHORT_KEY", "Bucket", "CacheCounts", "Delta", "ci_min_samples", "ci_ranks", "quantile_ci",
           "summarize_sketch"]

ADAPTER_KEY = "adapter:"
"""``Bucket.extra``'s key prefix for the requests each LoRA adapter got (``endpoint.adapters``)."""
BUSY_KEY = "busy_ms"
"""``Bucket.extra``'s sum of the requests' durations (ms; cancelled ones to their hang-up) when users hang up: the
client's mean concurrency by Little's law, against the server's gauges (``analysis/cancel_slots.py``)."""
CLASS_ANSWERS_KEY = "class_answers:"
"""``Bucket.extra``'s key prefix of a mix class's answers (``verify:``): ``class_answers:{class}:{verified, changed,
checked, failed}``."""
CLASS_CANCEL_KEY = "class_cancel:"
"""``Bucket.extra``'s key prefix, with a mix class's index, for the requests of that class a user hung up on."""
SHORT_KEY = "short:"
"""``Bucket.extra``'s key prefix, with the ``finish_reason`` ("none" without one), for short answers
(``RequestRecord.short_answer``): why they ended before their asked length."""
SHAPE_KEY = "warmup_shapes"
"""``Bucket.extra``'s count of shape warm-up requests (``load.warmup_shapes``), in the first step's warm-up."""
ANSWER_AT_KEY = "answer_at:"
"""``Bucket.extra``'s key prefix, with the word index, for changed answers (``verify:``) first differing there."""
ANSWER_KEY = "answer:"
"""``Bucket.failure_samples``' key prefix of a changed answer's example (``workload.verify.example``): samples of the
step, not of a failure class; ``analysis.answers`` reads them apart."""
ANSWER_CHECK_KEY = "answer:check:"
"""Of those, the key prefix of an answer that failed a check (``workload.verify.check_example``)."""
ANSWER_FAILED_KEY = "answer_failed:"
"""``Bucket.extra``'s key prefix, with the check's name (``workload.verify.CHECK_REASONS``), for failed checks."""
ANSWER_EXAMPLES = 3
REFERENCE_KEY = "reference:"
"""``Bucket.failure_samples``' key prefix of a reference answer's ``answers.jsonl`` line (``verify:``)."""
HELD_KEY = "held_kb:"
"""``Bucket.extra``'s key prefix, with the size in KiB (rounded) of the largest receive the path held of a stream
(``RequestRecord.held_bytes``): how much the path holds at a time."""
ROWS_CAP = 100_000
"""Request rows kept per bucket (a step's, on the master): ~16 MB (157 bytes a row by tracemalloc: 18 int64 columns
and the gaps, ``metrics.row_columns``; 360 as lists of ints); past it a uniform sample of half the cap to the cap
(``metrics.row_sample``)."""

LATENCIES = REQUEST_LATENCIES
"""The metrics that are durations (seconds in sketches, milliseconds in summaries); the registry says which."""

_WIRE_FIELDS = (("n", "requests"), ("ok", "ok"), ("good", "good"), ("fail", "failures"), ("out", "output_tokens"),
                ("in", "input_tokens"), ("counted", "counted_outputs"), ("perr", "prompt_error_sum"),
                ("pn", "prompt_error_n"), ("arr", "arrivals"), ("drop", "dropped"))
"""A bucket's counters on the wire, in wire order: (short key, field); the sketches go first, under "sk"."""
_COUNT_KEYS = tuple(key for key, name in _WIRE_FIELDS if name not in ("failures", "prompt_error_sum"))
_COUNTS = itemgetter(*_COUNT_KEYS)
_INT = frozenset((int,))
_NUMBER = frozenset((int, float))


@dataclass
class CacheCounts:
    """The prefix cache as the client sees it: the successful requests whose usage reported cached tokens, their
    prompt tokens, those served from the server's cache, and how many of them reported it only in llama.cpp's
    ``timings.cache_n``."""

    requests: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    from_timings: int = 0

    def add(self, prompt_tokens: int, cached_tokens: int, from_timings: bool) -> None:
        self.requests += 1
        self.prompt_tokens += prompt_tokens
        self.cached_tokens += cached_tokens
        self.from_timings += from_timings

    def merge(self, other: CacheCounts) -> None:
        self.requests += other.requests
        self.prompt_tokens += other.prompt_tokens
        self.cached_tokens += other.cached_tokens
        self.from_timings += other.from_timings

    def to_wire(self) -> list[int]:
        return [self.requests, self.prompt_tokens, self.cached_tokens, self.from_timings]

    @classmethod
    def from_wire(cls, counts: list) -> CacheCounts:
        if len(counts) != 4:
            raise ValueError("cache has 4 counters")
        return cls(*(int(x) for x in counts))


@dataclass
class Bucket:
    sketches: dict[str, Sketch] = field(default_factory=dict)
    """Per metric of the registry (``metrics.vocabulary``), by its bucket key; TTFT per turn bucket too."""
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
    cancelled: dict[str, int] = field(default_factory=dict)
    """Requests the user hung up on, by reason ("cancel", "patience"): not in ``requests`` (nor failed, nor ok)."""
    cancelled_tokens: int = 0
    """Output tokens the cancelled requests had received before the hang-up."""
    failure_samples: dict[str, str] = field(default_factory=dict)
    """One detail per failure class (the first seen), for the console and the summary to explain failures."""
    cache: CacheCounts = field(default_factory=CacheCounts)
    sessions: SessionStats | None = None
    """Session calls and ended sessions (``metrics.sessions``); None when the workload has no sessions."""
    new_connections: int = 0
    """Requests (failed ones included) that opened a connection inside their own time (``RequestRecord.
    new_connection``): the first on a connection, or the server had closed the kept-alive one."""
    rows: RowSample = field(default_factory=lambda: RowSample(ROWS_CAP))
    """Measured requests as compact rows (``metrics.rows``), kept by column (``metrics.row_columns``), for tail
    attribution: at most ``ROWS_CAP`` per bucket, a uniform sample beyond (``metrics.row_sample``; ``rows_seen``
    counts them all)."""
    rows_seen: int = 0
    extra: dict[str, int] = field(default_factory=dict)
    """The registry's counters that apply to some endpoints only, by bucket key, in the order first counted (the
    wire's): ``exact_chunks``, ``itl_token_unknown``, ``reasoning_counted``, ``inputs``,
    ``continuous_usage_refused``."""

    def _sk(self, name: str) -> Sketch:
        s = self.sketches.get(name)
        if s is None:
            s = self.sketches[name] = Sketch()
        return s

    def add(self, rec: RequestRecord, good: Callable[[RequestRecord], bool] | None = None) -> None:
        """One request: each registry metric's samples into its sketch (latencies of successes only), counters."""
        if rec.cancelled is not None:
            self.cancelled[rec.cancelled] = self.cancelled.get(rec.cancelled, 0) + 1
            self.cancelled_tokens += rec.output_tokens or 0
            add_request(self._sk, rec)
            return
        self.requests += 1
        if rec.turn_bucket is not None:
            if self.sessions is None:
                self.sessions = SessionStats()
            self.sessions.add_call(rec.turn_bucket, rec.ok, rec.prompt_tokens, rec.cached_tokens, rec.ttft_s,
                                   rec.e2e_s, rec.output_tokens)
            if rec.ok and rec.ttft_s is not None:
                self._sk(turn_sketch(rec.turn_bucket)).add(rec.ttft_s)
        self.new_connections += rec.new_connection
        add_request(self._sk, rec)
        if not rec.ok:
            # a failed record's error is set
            self.failures[rec.error] = self.failures.get(rec.error, 0) + 1  # type: ignore[index,arg-type]
            if rec.error_detail and rec.error not in self.failure_samples:
                # a failed record's error is set
                self.failure_samples[rec.error] = rec.error_detail[:300]  # type: ignore[index]
            return
        self.ok += 1
        if good is None or good(rec):
            self.good += 1
        extra = self.extra
        for key, n in zip(_EXTRA_KEYS, _EXTRA_GET(rec), strict=False):
            if n:
                extra[key] = extra.get(key, 0) + n
        if rec.short_answer:
            key = SHORT_KEY + (rec.finish_reason or "none")
            extra[key] = extra.get(key, 0) + 1
        if rec.held:
            key = HELD_KEY + str(round(rec.held_bytes / 1024))
            extra[key] = extra.get(key, 0) + 1
        if rec.answer_check is not None or rec.answer_checked:
            self._answer(rec)
        if rec.output_tokens:
            self.output_tokens += rec.output_tokens
            self.counted_outputs += rec.output_tokens_counted
        prompt = rec.prompt_tokens
        if prompt:
            self.input_tokens += prompt
            if rec.cached_tokens is not None:
                self.cache.add(prompt, rec.cached_tokens, rec.cached_source == "timings.cache_n")
            target = rec.prompt_tokens_target
            if target:
                self.prompt_error_sum += abs(prompt - target) / target
                self.prompt_error_n += 1

    def _answer(self, rec: RequestRecord) -> None:
        """A verify request's answer (``verify:``): changed, failed a check, its class's counts, a reference."""
        if rec.answer_changed_at is not None:
            self._changed(rec.answer_changed_at, rec.answer_example)
        if rec.answer_failed is not None:
            self._failed(rec.answer_failed, rec.answer_failed_example)
        if rec.class_index is not None and (rec.verified or rec.answer_checked):  # a mix: its class's too
            for what, counts in (("verified", rec.verified), ("changed", rec.answer_changed),
                                 ("checked", rec.answer_checked), ("failed", rec.check_failed)):
                if counts:
                    self._count(f"{CLASS_ANSWERS_KEY}{rec.class_index}:{what}")
        if rec.answer_reference is not None:  # keyed by its text: the same reference on two workers is one line
            key = hashlib.blake2b(rec.answer_reference.encode(), digest_size=8).hexdigest()
            self.failure_samples[REFERENCE_KEY + key] = rec.answer_reference

    def _changed(self, at: int, example: str | None) -> None:
        """A changed answer (``verify:``): where it first differs, and the first ``ANSWER_EXAMPLES`` of them."""
        self._count(ANSWER_AT_KEY + str(at))
        self._example(ANSWER_KEY, example)

    def _failed(self, reason: str, example: str | None) -> None:
        """An answer that failed a check (``verify.check``): which, and the first ``ANSWER_EXAMPLES`` of them."""
        self._count(ANSWER_FAILED_KEY + reason)
        self._example(ANSWER_CHECK_KEY, example)

    def _example(self, prefix: str, example: str | None) -> None:
        shown = sum(1 for k in self.failure_samples if k.startswith(prefix) and k[len(prefix):].isdigit())
        if example and shown < ANSWER_EXAMPLES:
            self.failure_samples[f"{prefix}{shown}"] = example

    def _count(self, key: str, n: int = 1) -> None:
        self.extra[key] = self.extra.get(key, 0) + n

    def add_session(self, rec: SessionRecord) -> None:
        """One ended session: its counts, and its duration, model time, TTFT p99 and final context as sketches."""
        if self.sessions is None:
            self.sessions = SessionStats()
        self.sessions.add_session(rec)
        add_session(self._sk, rec)

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
        for k, v in other.cancelled.items():
            self.cancelled[k] = self.cancelled.get(k, 0) + v
        self.cancelled_tokens += other.cancelled_tokens
        self.output_tokens += other.output_tokens
        self.input_tokens += other.input_tokens
        self.counted_outputs += other.counted_outputs
        self.prompt_error_sum += other.prompt_error_sum
        self.prompt_error_n += other.prompt_error_n
        self.arrivals += other.arrivals
        self.dropped += other.dropped
        self.new_connections += other.new_connections
        self.cache.merge(other.cache)
        for k, v in other.extra.items():
            self.extra[k] = self.extra.get(k, 0) + v
        if other.sessions is not None:
            if self.sessions is None:
                self.sessions = SessionStats()
            self.sessions.merge(other.sessions)
        if rows and other.rows:
            self.add_rows(other.rows, other.rows_seen)

    def merge_sketches(self, other: Bucket, names: Collection[str]) -> None:
        """Add only ``other``'s sketches of these ``names`` (no counter, no row)."""
        for name in names:
            s = other.sketches.get(name)
            if s is not None:
                self._sk(name).merge(s)

    def add_row(self, row: list) -> None:
        """One request's row (``metrics.rows.encode_row``)."""
        self.rows.append(row)
        self.rows_seen += 1

    def add_rows(self, rows: RowColumns | RowSample, seen: int, *, take: bool = False) -> None:
        """``rows``, a uniform sample of ``seen`` requests (another bucket's, or a report's off the wire: ``take``
        keeps its columns without a copy)."""
        if isinstance(rows, RowSample):
            for block, rate in rows.blocks:
                self.rows.add(block, rate)
        else:
            self.rows.add(rows, len(rows) / seen if seen > len(rows) else 1.0, take=take)
        self.rows_seen += seen

    def to_wire(self) -> dict:
        out: dict = {"sk": {k: encode_sketch(s) for k, s in self.sketches.items()}}
        out.update((key, getattr(self, name)) for key, name in _WIRE_FIELDS)
        out["fail"] = dict(self.failures)  # a copy: the payload must not change with the bucket
        if self.failure_samples:  # only then: payloads without failure details keep their bytes
            out["why"] = dict(self.failure_samples)
        if self.cache.requests:  # likewise for the prefix cache and sessions
            out["cache"] = self.cache.to_wire()
        if self.sessions is not None:
            out["sess"] = self.sessions.to_wire()
        if self.extra:
            out["x"] = dict(self.extra)
        if self.new_connections:
            out["conn"] = self.new_connections
        if self.cancelled:  # only then, like every key after the first landing's: older payloads keep their bytes
            out["cxl"] = dict(self.cancelled)
            out["cxlt"] = self.cancelled_tokens
        if self.rows:
            out["rc"] = self.rows.joined().wire()
            if self.rows_seen != len(self.rows):
                out["rows_seen"] = self.rows_seen
        return out

    @classmethod
    def from_wire(cls, d: dict) -> Bucket:
        """A bucket off the wire: ValueError (or KeyError, TypeError) for what cannot be merged, before any of it is."""
        _check_counts(d)
        fields = {name: d[key] for key, name in _WIRE_FIELDS}
        fields["failures"] = dict(fields["failures"])
        cache = CacheCounts.from_wire(d["cache"]) if "cache" in d else CacheCounts()
        if "rc" in d:
            rows = RowColumns.from_wire(d["rc"])
        else:  # protocol version 1: rows by row
            rows = RowColumns()
            rows.extend_rows(d.get("rows") or [])
        out = cls(sketches={k: decode_sketch(v) for k, v in d["sk"].items()},
                   failure_samples={str(k): str(v) for k, v in d.get("why", {}).items()}, cache=cache,
                   sessions=SessionStats.from_wire(d["sess"]) if "sess" in d else None,
                   extra={str(k): int(v) for k, v in d.get("x", {}).items()}, new_connections=int(d.get("conn", 0)),
                   cancelled={str(k): int(v) for k, v in d.get("cxl", {}).items()},
                   cancelled_tokens=int(d.get("cxlt", 0)),
                   **fields)
        out.add_rows(rows, int(d.get("rows_seen", len(rows))), take=True)
        return out


def _check_counts(d: dict) -> None:
    """The counters are ints >= 0 (a failure class's count too) and the prompt error a number >= 0: a string there
    raised in the master's merge, halfway through adding the report (in C-level passes, the usual case)."""
    counts, fail, perr = _COUNTS(d), d["fail"], d["perr"]
    if (_INT.issuperset(map(type, counts)) and min(counts) >= 0 and type(fail) is dict
            and _INT.issuperset(map(type, fail.values())) and min(fail.values(), default=0) >= 0
            and type(perr) in _NUMBER and 0 <= perr < math.inf):
        return
    bad = [f"{key!r} must be an int >= 0, got {v!r:.40}" for key, v in zip(_COUNT_KEYS, counts, strict=True)
           if type(v) is not int or v < 0]
    if type(fail) is not dict:
        bad.append(f"'fail' must be a dict of failure class to count, got {fail!r:.40}")
    else:
        bad += [f"'fail'[{k!r:.40}] must be an int >= 0, got {v!r:.40}" for k, v in fail.items()
                if type(v) is not int or v < 0]
    if not (type(perr) in _NUMBER and 0 <= perr < math.inf):
        bad.append(f"'perr' must be a finite number >= 0, got {perr!r:.40}")
    raise ValueError("bucket counters: " + "; ".join(bad))


_COUNTED = {f.name for f in fields(Bucket)}
_EXTRA = [m for m in METRICS if m.kind == "counter" and m.of == "ok" and m.source and m.bucket_key not in _COUNTED]
_EXTRA_KEYS = tuple(m.bucket_key for m in _EXTRA)
_EXTRA_GET = attrgetter(*(m.source for m in _EXTRA))  # type: ignore[arg-type]  # _EXTRA is filtered on source
"""The registry's per-request counters kept in ``Bucket.extra`` (the others are its fields)."""

Delta = tuple[int, str, Bucket]
"""One (step, phase) bucket of new data from one worker."""
