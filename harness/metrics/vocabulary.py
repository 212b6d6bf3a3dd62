"""Every metric kneecap measures, written once: name, unit, kind, where it comes from, who may judge it. Pure.

Like k6's metric registry: one ``Metric`` per name, and everything else reads it — ``Bucket.add`` takes each
sketch's samples from the record attribute named here, the SLO grammar and the knee accept the metrics marked
here, the InfluxDB schema lists the fields named here, and docs/metrics.md's registry table is ``markdown_table()``
(``python -m harness.metrics.vocabulary`` prints it; ``tests/test_docs.py`` checks the page holds it).
Definitions in words: docs/metrics.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["CI_PERCENTILES", "CLASS_KNEE_METRICS", "CLASS_LATENCIES", "CLASS_SLO_METRICS", "GATE_DEFAULT",
           "GATE_LATENCIES", "HEADLINE", "KNEE_METRICS", "LIVE", "METRIC", "METRICS", "PERCENTILES",
           "QUANTILE_OF", "REQUEST_LATENCIES", "SLO_METRICS", "WHOLE_ANSWER_SLO_METRICS", "Metric", "influx_fields",
           "markdown_table"]

Kind = Literal["latency", "distribution", "counter", "rate"]
Of = Literal["ok", "all", "session", "worker"]


@dataclass(frozen=True, slots=True)
class Metric:
    name: str
    """What users write and read: the SLO key, the knee metric, the summary's and InfluxDB's name for it."""
    unit: str
    """"ms" for a duration (seconds in sketches, milliseconds in summaries and sinks); else what a value counts."""
    kind: Kind
    """"latency" and "distribution": a sketch (percentiles) of one value per request or session; "counter": a sum
    over the step (shown per second or as a count); "rate": the share of requests that count."""
    meaning: str
    source: str | None = None
    """The extractor: the record attribute that gives it (``RequestRecord``'s, ``SessionRecord``'s when ``of`` is
    "session"): a sample or None, ``Samples`` when ``many``, a counter's increment, a rate's miss (truthy counts).
    None: no attribute does (a count of records, or goodput, which needs the SLOs)."""
    of: Of = "ok"
    """Which records it is taken from: "ok" successful requests, "all" every request, "session" ended sessions,
    "worker" events the worker notes (``Recorder.note``)."""
    cancelled: bool = False
    """A cancelled request (the user hung up: ``RequestRecord.cancelled``) gives its value too: a time the stream
    reached before the hang-up, as real as a success's (TTFT when the first token came first). Else, as E2E and TPOT
    of a stream cut short, it is left out (docs/metrics.md, "Cancelled requests")."""
    many: bool = False
    """``source`` gives ``Samples`` (several values a record, with their counts), not one value."""
    open_loop: bool = False
    """Only requests with an intended start (open loop) have it."""
    key: str = ""
    """``Bucket``'s name for it (its sketch, its counter field or ``extra`` key) when not ``name``."""
    slo: bool = False
    """An SLO threshold may use it (``spec.slo``)."""
    knee: bool = False
    """The knee may follow its p99 (``load.knee.metric``)."""
    limit: str | None = None
    """The record attribute an SLO threshold limits per request (goodput), when not ``source``."""
    influx: tuple[str, ...] = ()
    """Where ``sinks/`` writes it: "measurement.field", or a bare measurement whose points carry this metric's name
    in the ``metric`` tag and its percentiles as fields (``sinks.schema.PERCENTILE_FIELDS``)."""
    per_class: bool = False
    """A mix's class reports it apart: its requests' rows carry it (``analysis/mix/classes.py``), so a class's own SLO
    and a knee on one class may use it (with ``slo``, ``knee``)."""
    gate: Literal["on", "off"] | None = None
    """``kneecap compare --gate`` may judge its percentiles: "on" by default, "off" unless the ``gate:`` block asks."""
    headline: bool = False
    """Shown first wherever there is room for a few latencies (report charts, class tables, the class line)."""
    live: bool = False
    """Drawn over time on the live dashboard (its windows, and its charts against load)."""
    whole: bool = False
    """A whole (non-streamed) answer gives it too: an SLO on it holds without streaming (``stream: false``,
    embeddings)."""

    @property
    def bucket_key(self) -> str:
        return self.key or self.name

    @property
    def scale(self) -> float:
        """From the sketch's values to the unit users read (seconds → ms)."""
        return 1000.0 if self.kind == "latency" else 1.0

    def extract(self, record: Any) -> Any:
        """This metric's value(s) in one record, as ``source`` says (None when it has none)."""
        return None if self.source is None else getattr(record, self.source)


