"""What the console says beside the numbers, as ``{"topic", "text"}`` rows: the "LLM why" tab and the live
dashboard's why panel both show them. From the live summary, typed as summary.json is (``Summary``)."""

from __future__ import annotations

from msgspec import UnsetType

from harness.analysis.plain import knee_sentence
from harness.analysis.why.decompose import UNKNOWN
from harness.summary import PrefixCache, SplitPart, Step, Summary, TtftSplit, level_unit

__all__ = ["cache_rows", "knee_rows", "sessions_rows", "sessions_text", "split_text", "why_rows"]


def _row(topic: str, text: str) -> dict:
    return {"topic": topic, "text": text}


def knee_rows(summary: Summary, search: dict | None = None) -> list[dict]:
    """The knee with its confidence and reason (a candidate is named as one), and the search's line."""
    knee, unit = summary.knee, level_unit(summary.mode)
    if knee.found and knee.level is not None:
        state = "confirmed" if knee.confirmed else "candidate, not confirmed"
        said = knee_sentence(summary) or knee.reason
        text = f"{knee.level:g} {unit} ({state}, {knee.confidence or 'no'} confidence): {said[:400]}"
    else:
        text = f"not found yet: {knee.reason[:400]}" if knee.reason else "not found yet"
    rows = [_row("knee", text)]
    if search and search.get("line"):
        rows.append(_row("search", str(search["line"])))
    return rows


def why_rows(summary: Summary) -> list[dict]:
    """Fleet changes (the steps they voided), clock warnings, the cost line (from its figures), and for the last
    judged step where its TTFT went and what its tail requests share (``analysis/why/decompose.py``,
    ``analysis/why/attribute.py``)."""
    rows = []
    for e in summary.fleet_events:
        voided = f": step {', '.join(map(str, e.steps))} not judged, level re-run" if e.steps else ""
        rows.append(_row("fleet", f"worker {e.worker} {e.kind}{voided}"))
    rows += [_row("clock", note) for note in summary.clock_warnings or ()]
    if summary.cost_line:
        rows.append(_row("cost", summary.cost_line))
    split = next((s for s in reversed(summary.steps) if s.ttft_split), None)
    if split is not None and not isinstance(split.ttft_split, UnsetType):  # set: the step was picked for it
        rows.append(_row(f"where TTFT goes (step {split.index})", split_text(split.ttft_split)))
    tail = next((s for s in reversed(summary.steps) if s.tail), None)
    if tail is not None and not isinstance(tail.tail, UnsetType):  # set: the step was picked for it
        for a in tail.tail.attributions:
            if a.metric == "ttft_s" and a.verdict in ("cause", "time"):
                rows.append(_row(f"tail p{a.quantile * 100:g} ttft (step {tail.index})",
                                 f"{a.line[:200]} ({a.n_tail} tail requests)"))
    return rows


def _ms(part: object) -> str:
    v = part.p50 if isinstance(part, SplitPart) else None  # server histograms: the estimate
    return "n/a" if v is None else f"{v:.1f}"


def split_text(split: TtftSplit) -> str:
    """p50 ms of each part of TTFT, the client's then the server's where it says."""
    c, srv = split.client, split.server
    share = c.new_connection_share
    n = c.ttft.n if c.ttft and c.ttft.n is not None else 0
    text = (f"p50 ms of {n} requests: ttft {_ms(c.ttft)} = headers {_ms(c.headers)} + to first token "
            f"{_ms(c.headers_to_first_token)}; new connections {'n/a' if share is None else f'{share:.0%}'}; "
            + (f"client: send {_ms(c.send)}, loop lag {_ms(c.loop_lag)}; " if c.send or c.loop_lag else ""))
    if isinstance(srv.prefill, SplitPart):
        return text + f"server prefill {_ms(srv.prefill)}" + (
            f", queue {_ms(srv.queue)}" if isinstance(srv.queue, SplitPart) else "")
    if isinstance(srv.ttft, SplitPart):
        return text + f"server ttft {_ms(srv.ttft)}"
    # The endpoint does not say, or did but not within this step (``analysis/server.NO_STAGE_DELTA``).
    return text + ("server: not reported" if (srv.source or UNKNOWN) == UNKNOWN else "server: not in this step")


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.0%}"


def _p(block: object, unit: str, scale: float = 1.0) -> str:
    """"p50 X / p99 Y unit" of a ``Percentiles`` block; "n/a" without data."""
    p50, p99 = getattr(block, "p50", None), getattr(block, "p99", None)
    if p50 is None or p99 is None:
        return "n/a"
    return f"p50 {p50 / scale:.3g} / p99 {p99 / scale:.3g} {unit}"


def sessions_rows(step: Step) -> list[list[str]]:
    """A step's sessions as [label, value] pairs (``analysis/sessions.session_view``)."""
    s = step.sessions
    assert not isinstance(s, UnsetType)  # callers pick a step with sessions
    stall = "n/a" if s.agent_stall_s is None else f"{s.agent_stall_s:.3g} s a session"
    return [["ended", f"{s.ended} ({s.failed} failed, {s.ended_full} ran every turn)"],
            ["compactions", str(s.compactions)],
            ["turns, calls a session", f"{s.turns_mean if s.turns_mean is not None else 'n/a'}, "
                                       f"{s.calls_mean if s.calls_mean is not None else 'n/a'}"],
            ["session TTFT", _p(s.session_ttft_ms, "ms")], ["duration", _p(s.duration_ms, "s", 1000.0)],
            ["time on the endpoint", _p(s.model_time_ms, "s", 1000.0)],
            ["final context", _p(s.context_tokens, "tokens")], ["agent stall", stall]]


def sessions_text(step: Step) -> str:
    """One line of a step's sessions, for the tab."""
    return "; ".join(f"{label} {value}" for label, value in sessions_rows(step))


def cache_rows(cache: PrefixCache) -> list[list[str]]:
    """The prefix cache, client side and server side, each with its source or why there is no figure."""
    c, s = cache.client, cache.server
    if c.requests:
        share = c.cached_share if isinstance(c.cached_share, float) else None  # UNSET in older files
        client = (f"{_pct(share)} of {c.prompt_tokens or 0:,} "
                  f"prompt tokens cached, {c.requests} requests ({c.source})")
    else:
        client = f"{c.note or 'no figure'} ({c.source})"
    if s.queries:
        server = f"hit rate {_pct(s.hit_rate)} of {s.queries:,.0f} queried tokens ({s.source})"
    else:
        server = f"{s.note or 'no figure'} ({s.source})"
    return [["client", client], ["server", server]]
