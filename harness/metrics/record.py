"""One request, as the client saw it: times, tokens, outcome. Pure; definitions in README "Metrics".

Times are seconds on the client's monotonic clock (``time.perf_counter``); ``start`` is when the
request was initiated (a new connection's connect time counts, as a user would feel it). Durations
(``headers_s``, ``ttft_s``, ``e2e_s``, ``chunk_times``) are relative to ``start``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from operator import sub

__all__ = ["ERROR_CLASSES", "OVERFLOW_PHRASES", "WHOLE_MIN_CHUNKS", "RequestRecord", "Samples", "overflows"]

Samples = tuple[list[float], list[int] | None]
"""Several values of one metric from one request, and how many samples each stands for (None: one each)."""

WHOLE_MIN_CHUNKS = 4
"""A stream of this many chunks or more that came in one receive was buffered whole (``arrived_whole``): fewer may
be a fast server's short answer written before the reader looked."""

ERROR_CLASSES = {
    "connect_error": "could not connect (refused, DNS)",
    "connect_timeout": "connecting took longer than timeouts.connect_s",
    "tls_error": "the TLS handshake failed (the certificate did not verify, or the server does not speak TLS)",
    "ttft_timeout": "no first token within timeouts.ttft_s",
    "idle_timeout": "no bytes for timeouts.idle_s mid-stream",
    "total_timeout": "request longer than timeouts.total_s",
    "http_429": "HTTP 429 (rate limited; Retry-After kept)",
    "http_4xx": "HTTP 4xx other than 429",
    "context_overflow": "HTTP 4xx whose error says the prompt and answer pass the model's context length",
    "http_5xx": "HTTP 5xx",
    "not_sse": "HTTP 200 but not text/event-stream",
    "bad_response": "not parseable as HTTP, or a chunk's JSON of the wrong shape (usage counts as strings, ...)",
    "malformed_chunk": "a data: line that is not JSON",
    "stream_error": "the server sent an error object inside the stream",
    "truncated": "stream ended without finish_reason or [DONE]",
    "reset": "connection reset or closed mid-response",
    "oversized_line": "an SSE line over the client's limit",
    "client_error": "an exception in kneecap's own request path (a bug; its type is in the detail)",
}

OVERFLOW_PHRASES = ("context length", "maximum context", "context_length_exceeded", "prompt is too long")
"""Words of an error body that make a 4xx a ``context_overflow`` (vLLM's, OpenAI's and Anthropic's; AIPerf's list)."""


def overflows(body: str) -> bool:
    """An error body saying the prompt and answer do not fit the model's context."""
    low = body.lower()
    return any(p in low for p in OVERFLOW_PHRASES)