_LAT = ("kneecap_latency", "kneecap_step")
_TP = "kneecap_throughput."

METRICS: tuple[Metric, ...] = (
    Metric("ttft", "ms", "latency", "start → first chunk carrying output of any kind (answer text, reasoning or "
           "tool-call delta); the role-only first chunk and empty deltas do not count", "ttft_s", slo=True, knee=True,
           cancelled=True, influx=_LAT, per_class=True, gate="on", headline=True, live=True),
    Metric("tpot", "ms", "latency", "(E2E − TTFT) / (n − 1) per request, over all output tokens (reasoning "
           "included); undefined for n ≤ 1", "tpot_s", slo=True, knee=True, influx=_LAT, per_class=True, gate="on",
           headline=True, live=True),
    Metric("itl", "ms", "latency", "gaps between consecutive chunks carrying output of any kind; a threshold's "
           "per-request limit (goodput) is the request's mean gap, its TPOT", "itl_samples", many=True, slo=True,
           knee=True, limit="tpot_s", influx=_LAT, gate="off"),
    Metric("itl_token", "ms", "latency", "per-token gaps: a chunk gap shared by the tokens of the chunk that ends it, "
           "when exact per-chunk counts or usage = chunk count say how many", "itl_token_samples", many=True,
           influx=_LAT),
    Metric("e2e", "ms", "latency", "start → end of stream (`[DONE]`, or a close after a `finish_reason`)", "e2e_s",
           slo=True, knee=True, influx=_LAT, per_class=True, gate="on", headline=True, whole=True),
    Metric("headers", "ms", "latency", "start → response headers", "headers_s", cancelled=True, influx=_LAT),
    Metric("send_lag", "ms", "latency", "intended start → start, failed requests included (0 when sent early)",
           "sent_late_s", of="all", open_loop=True, influx=_LAT),
    Metric("ttft_intended", "ms", "latency", "TTFT from the intended start, the send lag included",
           "ttft_intended_s", open_loop=True, cancelled=True, influx=_LAT),
    Metric("e2e_intended", "ms", "latency", "E2E from the intended start", "e2e_intended_s", open_loop=True,
           influx=_LAT),
    Metric("ttfo", "ms", "latency", "time to first output token: start → first chunk of the answer (content); "
           "reasoning and tool calls excluded", "ttfo_s", slo=True, knee=True, cancelled=True, influx=_LAT,
           per_class=True),
    Metric("reasoning_time", "ms", "latency", "first reasoning chunk → first answer chunk", "reasoning_s", slo=True,
           knee=True, influx=_LAT),
    Metric("tpot_content", "ms", "latency", "TPOT of the answer only: (E2E − TTFO) / (n − reasoning tokens − 1)",
           "tpot_content_s", influx=_LAT),
    Metric("tool_call", "ms", "latency", "start → first tool-call delta", "tool_call_s", influx=_LAT),
    Metric("tokens_per_s_per_user", "tokens/s", "distribution", "(n − 1) / (E2E − TTFT): the user's streaming "
           "speed; a threshold on it is a floor, e.g. `p(5)>20`", "tokens_per_s", key="tokens_per_s", slo=True,
           per_class=True),
    Metric("tokens_per_chunk", "tokens", "distribution", "output tokens per chunk, when the server counts them "
           "exactly (continuous usage): speculative decoding's acceptance", "tokens_per_chunk_samples", many=True),
    Metric("error_rate", "fraction", "rate", "failed requests / requests; a failure is also a miss for every latency "
           "threshold and the knee", "error", of="all", key="failures", slo=True, influx=("kneecap_errors.count",),
           per_class=True, whole=True),
    Metric("session_ttft", "ms", "latency", "per session: its own TTFT p99; a failed session is a miss",
           "ttft_p99_ok_s", of="session", slo=True, knee=True, influx=("kneecap_step",)),
    Metric("session_duration", "ms", "latency", "per session: first call → end, think time included", "duration_s",
           of="session", slo=True, influx=("kneecap_step",)),
    Metric("session_model_time", "ms", "latency", "per session: time spent waiting on the endpoint (per turn, its "
           "slowest call's E2E)", "model_time_s", of="session", influx=("kneecap_step",)),
    Metric("session_context", "tokens", "distribution", "per session: tokens in its final context", "context_tokens",
           of="session"),
    Metric("requests_per_s", "requests/s", "counter", "requests that ended in the step's measured part, failed ones "
           "included", of="all", key="requests", influx=(_TP + "requests_per_s",)),
    Metric("ok_per_s", "requests/s", "counter", "successful requests", key="ok", influx=(_TP + "ok_per_s",)),
    Metric("output_tokens_per_s", "tokens/s", "counter", "output tokens n: the server's usage, else the chunks "
           "counted (flagged)", "output_tokens", key="output_tokens", influx=(_TP + "output_tokens_per_s",)),
    Metric("input_tokens_per_s", "tokens/s", "counter", "prompt tokens (the server's usage)", "prompt_tokens",
           key="input_tokens", influx=(_TP + "input_tokens_per_s",)),
    Metric("goodput_per_s", "requests/s", "counter", "successful requests that met every per-request SLO limit",
           key="good", influx=(_TP + "goodput_per_s",)),
    Metric("new_connections", "requests", "counter", "requests that opened a connection (TCP connect, TLS handshake) "
           "inside their own time, failed ones included", "new_connection", of="all",
           influx=("kneecap_step_client.new_connections", "kneecap_step_client.new_connection_share")),
    Metric("itl_token_unknown", "requests", "counter", "several tokens a chunk and no exact counts: no per-token ITL",
           "itl_token_unknown"),
    Metric("exact_chunk_counts", "requests", "counter", "requests whose every chunk's token count the server gave",
           "exact_chunks", key="exact_chunks"),
    Metric("shared_stamps", "requests", "counter", "requests with chunk times that may be late by more than 1 ms: a "
           "late receive brought several chunks under one time", "stamps_shared"),
    Metric("streams", "requests", "counter", "answers whose output came in receives (streamed)", "streamed"),
    Metric("receives", "receives", "counter", "receives (socket reads) that brought output chunks", "receives"),
    Metric("content_chunks", "chunks", "counter", "output chunks (content_chunks / receives: chunks a receive "
           "brings)", "content_chunks"),
    Metric("usage_below_chunks", "requests", "counter", "answers whose usage counted fewer output tokens than the "
           "chunks that streamed them: the usage is not the stream's count", "usage_short"),
    Metric("late_chunks", "chunks", "counter", "output chunks beyond the first of receives the reader made late "
           "(``shared_stamps``): the reader's bunching, not the server's", "shared_stamps"),
    Metric("held_streams", "requests", "counter", "streams with an event cut at a receive's end whose rest came "
           "more than 1 ms later: held on the path (a gateway's buffer)", "held_on_path"),
    Metric("whole_streams", "requests", "counter", "streams of 4 chunks or more that came in one receive: buffered "
           "whole (TTFT = E2E)", "arrived_whole"),
    Metric("reasoning_tokens_counted", "requests", "counter", "reasoning tokens counted from chunks (usage silent)",
           "reasoning_tokens_counted", key="reasoning_counted"),
    Metric("length_asked", "requests", "counter", "answers that asked for an exact length (`ignore_eos` and "
           "`min_tokens`, chat and completions)", "exact_length"),
    Metric("short_answers", "requests", "counter", "answers that asked for an exact length and ended before it: the "
           "endpoint did not honour the ask", "short_answer"),
    Metric("tokens_asked", "tokens", "counter", "output tokens the exact-length answers asked for", "tokens_asked"),
    Metric("tokens_got", "tokens", "counter", "output tokens the exact-length answers got", "tokens_got"),
    Metric("short_answer_rate", "fraction", "rate", "short answers / answers that asked for an exact length: the "
           "share of the workload's output lengths the endpoint did not honour", "short_answer", slo=True,
           per_class=True, whole=True),
    Metric("answers_verified", "requests", "counter", "re-asked reference prompts whose greedy answer was compared "
           "with the reference (``verify:``)", "verified"),
    Metric("answers_changed", "requests", "counter", "of those, answers that differ from the reference",
           "answer_changed"),
    Metric("answers_changed_rate", "fraction", "rate", "answers changed / answers verified: the share of greedy "
           "answers that are not the ones the endpoint gave at the start", "answer_changed", slo=True, whole=True),
    Metric("answers_checked", "requests", "counter", "answers ``verify:`` asked that were checked (``verify.check``, "
           "a prompt file's ``contains``)", "answer_checked"),
    Metric("answers_failed", "requests", "counter", "of those, answers that failed a check", "check_failed"),
    Metric("answers_failed_rate", "fraction", "rate", "answers failed / answers checked: the share of answers that "
           "did not pass the scenario's checks (quality under load)", "check_failed", slo=True, whole=True),
    Metric("prefix_ceiling_tokens", "tokens", "counter", "``workload.trace``: prompt tokens an unbounded prefix "
           "cache could serve, by the trace's own block ids", "ideal_cached_tokens"),
    Metric("prefix_ceiling_of", "tokens", "counter", "``workload.trace``: the trace's prompt tokens of those "
           "requests (the ceiling's share is over them)", "ceiling_prompt_tokens"),
    Metric("inputs_per_s", "inputs/s", "counter", "embeddings: inputs sent in batches", "inputs", key="inputs"),
    Metric("continuous_usage_refused", "requests", "counter", "refused by the endpoint for asking per-chunk usage: "
           "sent again without, and not asked again", of="worker"),
)
"""In the order summaries, the SLO grammar and the tables list them."""

