"""The blocks of summary.json a step or the run is made of (percentiles, throughput, cost, server, cache, sessions,
tail, TTFT split), typed: ``summary_model.py`` puts them together and documents the whole. Pure."""

from __future__ import annotations

from typing import Any

from msgspec import UNSET, Struct, UnsetType

from harness.analysis.pricing import render_cost_line
from harness.analysis.results import level_unit

__all__ = ["Answers", "Attribution", "CacheClient", "CacheServer", "Delivery", "Generator", "PauseSeen", "Pauses",
           "Percentiles", "PrefixCache", "RunCost", "Server", "Sessions", "SloCheck", "SplitPart", "StepCost",
           "Stream", "Tail", "Throughput", "Timeline", "Tokens", "TtftClient", "TtftServer", "TtftSplit", "TurnBucket",
           "View"]


class View(Struct, kw_only=True, frozen=True):
    """A block of summary.json: read-only, unknown keys ignored (each subclass is keyword-only too)."""


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


class Generator(View, frozen=True, kw_only=True):
    lag_p99_ms: float | None
    lag_max_ms: float | None
    cpu_max_pct: float
    reliable: bool
    lag_limit_ms: float | UnsetType | None = UNSET  # absent from files older than load.step.max_lag_ms
    cpu_s: float | UnsetType | None = UNSET  # absent before the client's cost; None: workers did not measure it
    output_tokens: int | UnsetType = UNSET
    cpu_us_per_token: float | UnsetType | None = UNSET
    gc_pause_max_ms: float | UnsetType | None = UNSET
    runqueue_wait_s: float | UnsetType | None = UNSET  # absent from older files; None: not measured (not Linux)
    shared_stamps: int | UnsetType = UNSET  # these three: absent from files older than shared stamps
    shared_stamp_share: float | UnsetType = UNSET
    stamps_flagged: bool | UnsetType = UNSET
    kernel_stamps: bool | UnsetType = UNSET  # absent from older files; false: some worker's receives were not
    # dated by the kernel (not Linux), so a late read was a late time
    send_lag_p99_ms: float | UnsetType | None = UNSET  # absent from older files; None: a closed loop


class SloCheck(View, frozen=True, kw_only=True):
    threshold: str
    observed: float | str | None
    passed: bool
    abort_on_fail: bool


class Tokens(View, frozen=True, kw_only=True):
    input: int
    cached_input: int
    output: int


class StepCost(View, frozen=True, kw_only=True):
    """A step's cost figures (``analysis.pricing.StepCost``); in ``RunCost.at`` with ``index`` and ``level``."""

    currency: str
    tokens: Tokens
    test_cost: float | None
    flat_per_mtok: float | None
    metered_per_mtok: float | None
    metered_blended_per_mtok: float | None
    break_even_tokens_per_month: float | None
    capacity_tokens_per_month: float | None
    floor: str
    floor_held: bool | None
    notes: list[str]
    index: int | UnsetType = UNSET
    level: float | UnsetType = UNSET


class RunCost(View, frozen=True, kw_only=True):
    currency: str
    hours_per_month: float
    prices: dict[str, Any]
    tokens: Tokens
    test_cost: float | None
    at: dict[str, StepCost]
    """Basis (``max_load_within_slo``, ``knee``, ``largest_load``) -> that step's figures, the reference first."""
    reference: str | None
    note: str
    line: str
    """The verdict's line as the run said it; kept for older readers, ``render`` says it again from the fields."""

    def render(self, mode: str) -> str:
        """The verdict's cost line from the figures (``analysis.pricing.cost_line``); ``mode``: the summary's."""
        return render_cost_line(currency=self.currency, test_cost=self.test_cost, at=self.at, note=self.note,
                                unit=level_unit(mode))


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


class Attribution(View, frozen=True, kw_only=True):
    """Why one quantile's tail of one metric is slow (``analysis.tail.TailAttribution``)."""

    metric: str = ""
    quantile: float = 0.0
    threshold_s: float | None = None
    n: int = 0
    n_tail: int = 0
    n_rest: int = 0
    verdict: str = ""
    causes: list[str] = []
    line: str = ""
    correction: str = ""
    sampled: str | None = None
    tests: list[dict[str, Any]] = []
    shares: list[dict[str, Any]] | UnsetType = UNSET  # absent from files older than the mixture's shares


class PauseSeen(View, frozen=True, kw_only=True):
    start_s: float = 0.0
    length_ms: float = 0.0
    streams: int = 0
    decoding: int = 0
    workers: list[Any] = []


