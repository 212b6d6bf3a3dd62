"""Why a step is slow, typed: the tail's attributions and the server's pauses, where TTFT goes, the requests over time
(summary.json's ``steps[].tail``, ``ttft_split``, ``timeline``). Pure."""

from __future__ import annotations

from typing import Any

from msgspec import UNSET, UnsetType

from harness.summary.view import View

__all__ = ["Attribution", "PauseSeen", "Pauses", "SplitPart", "Tail", "Timeline", "TtftClient", "TtftServer",
           "TtftSplit"]


class Attribution(View, frozen=True, kw_only=True):
    """Why one quantile's tail of one metric is slow (``analysis.why.attribute.TailAttribution``)."""

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
    """The step's server-wide pauses (``analysis.why.pauses.StepPauses``)."""

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
    """Where TTFT goes (``analysis.why.decompose.ttft_split``)."""

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