METRIC: dict[str, Metric] = {m.name: m for m in METRICS}
SLO_METRICS = tuple(m.name for m in METRICS if m.slo)
KNEE_METRICS = tuple(m.name for m in METRICS if m.knee)
REQUEST_LATENCIES = tuple(m.name for m in METRICS if m.kind == "latency" and m.of != "session")
"""The latencies of a request, under ``latency_ms`` in a step's summary (``p99_slo`` too when an SLO may use them)."""
CLASS_LATENCIES = tuple(m.name for m in METRICS if m.per_class and m.kind == "latency")
"""The latencies a mix's class reports (its rows' columns)."""
CLASS_SLO_METRICS = tuple(m.name for m in METRICS if m.per_class and m.slo)
CLASS_KNEE_METRICS = tuple(m.name for m in METRICS if m.per_class and m.knee)
GATE_LATENCIES = tuple(m.name for m in METRICS if m.gate is not None)
GATE_DEFAULT = tuple(m.name for m in METRICS if m.gate == "on")
HEADLINE = tuple(m.name for m in METRICS if m.headline)
WHOLE_ANSWER_SLO_METRICS = tuple(m.name for m in METRICS if m.whole and m.slo)
"""What an SLO may judge without streaming."""
LIVE = tuple(m.name for m in METRICS if m.live)

