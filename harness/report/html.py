"""``report.html`` (one run) and ``compare.html`` (several): self-contained pages, inline SVG, no network.

They read the typed summary (``analysis.summary_model.Summary``, checked by ``validate.load_summary``); the
verdict's cost line is rendered from the cost's figures, the knee's reason is the run's own prose.
"""

from __future__ import annotations

import html
import json
import os
import time

from msgspec import UNSET

from harness.analysis.counted import WHY, not_counted
from harness.checker import decode_text
from harness.metrics.vocabulary import HEADLINE
from harness.report import charts
from harness.report.answers import answers_section
from harness.report.cells import e as _e
from harness.report.cells import fig as _fig
from harness.report.cells import n as _n
from harness.report.cells import share as _share
from harness.report.cells import table as _table
from harness.report.class_tables import class_table, compare_classes
from harness.report.timeline import timeline_section
from harness.report.validate import load_summary
from harness.report.verdict import verdict_html
from harness.summary import Percentiles, RunCost, Search, SplitPart, Summary, level_key

__all__ = ["compare_html", "read_records", "read_summary", "report_html", "write_report"]

_CSS = """body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1100px;color:#222}
h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ddd;padding:3px 6px;text-align:right}
th{background:#f4f4f4}.verdict{font-size:16px;padding:10px;background:#f6f8fa;border-left:4px solid #888}
.pass{color:#1a7f37}.fail{color:#cf222e}.grid{display:flex;flex-wrap:wrap;gap:8px}.grid>div{flex:1 1 520px}
svg{max-width:100%;height:auto}"""


def _page(title: str, body: str) -> str:
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{_CSS}</style></head><body>{body}</body></html>")


_NO_DATA = Percentiles(count=0)
"""A metric the step has no block for: every figure None."""


def _step_table(s: Summary) -> str:
    key = level_key(s.mode)
    metric = s.knee.metric or "ttft"
    reasons = any("reasoning_time" in st.latency_ms for st in s.steps)  # TTFT and TTFO differ then
    conns = any(st.new_connection_share is not UNSET for st in s.steps)  # older summaries lack it
    head = ["step", key, "requests", "fail", "req/s", "out tok/s", "goodput/s", "TTFT p50", "TTFT p99 [CI]",
            *(["TTFO p99", "reasoning p50"] if reasons else []),
            f"{metric.upper()} p99_slo", "TPOT p99", "E2E p99", *(["new conn"] if conns else []), "stationary", "SLO",
            "counted"]
    rows: list[list[object]] = []
    for st in s.steps:
        why = not_counted(st)
        if not st.requests:  # nothing measured: no figure, not a row of zeros
            rows.append([st.index, _n(st.level), 0, "", *[""] * (len(head) - 5), WHY[why] if why else ""])
            continue
        lat = st.latency_ms
        t = lat.get("ttft", _NO_DATA)
        ci = t.p99_ci
        tp = st.throughput
        rows.append([st.index, _n(st.level), st.requests, sum(st.failures.values()), _fig(tp.requests_per_s),
                     _fig(tp.output_tokens_per_s), _fig(tp.goodput_per_s), _fig(t.p50),
                     f"{_fig(t.p99)} [{_fig(ci[0])}, {_fig(ci[1])}]" if ci else _fig(t.p99),
                     *([_fig(lat.get("ttfo", _NO_DATA).p99), _fig(lat.get("reasoning_time", _NO_DATA).p50)]
                       if reasons else []),
                     _fig(lat.get(metric, _NO_DATA).p99_slo), _fig(lat.get("tpot", _NO_DATA).p99),
                     _fig(lat.get("e2e", _NO_DATA).p99), *([_share(st.new_connection_share, "")] if conns else []),
                     st.stationary, st.slo_passed, "yes" if why is None else WHY[why]])
    return ("<table id='steps'><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>"
            + "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in r) + "</tr>" for r in rows) + "</table>"
            + "<p>Latencies in ms. p99: over successful requests. p99_slo: failed requests ranked as misses "
              "(inf when the p99 falls on a failure) — the figure the knee and the SLOs judge. A step that does not "
              "count (cut short, no requests, its generator late, the fleet changed) neither passes nor fails an "
              "SLO and is left out of the charts' curves."
            + (" New conn: share of requests that opened a connection inside their own time (near 100%: the server "
               "closes connections after each response)." if conns else "") + "</p>")


