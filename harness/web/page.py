'''The live dashboard (``/kneecap/``): one HTML document, its style and script inline.

No library and no CDN: the script fetches ``live.json`` beside it every 2 s (``?poll_ms=`` changes that) and
draws what ``dashboard.payload`` decided, as inline SVG: TTFT/TPOT per window with the load, p50/p99 and
throughput against load with the knee and the SLO lines, the knee search's range, then the percentile table,
the why, sessions and the prefix cache. Text goes in as ``textContent``, never as markup. Each series is a
``<g class="series" data-key=...>`` with one circle a point, ``window.kneecapLive`` the payload last drawn (the
browser test compares the two).
'''

__all__ = ["PAGE"]

PAGE = r"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>kneecap live</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font:14px system-ui,sans-serif;margin:16px;color:#222;background:#fafafa}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:20px 0 6px}
#knee{font-weight:600;font-size:16px;margin:4px 0}#knee.found{color:#b00020}
.muted{color:#666}.grid2{display:grid;grid-template-columns:repeat(auto-fill,minmax(540px,1fr));gap:10px 24px}
svg.chart{width:100%;height:auto;border:1px solid #ddd;background:#fff}
svg text{font:11px system-ui,sans-serif;fill:#333}svg .title{font-size:13px;font-weight:600}
svg .gridline{stroke:#eee}svg .axis{stroke:#999}svg .knee{stroke:#b00020;stroke-dasharray:5 3;stroke-width:1.5}
svg text.knee-label{fill:#b00020}svg .slo{stroke:#777;stroke-dasharray:2 3}svg text.empty{fill:#999;font-size:13px}
svg .bracket{fill:#fde7a9;stroke:#d8a800}svg .next{fill:#fff;stroke:#333;stroke-width:1.5}
table{border-collapse:collapse;margin:4px 0;background:#fff}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}td.topic{white-space:nowrap;font-weight:600}
.v-good{fill:#2e7d32;color:#2e7d32}.v-past{fill:#c62828;color:#c62828}.v-pending{fill:#f9a825;color:#a07000}
.v-not-judged{fill:#9e9e9e;color:#777}
</style></head><body>
<h1 id="title">kneecap</h1>
<p id="knee">no knee yet</p>
<p><span id="status" class="muted"></span> <span id="updated" class="muted">waiting for live.json</span></p>
<div class="grid2">
<svg id="chart-time" class="chart"></svg><svg id="chart-tput" class="chart"></svg>
</div>
<section id="search"><h2>Knee search</h2><p id="search-line"></p><p id="search-state" class="muted"></p>
<svg id="search-range" class="chart" style="max-width:1100px"></svg>
<table id="search-path"><thead><tr><th>step</th><th class="num">level</th><th>verdict</th><th>why</th>
<th>ended by</th><th>warm-up</th></tr></thead><tbody></tbody></table></section>
<div class="grid2">
<section><h2>Percentiles of the running step</h2><table id="pct"><thead></thead><tbody></tbody></table></section>
<section><h2>Why</h2><table id="why"><tbody></tbody></table></section>
<section><h2>Sessions <span id="sessions-step" class="muted"></span></h2><div id="sessions"></div></section>
<section><h2>Prefix cache <span id="cache-step" class="muted"></span></h2><div id="cache"></div></section>
<section><h2>Classes <span id="classes-step" class="muted"></span></h2><div id="classes"></div></section>
</div>
<script>
"use strict";
const SVG_NS = "http://www.w3.org/2000/svg";
const POLL_MS = Number(new URLSearchParams(location.search).get("poll_ms")) || 2000;
const COLOR = {load: "#555", tokens: "#2ca02c", goodput: "#9467bd"};
const METRIC_COLORS = ["#1f77b4", "#ff7f0e", "#d62728", "#17becf", "#8c564b"];
const $ = id => document.getElementById(id);

function node(ns, tag, attrs, text) {
  const e = ns ? document.createElementNS(ns, tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== null && v !== undefined) e.setAttribute(k, v);
  if (text !== null && text !== undefined) e.textContent = String(text);
  return e;
}
const h = (tag, attrs, text) => node(null, tag, attrs, text);
const s = (tag, attrs, text) => node(SVG_NS, tag, attrs, text);
const has = v => v !== null && v !== undefined && Number.isFinite(v);

function fmt(v) {  // a figure as people read it; tables keep integers whole
  if (!has(v)) return "";
  const a = Math.abs(v);
  if (Number.isInteger(v) || a >= 100) return String(Math.round(v));
  return a >= 1 ? v.toFixed(a >= 10 ? 1 : 2) : String(Number(v.toPrecision(3)));
}

function linTicks(lo, hi) {
  const raw = (hi - lo) / 5, mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map(m => m * mag).find(x => x >= raw);
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Number(v.toPrecision(12)));
  return out;
}
function logTicks(lo, hi) {
  const out = [];
  for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++)
    for (const m of [1, 2, 5]) {
      const v = Number((m * 10 ** e).toPrecision(6));
      if (v >= lo && v <= hi) out.push(v);
    }
  return out.length > 8 ? out.filter(t => Math.abs(Math.log10(t) - Math.round(Math.log10(t))) < 1e-9) : out;
}
// Values -> pixels p0..p1, padded, with ticks; fromZero: the axis starts at 0 (load, throughput).
function scale(values, p0, p1, {log = false, fromZero = false} = {}) {
  let lo = Math.min(...values), hi = Math.max(...values);
  if (log) {
    lo /= 1.25; hi *= 1.25;
    const a = Math.log10(lo), b = Math.log10(hi);
    const ticks = logTicks(lo, hi);
    return {f: v => p0 + (Math.log10(v) - a) / (b - a) * (p1 - p0),
            ticks: ticks.length >= 2 ? ticks : linTicks(lo, hi)};
  }
  if (fromZero) lo = Math.min(lo, 0);
  if (hi === lo) { hi = lo + 1; if (!fromZero) lo -= 1; }
  const pad = (hi - lo) * 0.05;
  if (!fromZero) lo -= pad;
  hi += pad;
  return {f: v => p0 + (v - lo) / (hi - lo) * (p1 - p0), ticks: linTicks(lo, hi)};
}

const W = 600, H = 300, L = 58, R = 58, T = 28, B = 52;
function axes(svg, spec, x, yl, yr) {
  svg.append(s("line", {x1: L, y1: H - B, x2: W - R, y2: H - B, class: "axis"}));
  for (const t of x.ticks) {
    const px = x.f(t);
    if (px >= L - 1 && px <= W - R + 1) svg.append(s("text", {x: px, y: H - B + 14, "text-anchor": "middle"}, fmt(t)));
  }
  svg.append(s("text", {x: (L + W - R) / 2, y: H - B + 28, "text-anchor": "middle"}, spec.xLabel));
  for (const [y, at, anchor, label] of [[yl, L - 4, "end", spec.yLabel], [yr, W - R + 4, "start", spec.rLabel]]) {
    if (!y) continue;
    for (const t of y.ticks) {
      const py = y.f(t);
      if (py < T - 1 || py > H - B + 1) continue;
      if (y === yl) svg.append(s("line", {x1: L, y1: py, x2: W - R, y2: py, class: "gridline"}));
      svg.append(s("text", {x: at, y: py + 4, "text-anchor": anchor}, fmt(t)));
    }
    const lx = anchor === "end" ? 12 : W - 6;
    svg.append(s("text", {x: lx, y: (T + H - B) / 2, "text-anchor": "middle",
                          transform: `rotate(-90 ${lx} ${(T + H - B) / 2})`}, label));
  }
}

function chart(id, spec) {
  const svg = $(id);
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.replaceChildren(s("text", {x: L, y: 16, class: "title"}, spec.title));
  const drawn = spec.series.map(d => ({...d, pts: d.pts.filter(p => has(p[0]) && has(p[1])
    && (d.axis === "r" || !spec.logY || p[1] > 0))})).filter(d => d.pts.length);
  if (!drawn.length) {
    svg.append(s("text", {x: W / 2, y: H / 2, "text-anchor": "middle", class: "empty"}, "waiting for data"));
    return;
  }
  const marks = spec.vlines || [], lines = (spec.hlines || []).filter(l => !spec.logY || l.y > 0);
  const x = scale([...drawn.flatMap(d => d.pts.map(p => p[0])), ...marks.map(m => m.x)], L, W - R);
  const side = r => drawn.filter(d => (d.axis === "r") === r).flatMap(d => d.pts.map(p => p[1]));
  const left = side(false), right = side(true);
  const yl = left.length ? scale([...left, ...lines.map(l => l.y)], H - B, T,
                                 {log: spec.logY, fromZero: !spec.logY}) : null;
  const yr = right.length ? scale(right, H - B, T, {fromZero: true}) : null;
  axes(svg, spec, x, yl, yr);
  for (const l of yl ? lines : []) {
    const py = yl.f(l.y);
    svg.append(s("line", {x1: L, y1: py, x2: W - R, y2: py, class: "slo"}),
               s("text", {x: W - R - 4, y: py - 4, "text-anchor": "end"}, l.label));
  }
  for (const m of marks) {
    const px = x.f(m.x);
    svg.append(s("line", {x1: px, y1: T, x2: px, y2: H - B, class: "knee"}),
               s("text", {x: px + 4, y: T + 10, class: "knee-label"}, m.label));
  }
  let lx = L;
  for (const d of drawn) {
    const y = d.axis === "r" ? yr : yl, pts = d.pts.map(p => [x.f(p[0]), y.f(p[1])]);
    const path = d.stepped ? pts.flatMap((p, i) => i ? [[p[0], pts[i - 1][1]], p] : [p]) : pts;
    const g = s("g", {class: "series", "data-key": d.key});
    g.append(s("polyline", {points: path.map(p => `${p[0].toFixed(1)},${p[1].toFixed(1)}`).join(" "), fill: "none",
                            stroke: d.color, "stroke-width": d.width || 1.6, "stroke-dasharray": d.dash || null}));
    pts.forEach((p, i) => {
      const c = s("circle", {cx: p[0].toFixed(1), cy: p[1].toFixed(1), r: d.r || 2.4, fill: d.color});
      c.append(s("title", {}, `${d.label}: ${fmt(d.pts[i][1])} at ${fmt(d.pts[i][0])}`));
      g.append(c);
    });
    svg.append(g);
    svg.append(s("line", {x1: lx, y1: H - 8, x2: lx + 16, y2: H - 8, stroke: d.color, "stroke-width": 2,
                          "stroke-dasharray": d.dash || null}), s("text", {x: lx + 20, y: H - 4}, d.label));
    lx += 30 + 6.2 * d.label.length;
  }
}

const at = (rows, xk, yk) => rows.map(r => [r[xk], r[yk]]);
function drawCharts(d) {
  const hist = d.history, steps = [...d.steps].sort((a, b) => a.level - b.level);
  const knee = d.knee ? [{x: d.knee.level, label: `knee ${fmt(d.knee.level)} ${d.unit}`}] : [];
  d.live.forEach((m, i) => { COLOR[m] = METRIC_COLORS[i % METRIC_COLORS.length]; });
  for (const m of d.live) {  // one chart against load per live metric (the server says which), before throughput's
    if (!$(`chart-${m}`)) $("chart-tput").before(node(SVG_NS, "svg", {id: `chart-${m}`, class: "chart"}));
  }
  const pair = (rows, xk, m) => [
    {key: `${m}_p99`, label: `${m} p99`, color: COLOR[m], pts: at(rows, xk, `${m}_p99`)},
    {key: `${m}_p50`, label: `${m} p50`, color: COLOR[m], dash: "2 3", r: 1.8, pts: at(rows, xk, `${m}_p50`)}];
  chart("chart-time", {title: `${d.live.map(m => m.toUpperCase()).join(" and ")} per window, with the load`,
    xLabel: "seconds since start", yLabel: "ms (log)", rLabel: `load (${d.unit})`, logY: true,
    series: [...d.live.flatMap(m => pair(hist, "t", m)), {key: "load", label: "load", color: COLOR.load,
                                                           axis: "r", stepped: true, width: 1.2, r: 1.5,
                                                           pts: at(hist, "t", "load")}]});
  for (const m of d.live) {
    chart(`chart-${m}`, {title: `${m.toUpperCase()} p50 and p99 vs load, each step`, xLabel: `load (${d.unit})`,
      yLabel: "ms (log)", logY: true, vlines: knee, series: pair(steps, "level", m),
      hlines: d.slo.filter(l => l.metric === m).map(l => ({y: l.ms, label: l.label}))});
  }
  chart("chart-tput", {title: "Throughput vs load, each step", xLabel: `load (${d.unit})`, yLabel: "output tokens/s",
    rLabel: "good requests/s", vlines: knee, series: [
      {key: "tokens_per_s", label: "output tokens/s", color: COLOR.tokens, pts: at(steps, "level", "tokens_per_s")},
      {key: "goodput_per_s", label: "good requests/s", color: COLOR.goodput, axis: "r", dash: "4 3",
       pts: at(steps, "level", "goodput_per_s")}]});
}

function fill(table, rows, empty) {  // rows: arrays of [text, class]
  const body = table.tBodies[0];
  body.replaceChildren(...rows.map(r => {
    const tr = h("tr");
    tr.append(...r.map(([text, cls]) => h("td", {class: cls || null}, text)));
    return tr;
  }));
  if (!rows.length) {
    const tr = h("tr");
    tr.append(h("td", {colspan: 8, class: "muted"}, empty));
    body.append(tr);
  }
}

function drawTables(d) {
  const head = h("tr");
  head.append(...d.columns.map((c, i) => h("th", {class: i ? "num" : null}, c)));
  $("pct").tHead.replaceChildren(head);
  fill($("pct"), d.table.map(r => d.columns.map((c, i) => i ? [fmt(r[c]), "num"] : [r[c]])), "no requests yet");
  fill($("why"), d.why.map(r => [[r.topic, "topic"], [r.text]]), "nothing to say yet");
}

function figures(el, caption, panel, unit, extra) {  // a section only while it has data
  el.replaceChildren();
  el.closest("section").hidden = !panel;
  $(caption).textContent = panel ? `step ${panel.step}, ${fmt(panel.level)} ${unit}` : "";
  if (!panel) return;
  const t = h("table", {}), b = h("tbody");
  t.append(b);
  for (const [k, v] of panel.figures) {
    const tr = h("tr");
    tr.append(h("td", {class: "topic"}, k), h("td", {}, v));
    b.append(tr);
  }
  el.append(t);
  if (extra) el.append(extra);
}

function turnsTable(panel) {
  if (!panel || !panel.turns.length) return null;
  const t = h("table", {id: "turns"}), head = h("tr");
  head.append(...["turn", "calls", "ok", "TTFT p50 ms", "TTFT p99 ms", "cached"]
    .map((c, i) => h("th", {class: i ? "num" : null}, c)));
  t.append(h("thead"), h("tbody"));
  t.tHead.append(head);
  const share = v => has(v) ? `${Math.round(100 * v)}%` : "";
  fill(t, panel.turns.map(r => [[r.turn], [fmt(r.calls), "num"], [fmt(r.ok), "num"], [fmt(r.ttft_p50), "num"],
                                [fmt(r.ttft_p99), "num"], [share(r.cached), "num"]]), "");
  return t;
}

const slug = v => `v-${String(v || "pending").replace(/\s+/g, "-")}`;
function drawRange(sr, knee) {
  const svg = $("search-range"), w = 900, hh = 96, pad = 40, base = 60;
  svg.setAttribute("viewBox", `0 0 ${w} ${hh}`);
  svg.replaceChildren();
  const levels = sr.path.map(p => p.level).filter(has);
  const lo = has(sr.min) ? sr.min : Math.min(...levels), hi = has(sr.max) ? sr.max : Math.max(...levels);
  if (!has(lo) || !has(hi)) {
    svg.append(s("text", {x: w / 2, y: base, "text-anchor": "middle", class: "empty"}, "no level tried yet"));
    return;
  }
  const log = lo > 0 && hi / lo >= 8, g = v => log ? Math.log(v) : v;
  const f = v => hi === lo ? w / 2 : pad + (g(v) - g(lo)) / (g(hi) - g(lo)) * (w - 2 * pad);
  svg.append(s("line", {x1: pad, y1: base, x2: w - pad, y2: base, class: "axis"}));
  const b = sr.bracket;
  if (Array.isArray(b) && has(b[0]) && has(b[1])) {
    svg.append(s("rect", {x: f(b[0]), y: base - 30, width: Math.max(f(b[1]) - f(b[0]), 2), height: 40,
                          class: "bracket"}));
  }
  const labels = new Set([lo, hi, ...levels, ...(Array.isArray(b) ? b : []), sr.next].filter(has));
  for (const v of labels) svg.append(s("text", {x: f(v), y: base + 22, "text-anchor": "middle"}, fmt(v)));
  svg.append(s("text", {x: w / 2, y: hh - 2, "text-anchor": "middle"}, `${sr.unit}${log ? " (log scale)" : ""}`));
  const seen = new Map();
  for (const p of sr.path.filter(q => has(q.level))) {
    const k = seen.get(p.level) || 0;
    seen.set(p.level, k + 1);
    const c = s("circle", {cx: f(p.level), cy: base - 7 * k, r: 5, class: `tried ${slug(p.verdict)}`});
    c.append(s("title", {}, `step ${p.step}: ${fmt(p.level)} ${sr.unit}, ${p.verdict}`));
    svg.append(c);
  }
  if (has(sr.next)) {
    svg.append(s("circle", {cx: f(sr.next), cy: base, r: 6, class: "next"}),
               s("text", {x: f(sr.next), y: base - 14, "text-anchor": "middle"}, `next: ${fmt(sr.next)}`));
  }
  if (knee) svg.append(s("line", {x1: f(knee.level), y1: 8, x2: f(knee.level), y2: base + 8, class: "knee"}),
                       s("text", {x: f(knee.level) + 4, y: 16, class: "knee-label"}, `knee ${fmt(knee.level)}`));
}

const warmup = p => [has(p.warmup_s) ? `${fmt(p.warmup_s)} s` : "", p.warmup ? `(${p.warmup})` : ""].join(" ").trim();
function drawSearch(sr, knee) {
  $("search-line").textContent = sr.line;
  const range = has(sr.min) && has(sr.max) ? `, ${fmt(sr.min)}–${fmt(sr.max)} ${sr.unit}` : "";
  const res = has(sr.resolution) ? `, to within ${fmt(sr.resolution)} ${sr.unit}` : "";
  $("search-state").textContent = `${sr.mode}: ${sr.state}${range}${res}`;
  drawRange(sr, knee);
  fill($("search-path"), sr.path.map(p => [[p.step], [fmt(p.level), "num"], [p.verdict, slug(p.verdict)], [p.why],
                                           [p.ended || ""], [warmup(p)]]), "no level tried yet");
}

function render(d) {
  $("title").textContent = d.title;
  const knee = $("knee");
  knee.textContent = d.headline;
  knee.className = d.knee ? "found" : "";
  $("status").textContent = d.status;
  drawCharts(d);
  drawSearch(d.search, d.knee);
  drawTables(d);
  figures($("sessions"), "sessions-step", d.sessions, d.unit, turnsTable(d.sessions));
  figures($("cache"), "cache-step", d.prefix_cache, d.unit);
  figures($("classes"), "classes-step", d.classes, d.unit);
}

let polls = 0;
async function poll() {
  let data = null;
  try {
    const r = await fetch("live.json", {cache: "no-store"});
    if (!r.ok) throw new Error(`HTTP ${r.status}`);
    data = await r.json();
  } catch (e) {
    $("updated").textContent = `not updated (${e.message}); trying again`;
  }
  setTimeout(poll, POLL_MS);
  if (data) {  // a drawing error is the page's own, thrown (not taken for a network one)
    render(data);
    window.kneecapLive = data;
    document.body.dataset.polls = String(++polls);
    $("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
  }
}
poll();
</script></body></html>
"""
