"""The blocks of a step in summary.json (percentiles, throughput, the generator's health, SLO checks, the server, the
prefix cache, sessions, streams, answers, delivery), typed once: the master builds them, every reader decodes them.
Pure."""

from __future__ import annotations

from msgspec import UNSET, UnsetType, field

from harness.summary.view import View
from harness.summary.why import SplitPart

__all__ = ["SHARED_STAMP_LIMIT", "Answers", "CacheClient", "CacheServer", "CancelSlots", "ChangedAnswer", "Delivery",
           "FailedAnswer", "Generator", "Percentiles", "PrefixCache", "Server", "Sessions", "SloCheck", "Stream",
           "Throughput", "TurnBucket", "Verify"]


class Percentiles(View, frozen=True, kw_only=True, omit_defaults=True):
    """A metric's block (``metrics.aggregate.summarize_sketch``): only ``count`` when it had no data."""

    count: int
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    p999: float | None = None
    max: float | None = None
    p50_ci: tuple[float, float] | UnsetType | None = UNSET
    """The exact order-statistic 95% interval of the p50 (``metrics.aggregate.ci_ranks``); None: too few samples;
    absent from files older than it (as ``p95_ci``)."""
    p95_ci: tuple[float, float] | UnsetType | None = UNSET
    p99_ci: tuple[float, float] | UnsetType | None = UNSET
    """None: too few samples for the interval."""
    p99_slo: float | str | None = None
    """SLO latency metrics (version 2 on): the p99 with failures as misses, "inf" when it falls on one."""

class Throughput(View, frozen=True, kw_only=True):
    requests_per_s: float
    output_tokens_per_s: float
    input_tokens_per_s: float
    goodput_per_s: float


SHARED_STAMP_LIMIT = 0.01
"""A step where more than this share of successful requests had chunk times that may be late by more than 1 ms
(``RequestRecord.shared_stamps``) is flagged (``stamps_flagged``, and a console line). It stays judged: an error of
a few ms in a few % of requests moves ITL and fast TTFTs, not a knee's p99 (the loop lag's 10 ms limit is what
makes a step unreliable); but then its p99s may carry the loop lag (``Generator.tail_lag_ms``)."""


class Generator(View, frozen=True, kw_only=True):
    """The load generator's health in one step (``analysis.steps.step_health``). A field a later file added has the
    default an older file meant."""

    lag_p99_ms: float | None
    lag_max_ms: float | None
    cpu_max_pct: float
    reliable: bool
    """Loop-lag p99 (and, open loop, send-lag p99) within ``lag_limit_ms``: the generator did not add latency."""
    lag_limit_ms: float = 10.0
    """The limit it was judged by (``load.step.max_lag_ms``, 10 ms unless the scenario says)."""
    cpu_s: float | None = None
    """CPU seconds (user + system) of all workers while the step ran, warm-up included; None from workers that
    do not measure it."""
    output_tokens: int = 0
    """Output tokens streamed in the step, warm-up included: the same period as ``cpu_s``."""
    cpu_us_per_token: float | None = None
    """The client's cost: ``cpu_s`` / ``output_tokens``, in µs of worker CPU per streamed token."""
    gc_pause_max_ms: float | None = None
    """The longest garbage-collector pause of any worker in the step (it stalls every stream of that worker)."""
    runqueue_wait_s: float | None = None
    """Seconds the workers' loops were runnable but not running in the step (the kernel's run-queue wait), the period
    of ``cpu_s``: above ``cpu_s``, other processes held the cores; None where not measured (not Linux)."""
    shared_stamps: int = 0
    """Measured successful requests with chunk times that may be late by more than 1 ms: a receive that came late
    brought several chunks under one time (``RequestRecord.shared_stamps``)."""
    shared_stamp_share: float = 0.0
    """``shared_stamps`` over the step's measured successes."""
    stamps_flagged: bool = False
    """``shared_stamp_share`` above ``SHARED_STAMP_LIMIT``: said on the console."""
    kernel_stamps: bool = True
    """Every worker's receives were dated by the kernel (Linux's ``SO_TIMESTAMPNS``): a late read then moves no time,
    only a shared one does; false: some worker's were not, so a late read was a late time."""
    send_lag_p99_ms: float | None = None
    """Open loop: the p99 of how late the step's requests went out; past ``lag_limit_ms`` the step is not reliable
    (its latencies from the intended start carry the generator's lateness). None in a closed loop."""

    @property
    def tail_lag_ms(self) -> float:
        """The loop lag that may have moved this step's p99 latencies: its p99 when more than ``SHARED_STAMP_LIMIT``
        of the requests had chunk times a late receive may have moved, or when the receives were not the kernel's
        (then every late read is a late time); else 0: with kernel stamps, a request read late alone kept its
        times."""
        if self.lag_p99_ms is None:
            return 0.0
        return self.lag_p99_ms if self.shared_stamp_share > SHARED_STAMP_LIMIT or not self.kernel_stamps else 0.0