def _generator_table(s: Summary) -> str:
    """Per step: the workers' loop lag, GC pauses and CPU, and the client's cost per streamed token."""
    key = level_key(s.mode)
    head = ["step", key, "loop lag p99", "loop lag max", "GC pause max", "CPU max %", "worker CPU s", "tokens",
            "CPU µs/token", "late stamps %", "chunks a receive", "bunched by"]
    rows = [[st.index, _n(st.level), *map(_fig, (g.lag_p99_ms, g.lag_max_ms, g.gc_pause_max_ms, g.cpu_max_pct,
                                                  g.cpu_s, g.output_tokens, g.cpu_us_per_token)),
             round(g.shared_stamp_share * 100, 2),
             "" if d is UNSET else d.chunks_per_receive,
             "" if d is UNSET else _BUNCHED.get(d.cause, "")]
            for st in s.steps for g, d in ((st.generator, st.delivery),)]
    return ("<table><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>"
            + "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in r) + "</tr>" for r in rows) + "</table>"
            + "<p>ms, over the step's reports from every worker. Worker CPU: process CPU seconds (user + system) "
              "of all workers while the step ran, warm-up included; tokens: output tokens streamed in the same "
              "period; CPU µs/token: the client's cost per streamed token; late stamps: the requests with chunk "
              "times that may be late by more than 1 ms (the reader fell behind; flagged past 1%); chunks a "
              "receive: output chunks per socket read; bunched by: who made several come at once, on time (the "
              "path: a gateway's buffer, whose TTFT and ITL these are; the server: several events a write).</p>")


_BUNCHED: dict[str | None, str] = {"path": "the path (buffered)", "server_writes": "the server's writes"}


def _cost_table(s: Summary, cost: RunCost) -> str:
    """Per step: the tokens it consumed, what they cost metered, cost per 1M output tokens flat vs metered, the
    break-even (docs/cost.md)."""
    key, cur = level_key(s.mode), cost.currency
    head = [key, "out tok/s", "input tokens", "cached input", "output tokens", f"test cost {cur}",
            f"flat {cur}/1M out", f"metered {cur}/1M out", f"metered + input {cur}/1M out",
            "break-even out tok/month", "capacity out tok/month", "speed floor", "notes"]
    rows = [[_n(st.level), st.throughput.output_tokens_per_s, c.tokens.input, c.tokens.cached_input,
             c.tokens.output, c.test_cost, c.flat_per_mtok, c.metered_per_mtok, c.metered_blended_per_mtok,
             c.break_even_tokens_per_month, c.capacity_tokens_per_month, c.floor, "; ".join(c.notes)]
            for st in s.steps if (c := st.cost)]
    prices = ", ".join(f"{k}: {v}" for k, v in cost.prices.items())
    return _table(head, rows, f"Prices ({_e(prices)}); a month is {cost.hours_per_month:g} hours. Flat per "
                  "1M output tokens: the flat price over the step's sustained output tokens/s (the deployment kept "
                  "at this load). Metered + input: the output price plus the input tokens that come with each "
                  "output token at this step's mix. Break-even: output tokens a month above which flat costs less "
                  "than metered, counted where the speed floor holds; reachable at this load when it is below the "
                  "capacity. Tokens from the server's usage, warm-up included.")


def _search_table(s: Summary, search: Search) -> str:
    unit = level_key(s.mode).replace("_", " ")
    rows = [[e.step, f"{e.level:g}", e.why, e.verdict, e.ended or "", f"{e.warmup_s:g} s: {e.warmup}"]
            for e in search.path]
    return _table(["step", unit, "why this level", "verdict", "ended", "warm-up"], rows,
                  "In visiting order. Good: at or below the knee; past: beyond it (the staircase's judging, on every "
                  "level measured, sorted by load).")


def _mean(part: object) -> object:
    """A TTFT part's mean; None for a part the server does not report (``decompose.UNKNOWN``), no part, or a
    difference that is not a part (its ``note``: the server counted other requests)."""
    return _fig(part.mean_ms) if isinstance(part, SplitPart) and part.note is None else None


