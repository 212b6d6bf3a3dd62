"""The registry's extractors on the hot path: every sketch a record feeds, in the order a bucket meets them. Pure.

``metrics.vocabulary`` names, per metric, the record attribute its samples come from; here those attributes are
read with one ``attrgetter`` call per record (one C call, no Python loop over metrics to look them up) and each
value that is not None goes to its sketch. The order of first insertion is a bucket's wire order, kept by
``FIRST_SEEN`` (golden bytes in tests/metrics).
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter

from harness.metrics.record import RequestRecord
from harness.metrics.sessions import SessionRecord
from harness.metrics.sketch import Sketch
from harness.metrics.vocabulary import METRICS

__all__ = ["FIRST_SEEN", "add_request", "add_session"]

FIRST_SEEN = ("send_lag", "ttft", "ttft_intended", "e2e", "e2e_intended", "headers", "tpot", "tokens_per_s_per_user",
              "itl", "itl_token", "tokens_per_chunk", "ttfo", "tpot_content", "reasoning_time", "tool_call",
              "session_duration", "session_model_time", "session_context", "session_ttft")
"""The order a bucket first meets the sketches in, i.e. its wire order; a metric the registry adds later comes
after these."""

_Plan = tuple[tuple[tuple[str, bool], ...], Callable[[object], tuple]]


def _plan(*of: str, open_loop: bool = True, cancelled: bool = False) -> _Plan:
    """The registry's sketches of ``of`` records (without the open loop's unless ``open_loop``; with those a cancelled
    request gives when ``cancelled``), in ``FIRST_SEEN`` order: (bucket key, several samples?) each, and one getter
    of all their values in a record."""
    ms = sorted((m for m in METRICS if m.kind in ("latency", "distribution")
                 and (m.of in of or (cancelled and m.cancelled)) and (open_loop or not m.open_loop)),
                key=lambda m: FIRST_SEEN.index(m.name) if m.name in FIRST_SEEN else len(FIRST_SEEN))
    # every sketched metric names its source
    get = attrgetter(*(m.source for m in ms)) if ms else lambda r: ()  # type: ignore[arg-type]
    return tuple((m.bucket_key, m.many) for m in ms), get if len(ms) != 1 else lambda r: (get(r),)


_REQUEST = {(ok, open_loop): _plan("all", "ok", open_loop=open_loop) if ok else _plan("all", open_loop=open_loop)
            for ok in (False, True) for open_loop in (False, True)}
_CANCELLED = {open_loop: _plan("all", open_loop=open_loop, cancelled=True) for open_loop in (False, True)}
_SESSION = _plan("session")


def _add(sk: Callable[[str], Sketch], plan: _Plan, record: object) -> None:
    metrics, get = plan
    for (key, several), v in zip(metrics, get(record), strict=False):
        if v is not None:
            if not several:
                sk(key).add(v)
                continue
            add = sk(key).add
            values, counts = v
            if counts is None:
                for x in values:
                    add(x)
            else:
                for x, n in zip(values, counts, strict=True):
                    add(x, n)


def add_request(sk: Callable[[str], Sketch], rec: RequestRecord) -> None:
    """Each sample of ``rec`` into the sketch ``sk(key)`` of its metric: a failed request's only where the
    registry says failures count (``of="all"``), a cancelled one's where it says so (``Metric.cancelled``), the open
    loop's only with an intended start."""
    if rec.cancelled is not None:
        _add(sk, _CANCELLED[rec.intended_start is not None], rec)
        return
    _add(sk, _REQUEST[rec.error is None, rec.intended_start is not None], rec)


def add_session(sk: Callable[[str], Sketch], rec: SessionRecord) -> None:
    """An ended session's samples into the sketches of the registry's session metrics."""
    _add(sk, _SESSION, rec)
