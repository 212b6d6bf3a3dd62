"""How the simulator's front end writes a stream's chunks once the engine made them: each as made, several at a
time (``--frames-per-write``: one write of K events, as a server that batches its socket writes), or held through
a front-end stall (``--front-stall-every-s``: the API server stops writing, a garbage-collection pause, while the
engine decodes on, then writes each stream's overdue chunks at once) and through an injected per-request stall
(``--fault stall``). The engine's accounting (``finish``) ends when the engine made the last chunk, whenever it
is written.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from harness.sim.job import Job
from harness.sim.plan import Behavior

__all__ = ["FrontEnd"]


class FrontEnd:
    """The write side of every stream of one server; ``finish(job, "ok")`` is the server's end of a request."""

    def __init__(self, behavior: Behavior, finish: Callable[[Job, str], None]) -> None:
        self.behavior = behavior
        self.frames_per_write = behavior.frames_per_write
        self.finish = finish
        self.stalled: set[Job] | None = None
        """During a front-end stall: the streams with chunks held; else None."""

    def send(self, job: Job, out: list[bytes], finished: bool) -> None:
        """One emission's chunks (``finished``: the stream's last)."""
        if job.held is not None:  # an injected stall: hold until it ends (``release``)
            job.held.extend(out)
            if finished:
                job.held.append(b"")  # marks the end
            return
        conn = job.conn
        if self.stalled is None and self.frames_per_write == 1:
            for chunk in out:
                conn.send_chunk(chunk)
            if finished:
                conn.end_stream()
                self.finish(job, "ok")
            return
        job.backlog += out
        job.unsent += 1
        job.ending = finished
        if self.stalled is not None:
            self.stalled.add(job)
        elif finished or job.unsent >= self.frames_per_write:
            self.flush(job)
        if finished:
            self.finish(job, "ok")

    def flush(self, job: Job) -> None:
        """Write ``job``'s backlog in one write (one HTTP chunk of its events), and end its stream if it ended."""
        if job.backlog:
            job.conn.send_chunk(b"".join(job.backlog))
        job.backlog, job.unsent = [], 0
        if job.ending:
            job.conn.end_stream()

    def hold(self, job: Job, seconds: float) -> None:
        """An injected stall of one stream: what it emits for ``seconds`` goes out at once after."""
        job.held = []
        asyncio.get_running_loop().call_later(seconds, self.release, job)

    def release(self, job: Job) -> None:
        held, job.held = job.held or [], None
        finished = bool(held) and held[-1] == b""
        self.send(job, held[:-1] if finished else held, finished)

    async def stalls(self) -> None:
        """``--front-stall-every-s``: every that many seconds, no writes for ``--front-stall-s``, then the backlog."""
        every, length = self.behavior.front_stall_every_s, self.behavior.front_stall_s
        while True:
            await asyncio.sleep(every - length)
            self.stalled = set()
            await asyncio.sleep(length)
            jobs, self.stalled = self.stalled, None
            for job in jobs:
                self.flush(job)