def _split_table(s: Summary) -> str:
    """Per step: TTFT in parts, means in ms (they add up), each server part with its source."""
    key = level_key(s.mode)
    head = [key, "client TTFT", "headers", "headers → first token", "send", "loop lag at send", "new conn.",
            "connect p50", "server TTFT", "server queue", "server prefill", "network + client", "server source"]
    rows = []
    for st in s.steps:
        if not st.ttft_split:
            continue
        c, v = st.ttft_split.client, st.ttft_split.server
        rows.append([_n(st.level), _mean(c.ttft), _mean(c.headers), _mean(c.headers_to_first_token), _mean(c.send),
                     _mean(c.loop_lag), _share(c.new_connection_share), _fig(c.connect.p50_ms) if c.connect else None,
                     _mean(v.ttft), _mean(v.queue), _mean(v.prefill), _mean(v.network_client or v.network_client_queue),
                     v.source])
    return _table(head, rows, "Means in ms: client TTFT = network + client + server TTFT; the server's TTFT holds its "
                  "queue and prefill; the request's send is inside its headers time, the worker's loop lag came before "
                  "it. Server parts from its /metrics histograms (the step's delta: every request it "
                  "finished then, not only this test's; quantiles in summary.json with their bucket bounds) or "
                  "llama.cpp's per-request timings (prefill only: network + client then includes its queue).")


def _tail_line(attributions: list, metric: str) -> str:
    """The p99 tail's words, or the p95's when p99 had too few requests to attribute (each line says its quantile)."""
    at = {a.quantile: a for a in attributions if a.metric == metric}
    p99, p95 = at.get(0.99), at.get(0.95)
    if p99 is not None and p99.verdict == "too_few" and p95 is not None:
        return f"{p95.line} ({p99.line.split(': ', 1)[-1]} at p99)"
    return p99.line if p99 is not None else ""


def _tail_table(s: Summary) -> str:
    """Per step: why its tail requests are slow, in words, per latency metric (``analysis.why.attribute``): p99's,
    else p95's."""
    key = level_key(s.mode)
    rows = []
    for st in s.steps:
        attributions = list(st.tail.attributions) if st.tail else []
        if attributions:
            rows.append([_n(st.level), *(_tail_line(attributions, f"{m}_s") for m in HEADLINE)])
    return _table([key, *(f"{m.upper()} tail" for m in HEADLINE)], rows,
                  "Each step's requests above its p99, against the rest, over every recorded feature (prompt, output "
                  "and cached tokens, new connection, worker, time in the step, requests in flight at send, session "
                  "turn, after a failure): a feature is named when it separates them significantly (Holm-corrected) "
                  "and materially; a tail clustered in time but not in features comes from outside the test.")


def _given(x: object) -> bool:
    return x is not None and x is not UNSET


def _sessions_table(s: Summary) -> str:
    """Per measured step: sessions (when the run had any) and the prefix cache (client and server side, each with
    its source)."""
    key = level_key(s.mode)
    steps = [st for st in s.steps if st.requests]  # a step without requests has nothing to say here
    sessions = any(st.sessions for st in steps)
    labels = sorted({lb for st in steps if st.sessions for lb in st.sessions.by_turn},
                    key=lambda lb: int(lb.split("-")[0].rstrip("+")))
    head = [key, *(["sessions", "failed", "turns", "session TTFT p99", "duration p50", "agent stall s"] if sessions
                   else []), "cached (client)", "hit rate (server)",
            *(["ceiling (trace)"] if any(st.prefix_cache and st.prefix_cache.ceiling for st in steps) else []),
            *(f"TTFT p50 turn {lb}" for lb in labels)]
    ceiling = "ceiling (trace)" in head
    rows = []
    for st in steps:
        v = st.sessions or None
        cache = st.prefix_cache or None
        by_turn = v.by_turn if v else {}
        figures = (v.ended, v.failed, v.turns_mean, (v.session_ttft_ms or _NO_DATA).p99,
                   (v.duration_ms or _NO_DATA).p50, v.agent_stall_s) if v else (None,) * 6
        rows.append([_n(st.level), *(figures if sessions else ()), _share(cache.client.cached_share if cache else None),
                     _share(cache.server.hit_rate if cache else None),
                     *([_share(cache.ceiling.get("share") if cache and cache.ceiling else None)] if ceiling else []),
                     *((by_turn[lb].ttft_ms or _NO_DATA).p50 if lb in by_turn else None for lb in labels)])
    return _table(head, rows, ("Sessions counted in the step they ended in; session TTFT p99 = each session's own "
                  "TTFT p99 (its worst below 100 turns), its p99 over sessions; duration includes think time; agent "
                  "stall = mean wait per session beyond the first step's speed. " if sessions else "")
                  + "Cached (client): usage.prompt_tokens_details.cached_tokens / prompt tokens; hit rate (server): "
                  "/metrics prefix-cache hits / queries" + ("; ceiling (trace): the share of the trace's prompt tokens "
                  "an unbounded cache could serve, by its hash_ids." if ceiling else "."))


