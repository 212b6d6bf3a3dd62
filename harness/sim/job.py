"""One request inside the simulator's server, from arrival to its last byte: its engine sequences, writer and
the send times the trace records. No I/O of its own (the server writes through ``conn``)."""

from __future__ import annotations

import time
import uuid
from typing import Any

from harness.sim.anthropic import MessagesWriter
from harness.sim.chat_stream import ChatWriter
from harness.sim.embeddings import EmbeddingsWriter
from harness.sim.engine import Engine, Sequence
from harness.sim.http import ServerConnection
from harness.sim.metrics import ModelMetrics
from harness.sim.openai import GenRequest
from harness.sim.responses import ResponsesWriter

__all__ = ["Job"]


class Job:
    """A request from arrival to its last byte."""

    __slots__ = ("arrival", "backlog", "conn", "emitted", "ending", "engine", "fault", "fault_at", "first",
                 "first_content", "first_reasoning", "first_tool_call", "gen", "gone", "held", "id", "last", "metrics",
                 "pending", "plain", "seq", "seqs", "status", "times", "unsent", "writer")

    def __init__(self, gen: GenRequest, conn: ServerConnection, seq: Sequence, arrival: float, fault: str | None, *,
                 engine: Engine, metrics: ModelMetrics) -> None:
        self.gen, self.conn, self.seq, self.arrival, self.fault = gen, conn, seq, arrival, fault
        # the engine of the model it runs on (its base model's, for a LoRA adapter) and that model's histograms
        self.engine, self.metrics = engine, metrics
        self.seqs = [seq]
        """Every engine sequence of the request: one, or one per input of an embeddings request."""
        self.pending = 1
        self.id = _ID_PREFIX[gen.kind] + uuid.uuid4().hex
        # the kind's writer (chat, responses, messages, embeddings), duck-typed: server.py's docstring lists its methods
        self.writer: Any = _WRITERS[gen.kind](gen, self.id, int(time.time()))
        self.emitted = 0
        self.fault_at = gen.output_tokens // 2  # 0-based index of the token the fault replaces/precedes
        self.first: float | None = None
        self.first_reasoning: float | None = None
        self.first_content: float | None = None
        self.first_tool_call: float | None = None
        self.plain = gen.plan.plain  # text only: every token is content (the hot path skips phases())
        self.last = arrival
        self.held: list[bytes] | None = None  # chunks held back during a stall
        self.backlog: list[bytes] = []
        """Chunks made but not yet written: ``--frames-per-write`` gathers them, a front-end stall holds them."""
        self.unsent = 0
        """Emissions in ``backlog``."""
        self.ending = False
        """The last emission is in ``backlog``: its write ends the stream."""
        self.status = "ok"
        self.gone = False
        """The client hung up and the server generates on (``--on-hang-up generate``)."""
        self.times: list[float] = []

    def phases(self, index: int, count: int, t: float) -> None:
        """Record when each phase of the output first went out."""
        plan = self.gen.plan
        if plan.plain:
            if self.first_content is None:
                self.first_content = t
            return
        for seg in plan.segments(index, count):
            if seg.phase == "reasoning":
                if self.first_reasoning is None:
                    self.first_reasoning = t
            elif seg.phase == "content":
                if self.first_content is None:
                    self.first_content = t
            elif self.first_tool_call is None:
                self.first_tool_call = t


_ID_PREFIX = {"chat": "chatcmpl-", "completions": "cmpl-", "responses": "resp_", "messages": "msg_",
              "embeddings": "embd-"}
_WRITERS = {"chat": ChatWriter, "completions": ChatWriter, "responses": ResponsesWriter, "messages": MessagesWriter,
            "embeddings": EmbeddingsWriter}