class Pauses(View, frozen=True, kw_only=True):
    """The step's server-wide pauses (``analysis.pauses.StepPauses``)."""

    count: int = 0
    min_ms: float = 0.0
    workers: int = 0
    median_ms: float | None = None
    max_ms: float | None = None
    period_s: float | None = None
    period_sd_s: float | None = None
    recurring: int | None = None
    """How many of the pauses recur at ``period_s`` (all but the blips beside them)."""
    recurring_median_ms: float | None = None
    words: str = ""
    long_prefills: int = 0
    long_prefill_median_ms: float | None = None
    listed: list[PauseSeen] = []


class Tail(View, frozen=True, kw_only=True):
    attributions: list[Attribution]
    pauses: Pauses | UnsetType = UNSET


class SplitPart(View, frozen=True, kw_only=True, omit_defaults=True):
    """A part of TTFT: from the request rows (``n``, exact quantiles) or a server histogram's step delta
    (``count``, quantiles as [estimate, low, high] ms)."""

    n: int | None = None
    count: int | None = None
    mean_ms: float | None = None
    p50_ms: float | list[float | None] | None = None
    p95_ms: float | list[float | None] | None = None
    note: str | None = None
    """Why the figure is not a part of this step's TTFT (``decompose.NEGATIVE``)."""

    @property
    def p50(self) -> float | None:
        """The p50 in ms; a histogram's estimate."""
        return self.p50_ms[0] if isinstance(self.p50_ms, list) else self.p50_ms


class TtftClient(View, frozen=True, kw_only=True):
    ttft: SplitPart | None = None
    headers: SplitPart | None = None
    headers_to_first_token: SplitPart | None = None
    send: SplitPart | UnsetType | None = UNSET  # these two: absent from files older than the client's parts
    loop_lag: SplitPart | UnsetType | None = UNSET
    connect: SplitPart | None = None
    new_connection_share: float | None = None


class TtftServer(View, frozen=True, kw_only=True, omit_defaults=True):
    """Where the server says TTFT went; a part it does not report is the string ``decompose.UNKNOWN``."""

    source: str = ""
    ttft: SplitPart | str | None = None
    queue: SplitPart | str | None = None
    prefill: SplitPart | str | None = None
    network_client: SplitPart | None = None
    network_client_queue: SplitPart | None = None


class TtftSplit(View, frozen=True, kw_only=True):
    """Where TTFT goes (``analysis.decompose.ttft_split``)."""

    client: TtftClient
    server: TtftServer


class Timeline(View, frozen=True, kw_only=True):
    """A step's requests over time (``analysis.timeline``): ``rows`` [send_s, ttft_ms, e2e_ms, class, failed], every
    k-th by send when ``drawn`` < ``requests``; ``in_flight`` every ``bin_s`` from the step's start."""

    requests: int
    drawn: int
    end_s: float
    rows: list[tuple[float, float | None, float | None, int | None, int]]
    bin_s: float
    in_flight: list[int]


class CancelSlots(View, frozen=True, kw_only=True):
    """Did the server free the slots of cancelled requests (``analysis.cancel_slots``)."""

    client_in_flight_mean: float
    server_in_system_mean: float
    freed: bool
    words: str


class ClassSpeed(View, frozen=True, kw_only=True):
    count: int
    p50: float
    p5: float
    p1: float


class ClassCost(View, frozen=True, kw_only=True):
    """A class's cost (``analysis.class_rows``): its share of the output tokens; metered, what its requests cost."""

    currency: str
    output_share: float | None = None
    test_cost: float | None = None
    per_request: float | None = None


class TrafficClassStep(View, frozen=True, kw_only=True):
    """One class of a mix in one step (``analysis.classes.ClassStep``)."""

    name: str
    weight_share: float | None
    requests: int
    share: float | None
    failed: int
    error_rate: float | None
    latency_ms: dict[str, Percentiles] = {}
    tokens_per_s_per_user: ClassSpeed | None = None
    output_tokens: int = 0
    short_answers: int = 0
    short_answer_share: float | None = None
    slo: list[SloCheck] = []
    slo_passed: bool | None = None
    sampled: str | None = None
    cancelled: int = 0
    cancelled_share: float | None = None
    tail: Tail | None = None
    ttft_split: TtftSplit | None = None
    tokens: dict[str, int] | None = None
    cost: ClassCost | None = None
    users: int | None = None
    answers: dict[str, float | None] | None = None