def _counts(records: list[dict], key: str) -> list[int | float]:
    """The positive numbers under ``key`` (a hand-edited or foreign record with text there is skipped)."""
    return [v for r in records if isinstance(v := r.get(key), (int, float)) and not isinstance(v, bool) and v > 0]


def _workload(records: list[dict]) -> str:
    if not records:
        return "<p>Run with <code>--save-requests</code> to see the lengths actually sent.</p>"
    ok = [r for r in records if r.get("ok")]
    prompt, prompt_target = _counts(ok, "prompt_tokens"), _counts(ok, "prompt_tokens_target")
    out, out_target = _counts(ok, "output_tokens"), _counts(ok, "max_tokens")
    return ("<div class='grid'>" + (f"<div>{charts.histogram(prompt, prompt_target, 'Prompt tokens')}</div>"
                                    if prompt else "")
            + (f"<div>{charts.histogram(out, out_target, 'Output tokens')}</div>" if out else "") + "</div>")


def report_html(s: Summary, records: list[dict] | None = None) -> str:
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(s.started_at or 0))
    meta = (f"<p>Run <b>{_e(s.run_id)}</b> · scenario <b>{_e(s.scenario)}</b> · model "
            f"{_e(s.model)} at {_e(s.host)} · {_e(s.mode)} loop · {_e(s.workers)} "
            f"workers · started {started}</p>")
    steps = s.steps
    parts = [f"<h1>kneecap report: {_e(s.scenario)}</h1>", meta, verdict_html(s)]
    if any(not_counted(st) is None for st in steps):  # the answer's chart, on the first screen
        parts.append(f"<div id='capacity'>{charts.capacity(s)}</div>")
    if s.search is not UNSET and s.search.path:
        parts.append(f"<h2>Search path</h2><p>{_e(s.search.line)}</p>{charts.search_path(s)}"
                     f"{_search_table(s, s.search)}")
    if steps:
        parts += ["<h2>Latency vs load</h2><div class='grid'>"
                  + "".join(f"<div>{charts.latency_vs_load(s, m)}</div>" for m in HEADLINE)
                  + "</div>",
                  f"<h2>Throughput</h2>{charts.throughput_vs_load(s)}",
                  "<h2>Errors</h2>" + (charts.errors_vs_load(s) if any(sum(st.failures.values()) for st in steps)
                                       else "<p>No request failed.</p>"),
                  "<h2>Steps</h2>" + _step_table(s)]
        if any(st.sessions for st in steps) or any(
                st.prefix_cache and _given(st.prefix_cache.client.cached_share) for st in steps):
            title = "Sessions and prefix cache" if any(st.sessions for st in steps) else "Prefix cache"
            parts.append(f"<h2>{title}</h2>" + _sessions_table(s))
        if any(st.classes for st in steps):
            parts.append("<h2>Classes</h2>" + class_table(s))
        if any(st.ttft_split for st in steps):
            parts.append("<h2>Where TTFT goes</h2>" + _split_table(s))
        if any(st.tail for st in steps):
            parts.append("<h2>Why the tail</h2>" + _tail_table(s) + charts.tail_features(s))
        if any(st.verify for st in steps):
            parts.append("<h2>Answers under load</h2>" + answers_section(s))
        if any(st.timeline for st in steps):
            parts.append("<h2>Timeline</h2>" + timeline_section(s))
        if s.cost:
            parts.append(f"<h2>Cost</h2>{charts.cost_vs_load(s)}{_cost_table(s, s.cost)}")
        if any(st.server for st in steps):
            parts.append(f"<h2>Server metrics</h2>{charts.server_vs_load(s)}")
        if any(st.generator.lag_p99_ms is not None for st in steps):
            limit = steps[0].generator.lag_limit_ms
            parts.append(f"<h2>Generator health</h2>{charts.generator_chart(s, limit)}"
                         + (_generator_table(s) if any(st.generator.cpu_s is not None for st in steps) else ""))
    else:
        parts.append("<p>No step has data.</p>")
    parts.append("<h2>Workload sent</h2>" + _workload(records or []))
    return _page(f"kneecap {s.scenario} {s.run_id}", "".join(parts))


