"""A step's sessions and prefix cache, as reported in summary.json, InfluxDB and the report. Pure.

Prefix cache, measured two ways, each with its source named:

- client: ``usage.prompt_tokens_details.cached_tokens`` (vLLM, SGLang, OpenAI; llama.cpp's ``timings.cache_n``
  where usage lacks it) summed over the requests that report it, as a share of their prompt tokens (overall and
  by turn bucket);
- server: the step's delta of ``/metrics`` prefix-cache counters (vLLM's ``prefix_cache_hits`` /
  ``prefix_cache_queries``, in tokens), see ``analysis.server``.

Where neither exists the summary says "not reported by the endpoint" instead of a number.

Agent stall (mean, per session): how long a session waited on the endpoint beyond what the same calls took at
the run's first (lowest-load) step — per call, its TTFT beyond the first step's mean TTFT for that turn bucket,
plus its decode time beyond the first step's mean time per output token; summed over the step's calls and
divided by its sessions (calls per session × the extra per call). It is 0 at the first step by construction,
and it says how much one slow call delays every step after it.
"""

from __future__ import annotations

from msgspec import UNSET, UnsetType, convert

from harness.metrics.aggregate import Bucket, summarize_sketch
from harness.metrics.sessions import SessionStats, turn_sketch
from harness.summary import CacheClient, CacheServer, Percentiles, PrefixCache, Server, Sessions, TurnBucket

__all__ = ["CLIENT_SOURCE", "NOT_REPORTED", "SERVER_SOURCE", "agent_stall", "cache_view", "explain_cache",
           "session_view"]

CLIENT_SOURCE = "usage.prompt_tokens_details.cached_tokens"
CLIENT_SOURCES = {"responses": "usage.input_tokens_details.cached_tokens", "messages": "usage.cache_read_input_tokens"}
"""The usage field each API reports cached prompt tokens in (chat and completions: ``CLIENT_SOURCE``)."""
TIMINGS_SOURCE = "timings.cache_n (llama.cpp)"
SERVER_SOURCE = "/metrics prefix_cache_hits / prefix_cache_queries (vLLM), the step's delta"
NOT_REPORTED = "not reported by the endpoint"


def _share(prompt: int, cached: int) -> float | None:
    return round(cached / prompt, 4) if prompt else None


def cache_view(bucket: Bucket, server: Server | None, api: str = "chat") -> PrefixCache:
    """``prefix_cache`` of a step: client-side and server-side hit shares, with their sources; with
    ``workload.trace``, the trace's own ceiling beside them."""
    c = bucket.cache
    usage = CLIENT_SOURCES.get(api, CLIENT_SOURCE)
    source = usage if not c.from_timings else TIMINGS_SOURCE if c.from_timings == c.requests \
        else f"{usage} and {TIMINGS_SOURCE}"
    client = CacheClient(source=source, note=NOT_REPORTED)
    if c.requests:
        turns = bucket.sessions.turns if bucket.sessions is not None else None
        client = CacheClient(source=source, requests=c.requests, prompt_tokens=c.prompt_tokens,
                             cached_tokens=c.cached_tokens, cached_share=_share(c.prompt_tokens, c.cached_tokens),
                             by_turn=UNSET if turns is None else {label: _share(t[3], t[4]) for label, t in sorted(
                                 turns.items(), key=lambda kv: _first_turn(kv[0])) if t[2]})
    hits = server.prefix_cache_hits if server is not None else UNSET
    queries = server.prefix_cache_queries if server is not None else UNSET
    srv = CacheServer(source=SERVER_SOURCE, queries=queries, hits=hits, hit_rate=round((hits or 0) / queries, 4)) \
        if isinstance(queries, float) and queries else CacheServer(source=SERVER_SOURCE, note=NOT_REPORTED)
    of = bucket.extra.get("prefix_ceiling_of", 0)
    ceiling: dict[str, float | int | str] | None = None
    if of:  # workload.trace: what an unbounded cache could have served, by the trace's own block ids
        ideal = bucket.extra.get("prefix_ceiling_tokens", 0)
        ceiling = {"source": "trace hash_ids", "prompt_tokens": of, "cached_tokens": ideal,
                   "share": round(ideal / of, 4), "blocks": _blocks(bucket)}
    return PrefixCache(client=client, server=srv, ceiling=ceiling)


