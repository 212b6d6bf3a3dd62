"""summary.json as typed values: the read side of ``results.py``, for every reader of a run's summary. Pure.

``results.py`` writes the file; these msgspec Structs read all of it back, for the versions kneecap reads
(``kneecap.summary/1``, ``/2``, ``/3``, docs/results.md); ``report/validate.py`` checks a file against them::

    summary = load_summary(data, "summary.json")   # every problem with its key path, or the Summary
    summary.knee.found, summary.steps[0].latency_ms["ttft"].p99, summary.steps[0].level

Keys a newer file adds are ignored. A key a later version added and kneecap always writes since has a plain
default, what an older file meant (``fleet_changed=False``); one written only when it applies (``server``,
``cost``, the open loop's ``arrivals_per_s``) is ``UNSET`` when absent, so a file encodes back to its own keys.
The load level is ``users`` (closed loop) or ``rate_rps`` (open loop): ``Step.level``, ``Knee.level``.
``Meta(extra=...)`` marks the level keys (``level``) and a key required from a version on (``since``).

Prose at the edge: ``cost.line`` is still written (older readers print it) but readers say
``Summary.cost_line``, rendered from the figures by the function that wrote it. ``knee.reason`` stays the
run's prose: its sentence cites figures the file does not keep (the elasticities between the judged steps, the
server's and the cache's before/after, the tail's cause), so it cannot be said again from the fields.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import UNSET, Meta, Struct, UnsetType

from harness.analysis.pricing import render_cost_line
from harness.analysis.results import level_unit

__all__ = ["Attribution", "CacheClient", "CacheServer", "Clock", "FleetEvent", "Generator", "Influx", "Knee",
           "Percentiles", "PrefixCache", "RunCost", "Server", "Sessions", "Slo", "SloCheck", "SplitPart", "Step",
           "StepCost", "Stream", "Summary", "Tail", "Throughput", "Tokens", "TtftClient", "TtftServer", "TtftSplit",
           "TurnBucket"]

_CLOSED = Meta(extra={"level": "closed"})
_OPEN = Meta(extra={"level": "open"})


class _View(Struct, kw_only=True, frozen=True):
    """A block of summary.json: read-only, unknown keys ignored (each subclass is keyword-only too)."""


class Percentiles(_View, kw_only=True, omit_defaults=True):
    """A metric's block (``metrics.aggregate.summarize_sketch``): only ``count`` when it had no data."""

    count: int
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    p999: float | None = None
    max: float | None = None
    p99_ci: tuple[float, float] | UnsetType | None = UNSET
    """None: too few samples for the interval."""
    p99_slo: float | str | None = None
    """SLO latency metrics (version 2 on): the p99 with failures as misses, "inf" when it falls on one."""


class Throughput(_View, kw_only=True):
    requests_per_s: float
    output_tokens_per_s: float
    input_tokens_per_s: float
    goodput_per_s: float


class Generator(_View, kw_only=True):
    lag_p99_ms: float | None
    lag_max_ms: float | None
    cpu_max_pct: float
    reliable: bool
    cpu_s: float | UnsetType | None = UNSET  # absent before the client's cost; None: workers did not measure it
    output_tokens: int | UnsetType = UNSET
    cpu_us_per_token: float | UnsetType | None = UNSET
    gc_pause_max_ms: float | UnsetType | None = UNSET
    shared_stamps: int | UnsetType = UNSET  # these three: absent from files older than shared stamps
    shared_stamp_share: float | UnsetType = UNSET
    stamps_flagged: bool | UnsetType = UNSET


class SloCheck(_View, kw_only=True):
    threshold: str
    observed: float | str | None
    passed: bool
    abort_on_fail: bool


class Tokens(_View, kw_only=True):
    input: int
    cached_input: int
    output: int


class StepCost(_View, kw_only=True):
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


class RunCost(_View, kw_only=True):
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