def _p99_at(s: Summary, load: float, metric: str = "ttft") -> float | None:  # None: no data at that load
    return next((st.latency_ms.get(metric, _NO_DATA).p99 for st in s.steps
                 if st.level == load and not st.fleet_changed), None)


def _knee_cost(s: Summary) -> list[str]:
    """Cost per 1M output tokens at the run's knee, flat and metered (docs/cost.md), each with its currency."""
    if not s.cost:
        return ["no cost: block", ""]
    at = s.cost.at.get("knee")
    if at is None:
        return ["no knee", ""]
    return [f"{v:.4g} {s.cost.currency}" if v is not None else "n/a"
            for v in (at.flat_per_mtok, at.metered_blended_per_mtok)]


def compare_html(runs: list[tuple[str, Summary]]) -> str:
    base_name, base = runs[0]
    common = sorted(set.intersection(*({st.level for st in s.steps} for _, s in runs)))
    costs = any(s.cost for _, s in runs)
    rows = []
    for name, s in runs:
        level = s.knee.level if s.knee.found else None
        p99 = {load: _p99_at(s, load) for load in common}
        rows.append([name, _n(level), _n(s.slo.max_load_within_slo), *(_knee_cost(s) if costs else []),
                     *(f"{v} ({v / b - 1:+.0%})" if (v := p99[load]) and (b := _p99_at(base, load)) else v
                       for load in common)])
    head = ["run", "knee", "max load within SLO",
            *(["flat per 1M out @ knee", "metered + input per 1M out @ knee"] if costs else []),
            *(f"TTFT p99 @ {load:g}" for load in common)]
    table = ("<table><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>"
             + "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in r) + "</tr>" for r in rows) + "</table>")
    body = (f"<h1>kneecap compare</h1><p>Deltas against the first run, <b>{_e(base_name)}</b>.</p>{table}"
            f"<div class='grid'><div>{charts.overlay(runs, 'ttft', 'p99')}</div>"
            f"<div>{charts.overlay(runs, 'tpot', 'p99')}</div>"
            f"<div>{charts.overlay(runs, 'ttft', 'throughput')}</div></div>" + compare_classes(runs, common))
    return _page("kneecap compare", body)


def read_summary(run_dir: str) -> Summary:
    """RUN_DIR/summary.json, checked against its schema and typed; ValueError "DIR/summary.json: KEY: problem" when
    broken, OSError when it cannot be read."""
    path = os.path.join(run_dir, "summary.json")
    with open(path, "rb") as f:
        return load_summary(f.read(), path)


def read_records(path: str) -> list[dict]:
    """The request records of a requests.jsonl; ValueError naming the file and line of the first bad one."""
    with open(path, "rb") as f:
        try:
            text = decode_text(f.read())
        except ValueError as exc:
            raise ValueError(f"{path} is {exc}") from None
    records = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rec = json.loads(line)
            except ValueError as exc:
                raise ValueError(f"{path}:{n}: not valid JSON ({exc}); delete the line or the file") from None
            if not isinstance(rec, dict):
                raise ValueError(f"{path}:{n}: expected a request record (a JSON object), got {type(rec).__name__}")
            records.append(rec)
    return records


def write_report(run_dir: str) -> str:
    """Write RUN_DIR/report.html from summary.json (and requests.jsonl when present); returns its path.

    Raises ValueError for a summary (or requests.jsonl) that is not what kneecap writes, OSError for files
    that cannot be read or written."""
    summary = read_summary(run_dir)
    req = os.path.join(run_dir, "requests.jsonl")
    records = read_records(req) if os.path.exists(req) else []
    page = report_html(summary, records)  # before opening the file: a failure leaves no empty report
    path = os.path.join(run_dir, "report.html")
    with open(path, "w", encoding="utf-8") as f:
        f.write(page)
    return path
