"""A user's sessions, turn by turn: the part of ``LLMUser`` that drives ``workload.sessions``.

Each task is one whole session (``harness.workload.sessions``): turn by turn, the think time slept between
turns, parallel sub-calls on spare connections; the calls keep their streamed text (``keep_text``) so the
next turn resends it; the ended session goes to the recorder. A mixin: ``LLMUser`` provides ``sessions``,
``spare``, ``target``, ``kneecap`` and ``_request``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gevent

from harness.client.target import Target
from harness.client.transport import Connection
from harness.metrics.record import RequestRecord
from harness.metrics.sessions import SessionRecord, nearest_rank
from harness.workload.sessions import Call

__all__ = ["SessionTask", "SessionTurns"]


@dataclass(frozen=True)
class SessionTask:
    """What a session's calls share: its sampler (``SessionSampler``), its class of a mix (None: the workload is one
    class) and its LoRA adapter (one a session: a real client keeps its conversation on one)."""

    sessions: Any
    cls: int | None = None
    adapter: str | None = None


class SessionTurns:
    """``_session``: one whole session on a connection; ``_turn``: one turn's calls."""

    sessions: Any
    spare: list[Connection]
    target: Target
    kneecap: Any
    _request: Callable[..., RequestRecord]
    """One request: ``(conn, intended_start, call, session, task) -> RequestRecord`` (``LLMUser._request``)."""

    def _session(self, conn: Connection, intended_start: float | None, task: SessionTask) -> RequestRecord:
        """One whole session, turn by turn (see ``harness.workload.sessions``); returns its last call's record (the
        backoff reads it). A failed call ends the session: it counts as a failed session, as a real client that
        gives up. Think time is a sleep, so a stopping user leaves at once."""
        session = task.sessions.new_session()
        started = time.perf_counter()
        ttfts: list[float] = []
        model_time, calls, failed = 0.0, 0, False
        rec = None
        while (turn := session.next_turn()) is not None:
            if turn[0].think_s:
                gevent.sleep(turn[0].think_s)
            t0 = time.perf_counter()
            recs = self._turn(conn, session.id, turn, intended_start if session.turn == 1 else None, task)
            model_time += time.perf_counter() - t0
            calls += len(recs)
            rec = recs[0]
            ttfts.extend(r.ttft_s for r in recs if r.ok and r.ttft_s is not None)
            if not all(r.ok for r in recs):
                failed = True
                rec = next(r for r in recs if not r.ok)
                break
            if session.turn == 1 and rec.prompt_tokens and session.first is not None:
                task.sessions.builder.observe(session.first, rec.prompt_tokens)
            session.answer(rec.content or "", rec.prompt_tokens, rec.output_tokens)
        self.kneecap.record_session(SessionRecord(
            duration_s=time.perf_counter() - started, model_time_s=model_time, turns=session.turn, calls=calls,
            ttft_p99_s=nearest_rank(ttfts, 0.99) if ttfts else None, context_tokens=session.context_tokens,
            failed=failed, ended_full=session.ended_full, compactions=session.compactions), time.perf_counter())
        return rec  # type: ignore[return-value]  # a session has at least one turn

    def _turn(self, conn: Connection, sid: int, turn: list[Call], intended_start: float | None,
              task: SessionTask) -> list[RequestRecord]:
        """A turn's calls: the main one on ``conn``, parallel sub-calls at the same time on spare connections; each
        with its ``chain`` after it on its connection (a sub-agent's requests)."""
        if len(turn) == 1 and not turn[0].chain:
            return [self._request(conn, intended_start, turn[0], sid, task)]
        spare = self.spare
        subs = [(c, spare.pop() if spare else self.target.connection()) for c in turn[1:]]
        jobs = [gevent.spawn(self._calls, sc, None, c, sid, task) for c, sc in subs]
        try:
            first = self._calls(conn, intended_start, turn[0], sid, task)
            gevent.joinall(jobs)
        finally:
            gevent.killall(jobs, block=False)
            spare.extend(sc for _, sc in subs)
        return [*first, *(r for j in jobs for r in j.value or ())]

    def _calls(self, conn: Connection, intended_start: float | None, call: Call, sid: int,
               task: SessionTask) -> list[RequestRecord]:
        """A call, then its chain, each after its think time; a failed one ends the chain."""
        recs = [self._request(conn, intended_start, call, sid, task)]
        for nxt in call.chain:
            if not recs[-1].ok:
                break
            if nxt.think_s:
                gevent.sleep(nxt.think_s)
            recs.append(self._request(conn, None, nxt, sid, task))
        return recs