class Server(_View, kw_only=True):
    """The server's side of a step from its /metrics (``analysis.server.ServerStep.summary``)."""

    samples: int | UnsetType = UNSET
    waiting_max: float | None = None
    waiting_mean: float | None = None
    running_max: float | None = None
    kv_cache_usage_max: float | None = None
    preemptions: float | None = None
    prefix_cache_queries: float | UnsetType = UNSET
    prefix_cache_hits: float | UnsetType = UNSET
    stages: dict[str, SplitPart] | UnsetType = UNSET
    stages_note: str | UnsetType = UNSET


class CacheClient(_View, kw_only=True, omit_defaults=True):
    source: str = ""
    requests: int | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    cached_share: float | UnsetType | None = UNSET
    by_turn: dict[str, float | None] | UnsetType = UNSET
    note: str | None = None


class CacheServer(_View, kw_only=True, omit_defaults=True):
    source: str = ""
    queries: float | None = None
    hits: float | UnsetType | None = UNSET
    hit_rate: float | None = None
    note: str | None = None


class PrefixCache(_View, kw_only=True):
    """Client- and server-side prefix-cache hits, each with its source (``analysis.sessions.cache_view``)."""

    client: CacheClient
    server: CacheServer


class TurnBucket(_View, kw_only=True):
    calls: int = 0
    ok: int = 0
    ttft_ms: Percentiles | None = None


class Sessions(_View, kw_only=True):
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


class Stream(_View, kw_only=True):
    """What the streams said about themselves (``analysis.steps``)."""

    exact_chunk_counts: int = 0
    itl_token_unknown: int = 0
    reasoning_tokens_counted: int = 0
    continuous_usage_refused: int | UnsetType = UNSET
    tokens_per_chunk: Percentiles | UnsetType = UNSET
    inputs_per_s: float | UnsetType = UNSET


class Attribution(_View, kw_only=True):
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


class Tail(_View, kw_only=True):
    attributions: list[Attribution]


class SplitPart(_View, kw_only=True, omit_defaults=True):
    """A part of TTFT: from the request rows (``n``, exact quantiles) or a server histogram's step delta
    (``count``, quantiles as [estimate, low, high] ms)."""

    n: int | None = None
    count: int | None = None
    mean_ms: float | None = None
    p50_ms: float | list[float | None] | None = None
    p95_ms: float | list[float | None] | None = None

    @property
    def p50(self) -> float | None:
        """The p50 in ms; a histogram's estimate."""
        return self.p50_ms[0] if isinstance(self.p50_ms, list) else self.p50_ms


class TtftClient(_View, kw_only=True):
    ttft: SplitPart | None = None
    headers: SplitPart | None = None
    headers_to_first_token: SplitPart | None = None
    connect: SplitPart | None = None
    new_connection_share: float | None = None


class TtftServer(_View, kw_only=True, omit_defaults=True):
    """Where the server says TTFT went; a part it does not report is the string ``decompose.UNKNOWN``."""

    source: str = ""
    ttft: SplitPart | str | None = None
    queue: SplitPart | str | None = None
    prefill: SplitPart | str | None = None
    network_client: SplitPart | None = None
    network_client_queue: SplitPart | None = None


class TtftSplit(_View, kw_only=True):
    """Where TTFT goes (``analysis.decompose.ttft_split``)."""

    client: TtftClient
    server: TtftServer