QUANTILE_OF = {"p50": 0.5, "p90": 0.9, "p95": 0.95, "p99": 0.99, "p999": 0.999}
"""Each percentile a summary gives, by its key (``metrics.quantiles.summarize_sketch``), in order."""
PERCENTILES = tuple(QUANTILE_OF)
CI_PERCENTILES = ("p50", "p95", "p99")
"""The percentiles a summary gives an interval for (``p50_ci``…): what the gate judges, and a class's table shows."""


def influx_fields(measurement: str) -> tuple[str, ...]:
    """The fields of ``measurement`` that metrics are written to, in registry order."""
    return tuple(f.split(".", 1)[1] for m in METRICS for f in m.influx if f.startswith(measurement + "."))


_OF = {"ok": "successes", "all": "every request", "session": "ended sessions", "worker": "the worker's notes"}


def markdown_table() -> str:
    """The registry as docs/metrics.md shows it."""
    rows = ["| metric | unit | kind | of | SLO / knee | InfluxDB | meaning |", "|---|---|---|---|---|---|---|"]
    for m in METRICS:
        judged = " / ".join(w for w, on in (("SLO", m.slo), ("knee", m.knee)) if on)
        tagged = any("." not in f for f in m.influx)
        sink = ", ".join(f"`{f}`" for f in m.influx) + (" (`metric` tag)" if tagged else "")
        of = _OF[m.of] + (" and cancelled" if m.cancelled else "")
        rows.append(f"| `{m.name}` | {m.unit} | {m.kind} | {of} | {judged} | {sink} | "
                    f"{'open loop: ' if m.open_loop else ''}{m.meaning} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")
