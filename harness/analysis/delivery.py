"""How a step's output chunks came, from the client's side, and what that makes of its ITL and TTFT. Pure.

Chunks come bunched (several in one receive, under one time) for four reasons, told apart here and beside:

- the server writes several events at once, on time, at its cadence (a stream interval, batched writes): the
  chunks per receive are steady and above one; ITL per chunk is that cadence (zero within a write), not an error;
- something on the path held the bytes (a gateway's or proxy's response buffer, sent on when full or when the
  response ends): events cut at a receive's end whose rest came later (``RequestRecord.held``: a server writes
  whole events), or whole answers in one receive (``arrived_whole``); TTFT and ITL are then the path's;
- the reader fell behind (its loop or CPU): ``shared_stamps``, the generator's TIMING flag (``client/inflight.py``);
- the server stalled and then flushed its backlog: every stream silent at once, then bursts, a server-wide pause
  (``pauses.py``, named in the tail's lines).

The first two are this module's (``delivery``); a receive the reader made late counts as one receive here (its
extra chunks, ``late_chunks``, are the reader's), so a late reader does not pass for a server that batches.
"""

from __future__ import annotations

from harness.metrics.aggregate import HELD_KEY
from harness.summary import Delivery

__all__ = ["BATCHED_CHUNKS", "BUFFERED_SHARE", "delivery"]

BUFFERED_SHARE = 0.1
"""A step names a buffering path when at least this share of its streams were held on the way or came whole."""
BATCHED_CHUNKS = 1.5
"""Chunks per receive (the reader's late ones counted as one) from which the server writes several at once."""


def delivery(extra: dict[str, int]) -> Delivery | None:
    """The step's ``delivery`` block from its bucket's counters: streams, receives, chunks per receive (the reader's
    late extras left out), streams held on the way or whole, the size the path held (KiB, the most common), the
    cause (``"path"``, ``"server_writes"`` or None: one chunk a receive) and its line; None without streams."""
    streams = extra.get("streams", 0)
    receives = extra.get("receives", 0)
    if not streams or not receives:
        return None
    chunks = extra.get("content_chunks", 0)
    per = (chunks - extra.get("late_chunks", 0)) / receives
    held, whole = extra.get("held_streams", 0), extra.get("whole_streams", 0)
    sizes = {int(k[len(HELD_KEY):]): n for k, n in extra.items() if k.startswith(HELD_KEY)}
    held_kb = max(sizes, key=lambda kb: (sizes[kb], kb)) if sizes else None
    share = (held + whole) / streams  # disjoint: a held stream came in two receives or more
    cause, line = None, ""
    if share >= BUFFERED_SHARE:
        how = [f"{held:,} with events cut at ~{held_kb} KB and finished later" if held else "",
               f"{whole:,} whole in one receive" if whole else ""]
        cause = "path"
        line = (f"{share:.0%} of the streams came held on the way ({', '.join(h for h in how if h)}): "
                       "something between kneecap and the engine held the bytes (a gateway's or proxy's response "
                       "buffer, or a server that does not stream); TTFT and ITL here are that path's, not the "
                       "server's")
    elif per >= BATCHED_CHUNKS:
        cause = "server_writes"
        line = (f"the chunks came ~{per:.1f} a receive, on time: the server writes several at once (a stream "
                       "interval, batched writes); ITL per chunk is that cadence (zero within a write), not an error")
    return Delivery(streams=streams, receives=receives, chunks_per_receive=round(chunks / receives, 2),
                    on_time_chunks_per_receive=round(per, 2), held_streams=held, whole_streams=whole, held_kb=held_kb,
                    cause=cause, line=line)