def _blocks(bucket: Bucket) -> str:
    """Whether the trace's blocks were as many tokens as planned, by the server's own prompt counts: "token-exact"
    (every prompt counted its trace length and template), "approximate" (off: the ceiling's block edges are not
    the server's), "unmeasured" (the server reported no prompt tokens)."""
    if not bucket.prompt_error_n:
        return "unmeasured"
    return "token-exact" if bucket.prompt_error_sum == 0 else "approximate"


def agent_stall(step: Bucket, baseline: Bucket) -> float | None:
    """Mean seconds per session beyond the baseline step's speed (see the module docstring); None without data."""
    s, b = step.sessions, baseline.sessions
    if s is None or b is None or not s.ended or not b.decode_tokens:
        return None
    extra = 0.0
    calls = 0
    for label in s.turns:
        mine, base = step.sketches.get(turn_sketch(label)), baseline.sketches.get(turn_sketch(label))
        if mine is None or base is None or not mine.count or not base.count:
            continue
        extra += mine.sum - mine.count * base.mean
        calls += mine.count
    if not calls:
        return None
    extra += s.decode_s - s.decode_tokens * (b.decode_s / b.decode_tokens)
    return round(extra / calls * (s.call_sum / s.ended), 4) + 0.0  # + 0.0: no "-0.0" in the summary


def _ms(bucket: Bucket, name: str, scale: float = 1000.0) -> Percentiles:
    sk = bucket.sketches.get(name)
    return convert(summarize_sketch(sk, scale), Percentiles) if sk is not None else Percentiles(count=0)


def session_view(bucket: Bucket, baseline: Bucket | None) -> Sessions | None:
    """``sessions`` of a step: ended sessions and their figures, TTFT by turn bucket, agent stall."""
    s: SessionStats | None = bucket.sessions
    if s is None:
        return None
    stall = agent_stall(bucket, baseline) if baseline is not None else None
    return Sessions(
        ended=s.ended, failed=s.failed, ended_full=s.ended_full, compactions=s.compactions,
        turns_mean=round(s.turn_sum / s.ended, 2) if s.ended else None,
        calls_mean=round(s.call_sum / s.ended, 2) if s.ended else None,
        duration_ms=_ms(bucket, "session_duration"), model_time_ms=_ms(bucket, "session_model_time"),
        session_ttft_ms=_ms(bucket, "session_ttft"), context_tokens=_ms(bucket, "session_context", scale=1.0),
        agent_stall_s=stall,
        by_turn={label: TurnBucket(calls=t[0], ok=t[1], ttft_ms=_ms(bucket, turn_sketch(label)))
                 for label, t in sorted(s.turns.items(), key=lambda kv: _first_turn(kv[0]))})


def _first_turn(label: str) -> int:
    """``"2-4"`` -> 2, ``"17+"`` -> 17: turn buckets in turn order."""
    return int(label.split("-")[0].rstrip("+"))


def _hit(view: PrefixCache | None) -> tuple[float, str] | None:
    if view is None:
        return None
    if isinstance(share := view.client.cached_share, float):
        return share, "client"
    if view.server.hit_rate is not None:
        return view.server.hit_rate, "server"
    return None


def _by_turn(view: PrefixCache | None) -> dict[str, float | None]:
    turns = view.client.by_turn if view is not None else UNSET
    return {} if isinstance(turns, UnsetType) else turns


FELL = 0.05
"""A hit rate that fell by more than this (5 points) is part of the knee's reason."""


def explain_cache(before: PrefixCache | None, after: PrefixCache | None) -> str:
    """The prefix cache's part of the knee's reason when its hit rate fell, e.g. "prefix cache hit 92% -> 41%".

    The step's hit rate mixes first turns (nothing to hit) with later ones, so the first later turns to miss (the
    cache begins to evict the histories of sessions in their think time) can hide in it; then the turn bucket whose
    hit rate fell most is named: "prefix cache hit on turns 5-16 96% -> 85%"."""
    a, b = _hit(before), _hit(after)
    if a is None or b is None:
        return ""
    if b[0] < a[0] - FELL:
        return f"prefix cache hit {100 * a[0]:.0f}% -> {100 * b[0]:.0f}% ({a[1]} side)"
    turns_a, turns_b = _by_turn(before), _by_turn(after)
    drops = [(x - y, label, x, y) for label, x in turns_a.items()
             if x is not None and (y := turns_b.get(label)) is not None and x >= 0.5]  # buckets that did hit before
    drop, label, x, y = max(drops, default=(0.0, "", 0.0, 0.0))
    if drop <= FELL:
        return ""
    return f"prefix cache hit on turns {label} {100 * x:.0f}% -> {100 * y:.0f}% (client side)"