class SloCheck(View, frozen=True, kw_only=True):
    threshold: str
    observed: float | str | None
    passed: bool
    abort_on_fail: bool

class Server(View, frozen=True, kw_only=True):
    """The server's side of a step from its /metrics (``analysis.server.ServerStep.summary``)."""

    samples: int | UnsetType = UNSET
    waiting_max: float | None = None
    waiting_mean: float | None = None
    running_max: float | None = None
    running_mean: float | UnsetType | None = UNSET
    kv_cache_usage_max: float | None = None
    preemptions: float | None = None
    prefix_cache_queries: float | UnsetType = UNSET
    prefix_cache_hits: float | UnsetType = UNSET
    generation_tokens_per_s: float | UnsetType = UNSET
    """The server's own count of output tokens, per second over the step's measured scrapes."""
    prompt_tokens_per_s: float | UnsetType = UNSET
    stages: dict[str, SplitPart] | UnsetType = UNSET
    stages_note: str | UnsetType = UNSET

class CacheClient(View, frozen=True, kw_only=True, omit_defaults=True):
    source: str = ""
    requests: int | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    cached_share: float | UnsetType | None = UNSET
    by_turn: dict[str, float | None] | UnsetType = UNSET
    note: str | None = None

class CacheServer(View, frozen=True, kw_only=True, omit_defaults=True):
    source: str = ""
    queries: float | None = None
    hits: float | UnsetType | None = UNSET
    hit_rate: float | None = None
    note: str | None = None

class PrefixCache(View, frozen=True, kw_only=True, omit_defaults=True):
    """Client- and server-side prefix-cache hits, each with its source (``analysis.sessions.cache_view``)."""

    client: CacheClient
    server: CacheServer
    ceiling: dict[str, float | int | str] | None = None
    """``workload.trace``: ``share`` of its prompt tokens an unbounded cache could serve (``cached_tokens`` of
    ``prompt_tokens``)."""

class TurnBucket(View, frozen=True, kw_only=True):
    calls: int = 0
    ok: int = 0
    ttft_ms: Percentiles | None = None

class Sessions(View, frozen=True, kw_only=True):
    """Sessions that ended in the step (``analysis.sessions.session_view``)."""

    ended: int = 0
    failed: int = 0
    ended_full: int = 0
    compactions: int = 0
    turns_mean: float | None = None
    calls_mean: float | None = None
    duration_ms: Percentiles | None = None
    model_time_ms: Percentiles | None = None
    session_ttft_ms: Percentiles | None = None
    context_tokens: Percentiles | None = None
    agent_stall_s: float | None = None
    by_turn: dict[str, TurnBucket] = {}

class Stream(View, frozen=True, kw_only=True):
    """What the streams said about themselves (``analysis.steps``)."""

    exact_chunk_counts: int = 0
    itl_token_unknown: int = 0
    reasoning_tokens_counted: int = 0
    continuous_usage_refused: int | UnsetType = UNSET
    usage_below_chunks: int | UnsetType = UNSET
    """Answers whose usage counted fewer output tokens than their chunks; absent when none."""
    tokens_per_chunk: Percentiles | UnsetType = UNSET
    inputs_per_s: float | UnsetType = UNSET

class Answers(View, frozen=True, kw_only=True):
    """Whether the answers were as long as asked (``analysis.steps.answer_lengths``)."""

    length_asked: int
    short: int
    short_share: float
    short_by_finish_reason: dict[str, int] = {}
    tokens_got_over_asked: float | None = None

class Delivery(View, frozen=True, kw_only=True):
    """How the chunks came (``analysis.delivery``)."""

    streams: int
    receives: int
    chunks_per_receive: float
    on_time_chunks_per_receive: float
    held_streams: int = 0
    whole_streams: int = 0
    held_kb: int | None = None
    cause: str | None = None
    """"path" (held on the way), "server_writes" (several a write, on time) or None (one a receive)."""
    line: str = ""

class CancelSlots(View, frozen=True, kw_only=True):
    """Did the server free the slots of cancelled requests (``analysis.cancel_slots``)."""

    client_in_flight_mean: float
    server_in_system_mean: float
    freed: bool
    words: str

class ChangedAnswer(View, frozen=True, kw_only=True):
    prompt: int
    at: int
    reference: str
    answer: str

class FailedAnswer(View, frozen=True, kw_only=True):
    prompt: int
    failed: str
    answer: str

class Verify(View, frozen=True, kw_only=True):
    """Answers compared with their references and checked (``analysis.answers``): ``first_difference_median`` a
    word's index; ``changed_share`` None when only checked answers (the references) came in the step."""

    verified: int
    changed: int
    changed_share: float | None = None
    first_difference_median: int | None = None
    examples: list[ChangedAnswer] = field(default_factory=list)
    checked: int = 0
    failed: int = 0
    failed_share: float | None = None
    failed_by: dict[str, int] = field(default_factory=dict)
    check_examples: list[FailedAnswer] = field(default_factory=list)