class Step(_View, kw_only=True):
    """One entry of ``steps[]`` (``results.StepResult``)."""

    index: int
    users: Annotated[float | UnsetType, _CLOSED] = UNSET
    rate_rps: Annotated[float | UnsetType, _OPEN] = UNSET
    duration_s: float
    warmup_s: float
    requests: int
    ok: int
    failures: dict[str, int]
    failure_samples: dict[str, str] = {}
    warmup_requests: int
    arrivals_per_s: float | UnsetType | None = UNSET
    dropped_arrivals: int | UnsetType | None = UNSET
    throughput: Throughput
    latency_ms: dict[str, Percentiles]
    tokens_per_s_per_user: Percentiles
    output_tokens_counted: int
    prompt_length_error: float | None
    generator: Generator
    fleet_changed: bool = False
    workers_lost: list[str] = []
    workers_joined: list[str] = []
    complete: bool
    stationary: bool | None
    slo_passed: bool | None
    slo: list[SloCheck]
    server: Server | UnsetType = UNSET
    prefix_cache: PrefixCache | UnsetType = UNSET
    sessions: Sessions | UnsetType = UNSET
    stream: Stream | UnsetType = UNSET
    new_connections: int | UnsetType = UNSET
    new_connection_share: float | UnsetType | None = UNSET
    """Absent from files older than it; None without requests."""
    tail: Tail | UnsetType = UNSET
    ttft_split: TtftSplit | UnsetType = UNSET
    cost: StepCost | UnsetType = UNSET

    @property
    def level(self) -> float:
        """The step's load: users (closed loop) or requests/s (open loop)."""
        return self.users if self.rate_rps is UNSET else self.rate_rps  # type: ignore[return-value]


class Knee(_View, kw_only=True):
    found: bool
    confirmed: bool
    step_index: int | None
    users: Annotated[float | UnsetType | None, _CLOSED] = UNSET
    rate_rps: Annotated[float | UnsetType | None, _OPEN] = UNSET
    metric: str
    tail: Annotated[str, Meta(extra={"since": 2})] = "p99"
    """Which p99 the knee judged: ``p99_slo`` from version 2 on (version 1 files judged the plain p99)."""
    p99_before_ms: float | None
    p99_after_ms: float | None
    throughput_before: float | None
    throughput_after: float | None
    confidence: str | None
    reason: str
    """The knee finder's reason and why (server, prefix cache, tail): prose, as the run said it."""

    @property
    def level(self) -> float | None:
        """The knee's load (None when not found)."""
        level = self.users if self.rate_rps is UNSET else self.rate_rps
        return None if level is UNSET else level  # type: ignore[return-value]


class Slo(_View, kw_only=True):
    thresholds: list[str]
    passed: bool | None
    max_load_within_slo: float | None


class FleetEvent(_View, kw_only=True):
    kind: Literal["lost", "joined"]
    worker: str
    at: float
    steps: list[int]


class Clock(_View, kw_only=True):
    """A worker's wall clock against the master's (``metrics.clocks``)."""

    offset_ms: float | None
    bound_ms: float | None
    rtt_ms: float | None
    samples: int
    drift_ms: float | UnsetType | None = UNSET


class Influx(_View, kw_only=True):
    """The InfluxDB sink's account (``sinks.influx``)."""

    url: str | UnsetType = UNSET
    bucket: str | UnsetType = UNSET
    written: int = 0
    unwritten: int = 0
    spool_file: str | None = None
    last_error: str | None = None


class Summary(_View, kw_only=True):
    """A whole summary.json (module docstring)."""

    schema: str
    run_id: str
    scenario: str
    host: str
    model: str
    started_at: float
    ended_at: float
    mode: Literal["closed", "open"]
    stop_reason: str | None
    workers: int
    steps: list[Step]
    knee: Knee
    slo: Slo
    exit_code: int
    degraded: bool = False  # a worker was lost (version 2 on; early version 2 files lack it, and fleet_events)
    fleet_events: list[FleetEvent] = []
    influx: Influx | UnsetType = UNSET
    merge_errors: int | UnsetType = UNSET
    clocks: dict[str, Clock] | UnsetType = UNSET
    """Fleets only, with ``clock_warnings``: each worker's clock."""
    clock_warnings: list[str] | UnsetType = UNSET
    cost: RunCost | UnsetType = UNSET

    @property
    def cost_line(self) -> str:
        """The verdict's cost line, from the figures; "" without a ``cost:`` block."""
        return "" if self.cost is UNSET else self.cost.render(self.mode)