@dataclass(slots=True)
class RequestRecord:
    start: float
    intended_start: float | None = None
    """Open loop: when the arrival schedule wanted the request sent."""
    error: str | None = None
    """None for success, else a key of ERROR_CLASSES."""
    error_detail: str = ""
    cancelled: str | None = None
    """The user hung up (``workload/cancel.py``): "cancel" (its drawn delay after the send passed) or "patience" (no
    first token within ``patience.ttft_s``); None otherwise. Cancelled is neither failed (``error`` stays None) nor
    ``ok``: what it keeps is in docs/metrics.md, "Cancelled requests"."""
    status: int | None = None
    headers_s: float | None = None
    ttft_s: float | None = None
    e2e_s: float | None = None
    """End of stream for successes; for failures, when the failure was noticed."""
    chunk_times: list[float] = field(default_factory=list)
    """Arrival of each chunk carrying output of any kind: answer, reasoning, tool call (the first is the TTFT)."""
    chunk_tokens: list[int] | None = None
    """Output tokens in each of ``chunk_times`` when the server says so exactly (continuous usage), else None."""
    ttfo_s: float | None = None
    """Time to first output token: the first answer (content) chunk; reasoning and tool calls excluded."""
    reasoning_start_s: float | None = None
    """The first reasoning chunk; reasoning time = ``ttfo_s`` − this."""
    reasoning_tokens: int | None = None
    reasoning_tokens_counted: bool = False
    """True when ``reasoning_tokens`` counts reasoning chunks (the server's usage did not say)."""
    tool_call_s: float | None = None
    """The first tool-call delta."""
    tool_call_chunks: int = 0
    inputs: int | None = None
    """Embeddings: inputs in the request's batch."""
    output_tokens: int | None = None
    output_tokens_counted: bool = False
    """True when the server sent no usage and ``output_tokens`` counts the chunks that carried output (answer,
    reasoning or tool-call deltas) instead."""
    prompt_tokens: int | None = None
    prompt_tokens_target: int | None = None
    max_tokens: int | None = None
    exact_length: bool = False
    """The request asked for exactly ``max_tokens`` of output (``ignore_eos``/``min_tokens``)."""
    finish_reason: str | None = None
    retry_after_s: float | None = None
    response_id: str | None = None
    cached_tokens: int | None = None
    """Prompt tokens served from the server's prefix cache (``usage.prompt_tokens_details.cached_tokens``);
    None when the server does not say. llama.cpp's ``timings.cache_n`` stands in where usage lacks it."""
    cached_source: str | None = None
    """Where ``cached_tokens`` came from: "usage", "timings.cache_n" (llama.cpp), or the API's usage field
    ("usage.input_tokens_details.cached_tokens", "usage.cache_read_input_tokens")."""
    server_prefill_s: float | None = None
    """The server's own prompt-processing time for this request (llama.cpp's ``timings.prompt_ms``); None when the
    server does not say. Server prefill, not TTFT: no queue, network or client in it."""
    server_decode_s: float | None = None
    """The server's own generation time, first token to last (llama.cpp's ``timings.predicted_ms``); None when the
    server does not say."""
    session: int | None = None
    """Sessions: the session this call belongs to (unique per worker), its 1-based ``turn`` and ``call`` (0 for the
    turn's main call, 1.. for parallel sub-calls)."""
    turn: int | None = None
    turn_bucket: str | None = None
    """The turn's bucket label ("1", "2-4", ...): session metrics are split by it."""
    call: int = 0
    new_connection: bool = False
    """The request opened a connection (TCP connect, and TLS handshake for https) inside its own time: the first
    on a connection, or the server had closed the kept-alive one (``Connection: close``, or closed after the last
    response, as llama.cpp's server does)."""
    connect_s: float | None = None
    """New connections: the time to connect (and shake hands over TLS), part of the request's own time."""
    sent_s: float | None = None
    """When the request's last byte was written (relative to ``start``; a new connection's connect included)."""
    loop_lag_s: float | None = None
    """The worker's event-loop lag just before the send (its monitor's latest 20 ms sample): how far behind the
    load generator was."""
    in_flight: int | None = None
    """Requests in flight on this worker when this one was sent, itself included (a feature of tail attribution)."""
    after_error: bool = False
    """The request before this one on the same connection failed."""
    shared_stamps: int = 0
    """Output chunks dated by a late receive (more than 1 ms) that also completed a later chunk: their times may be
    late by more than 1 ms (``client/inflight.py``). 0 when every chunk kept its own arrival time."""
    late_chunks: list[int] | None = None
    """The first chunk of each such late receive (indices into ``chunk_times``): the silence before it may be the
    reader's, not the server's (``metrics.rows.long_gaps`` leaves it out). None when every receive came on time."""
    warmup_shape: bool = False
    """A shape warm-up request (``load.warmup_shapes``): counted in its step's warm-up, whenever it ends."""
    receives: int = 0
    """Receives (socket reads) that completed output chunks: with ``len(chunk_times)``, how bunched they came."""
    held: int = 0
    """Receives that ended inside an event whose rest came more than 1 ms later: the server writes whole events, so
    something on the path held those bytes (a gateway's buffer) (``client/inflight.py``)."""
    held_bytes: int = 0
    """The largest such receive, in bytes: about what the path holds at a time."""
    model: str | None = None
    """``endpoint.adapters``: the LoRA adapter the request named (its ``model``); None: the endpoint's model."""
    class_index: int | None = None
    """``workload.mix``: the index of the request's class among the scenario's; None without a mix."""
    images: int | None = None
    """``workload.images``: images in the request's prompt (0: none drawn for it); None: the workload sends none."""
    image_pixels: int | None = None
    """Their pixels (width × height), summed."""
    content: str | None = None
    """Sessions: the answer's text as streamed (it becomes the next turn's history); not saved to files."""
    answer_check: str | None = None
    """``verify:``: "reference" (its answer became one), "same" or "changed" (a re-ask compared with its reference);
    None: an ordinary request, or a re-ask that failed (``load/verify.py``)."""
    answer_changed_at: int | None = None
    """A changed answer: the first word that differs (``workload.verify.first_difference``)."""
    answer_example: str | None = None
    """A changed answer: both texts from near the difference (``workload.verify.example``), for the summary."""
    ideal_cached_tokens: int | None = None
    """``workload.trace``: the prompt tokens an unbounded prefix cache could serve (the trace's ceiling)."""
    answer_reference: str | None = None
    """A reference answer: its ``answers.jsonl`` line (``workload.verify.reference_line``), for the run's file."""
    answer_checked: bool = False
    """``verify.check`` (or a prompt file's ``contains``) judged this answer."""
    answer_failed: str | None = None
    """Of a checked answer, the check it failed (``workload.verify.CHECK_REASONS``); None: it passed."""
    answer_failed_example: str | None = None
    """A failed check: the answer's end (``workload.verify.check_example``), for the summary."""

    @property
    def verified(self) -> bool:
        """A re-asked reference prompt whose answer was compared (``verify:``)."""
        return self.answer_check in ("same", "changed")

    @property
    def answer_changed(self) -> bool:
        return self.answer_check == "changed"

    @property
    def ceiling_prompt_tokens(self) -> int:
        """``workload.trace``: the prompt's trace length, the ceiling's denominator (0 outside a trace)."""
        return (self.prompt_tokens_target or 0) if self.ideal_cached_tokens is not None else 0

    @property
    def check_failed(self) -> bool:
        return self.answer_failed is not None

    @property
    def ok(self) -> bool:
        """Succeeded: neither failed nor cancelled."""
        return self.error is None and self.cancelled is None

    @property
    def stamps_shared(self) -> bool:
        """Some of this request's chunk times may be late (``shared_stamps``)."""
        return self.shared_stamps > 0

    @property
    def streamed(self) -> bool:
        """Output chunks came in at least one receive (a stream; not a one-piece answer)."""
        return self.receives > 0

    @property
    def content_chunks(self) -> int:
        """Output chunks of a stream (0 for an answer that came in one piece, not streamed)."""
        return len(self.chunk_times) if self.receives else 0

    @property
    def usage_short(self) -> bool:
        """The server's usage counted fewer output tokens than the chunks that streamed them (each carried one at
        least): the usage is not the stream's count (a gateway's rewrite, another tokenizer)."""
        return not self.output_tokens_counted and self.output_tokens is not None and self.receives > 0 \
            and self.output_tokens < len(self.chunk_times)

    @property
    def held_on_path(self) -> bool:
        """Some of its events were held on the way (``held``)."""
        return self.held > 0

    @property
    def arrived_whole(self) -> bool:
        """A stream of ``WHOLE_MIN_CHUNKS`` chunks or more that came in one receive: buffered whole before it was
        sent on (by the path, or a server that does not stream), so its TTFT is its E2E."""
        return self.receives == 1 and len(self.chunk_times) >= WHOLE_MIN_CHUNKS

    @property
    def send_lag_s(self) -> float | None:
        return None if self.intended_start is None else self.start - self.intended_start

    @property
    def sent_late_s(self) -> float | None:
        """Open loop: ``send_lag_s``, 0 when the request went out early (the clock's grain)."""
        return None if self.intended_start is None else max(self.start - self.intended_start, 0.0)

    @property
    def ttft_intended_s(self) -> float | None:
        """Open loop: TTFT from the intended start, the send lag included (what the user felt)."""
        if self.intended_start is None or self.ttft_s is None:
            return None
        return self.ttft_s + max(self.start - self.intended_start, 0.0)

    @property
    def e2e_intended_s(self) -> float | None:
        """Open loop: E2E from the intended start."""
        if self.intended_start is None or self.e2e_s is None:
            return None
        return self.e2e_s + max(self.start - self.intended_start, 0.0)

    @property
    def tpot_s(self) -> float | None:
        """(E2E − TTFT) / (n − 1); undefined for n ≤ 1 or failures."""
        n = self.output_tokens
        if not self.ok or n is None or n <= 1 or self.ttft_s is None or self.e2e_s is None:
            return None
        return (self.e2e_s - self.ttft_s) / (n - 1)

    @property
    def reasoning_s(self) -> float | None:
        """First reasoning chunk → first answer chunk; None without both."""
        if self.reasoning_start_s is None or self.ttfo_s is None or not self.ok:
            return None
        return self.ttfo_s - self.reasoning_start_s

    @property
    def tpot_content_s(self) -> float | None:
        """TPOT over the answer only: (E2E − TTFO) / (n − reasoning tokens − 1); None without an answer of 2+."""
        if self.ttfo_s is None:
            return None
        n = (self.output_tokens or 0) - (self.reasoning_tokens or 0)
        if not self.ok or n <= 1 or self.e2e_s is None:
            return None
        return (self.e2e_s - self.ttfo_s) / (n - 1)

    @property
    def tokens_per_s(self) -> float | None:
        """The user's streaming speed, (n − 1) / (E2E − TTFT)."""
        n = self.output_tokens
        if not self.ok or n is None or n <= 1 or self.ttft_s is None or self.e2e_s is None:
            return None
        span = self.e2e_s - self.ttft_s
        return (n - 1) / span if span > 0 else None

    def itl_chunks(self) -> list[float]:
        """Gaps between consecutive content chunks."""
        t = self.chunk_times
        return list(map(sub, t[1:], t))

    @property
    def itl_samples(self) -> Samples | None:
        """The chunk gaps (ITL), None below two chunks."""
        return (self.itl_chunks(), None) if len(self.chunk_times) > 1 else None

    @property
    def itl_token_samples(self) -> Samples | None:
        """Per-token gaps: with exact per-chunk counts a gap is shared by the tokens of the chunk that ends it (one
        sample each); else the chunk gaps when each chunk is known to carry one token; None below two chunks or
        when unknown (``itl_token_unknown``)."""
        if len(self.chunk_times) < 2:
            return None
        per_chunk = self.chunk_tokens
        if per_chunk is not None:
            pairs = [(g, k) for g, k in zip(self.itl_chunks(), per_chunk[1:], strict=False) if k > 0]
            return [g / k for g, k in pairs], [k for _, k in pairs]
        return (self.itl_chunks(), None) if self.one_token_per_chunk else None

    @property
    def short_answer(self) -> bool:
        """It asked for exactly ``max_tokens`` and got fewer: the endpoint did not honour ``ignore_eos``/``min_tokens``
        (or stopped it otherwise: ``finish_reason`` says how). Without the server's usage the chunks counted are not
        tokens (a chunk may carry several): then only its ``finish_reason`` says, anything but "length" short."""
        if not self.exact_length or self.output_tokens is None or self.max_tokens is None:
            return False
        if self.output_tokens_counted:
            return self.finish_reason != "length"
        return self.output_tokens < self.max_tokens

    @property
    def tokens_asked(self) -> int:
        """The output tokens it asked for exactly (``max_tokens``); 0 when it asked for no exact length or the server
        did not count what it got (``tokens_got``)."""
        return (self.max_tokens or 0) if self.exact_length and not self.output_tokens_counted else 0

    @property
    def tokens_got(self) -> int:
        """The output tokens, by the server's usage, of an answer that asked for an exact length, else 0."""
        return (self.output_tokens or 0) if self.exact_length and not self.output_tokens_counted else 0

    @property
    def itl_token_unknown(self) -> bool:
        """Several chunks, several tokens, no exact per-chunk counts: the per-token gaps are unknown."""
        return len(self.chunk_times) > 1 and self.chunk_tokens is None and not self.one_token_per_chunk

    @property
    def exact_chunks(self) -> bool:
        """The server said exactly how many tokens each chunk carried (continuous usage)."""
        return self.chunk_tokens is not None

    @property
    def tokens_per_chunk_samples(self) -> Samples | None:
        """Tokens in each chunk that carried any, when counted exactly; else None."""
        per_chunk = self.chunk_tokens
        return None if per_chunk is None else ([k for k in per_chunk if k > 0], None)

    @property
    def one_token_per_chunk(self) -> bool:
        """Known from exact per-chunk counts, or from server usage equal to the chunk count; then chunk gaps are
        token gaps."""
        if self.chunk_tokens is not None:
            return all(k == 1 for k in self.chunk_tokens)
        return not self.output_tokens_counted and self.output_tokens == len(self.chunk_times)

    def itl_tokens(self) -> list[float] | None:
        """Per-token gaps (a chunk gap / tokens in the later chunk) when known, else None."""
        return self.itl_chunks() if self.one_token_per_chunk else None

    def to_dict(self) -> dict:
        """Every field but ``content`` (lists shared with the record, not copied: ``asdict``'s deep copy cost
        ~190 µs a request, paid by the worker's one thread between reads), and the derived figures."""
        d = {name: getattr(self, name) for name in _SAVED}
        d.update(ok=self.ok, tpot_s=self.tpot_s, tokens_per_s=self.tokens_per_s, reasoning_s=self.reasoning_s,
                 tpot_content_s=self.tpot_content_s)
        return d


_SAVED = tuple(f.name for f in fields(RequestRecord) if f.name != "content")
