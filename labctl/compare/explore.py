"""The report page's explorer: every level of every result as data in the page, drawn by a small script of the page's
own (no library, nothing fetched: the folder works offline) as an SVG chart whose axes the reader picks, whose series
the reader toggles, and whose points say their values, intervals and caveats on hover. The view is kept in the
page's address (#x=…&y=…&hide=A,B), so a view can be shared as a link. Pure: entries in, HTML out; the values go in
as JSON and the script sets them as text, never as markup."""

from __future__ import annotations

import json
from typing import Any

from labctl.bench.metric_table import METRICS, View
from labctl.compare.pivot import letter, level_caveats, level_key, level_name
from labctl.compare.plots import levels_of, series_label
from labctl.compare.rules import Check, Entry

# the explorer's look, in each report page's own style sheet (inside an f-string there: braces doubled on use)
STYLE = """#ex-chart svg { border: 1px solid #ddd; font-family: sans-serif; } p.hint { color: #666; font-size: 12px; }
#ex-series label { margin-right: 1em; font-size: 12px; }"""
AXES = tuple(m for m in METRICS if View.PIVOT in m.views or View.REPORT in m.views)


def explorer_data(entries: list[Entry], checks: list[Check]) -> dict[str, Any]:
    """What the script draws: the metrics it offers, and per result its levels' values, intervals and caveats."""
    failed = {c.rule for c in checks if not c.ok and c.blocking}
    series = []
    for index, entry in enumerate(entries):
        points = []
        for level in levels_of(entry):
            values = {m.key: level.value(m) for m in AXES}
            intervals = {m.key: level.interval(m) for m in AXES if level.interval(m) is not None}
            points.append(
                {
                    "level": level_name(level_key(level)),
                    "concurrency": level.concurrency,
                    "rate": level.target_rate,
                    "n": f"{level.completed}/{level.requests}",
                    "values": values,
                    "intervals": intervals,
                    "caveats": level_caveats(entry, level, failed),
                }
            )
        series.append({"key": letter(index), "label": series_label(index, entry), "points": points})
    metrics = [{"key": m.key, "label": m.titled, "better": m.better} for m in AXES]
    return {"metrics": metrics, "series": series}


def explorer(entries: list[Entry], checks: list[Check]) -> str:
    """The explorer's HTML: its controls, the chart's place, the data and the script."""
    data = json.dumps(explorer_data(entries, checks), allow_nan=False, separators=(",", ":"))
    data = data.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")  # inert inside <script>
    return f"""<div id=explore>
<p>X <select id=ex-x></select> Y <select id=ex-y></select> <span id=ex-series></span></p>
<div id=ex-chart><p>The explorer needs JavaScript; the tables and plots below do not.</p></div>
<p class=hint>Hover a point for its values, intervals (the bar: the Y metric's 95 % interval) and caveats; a
hollow point has a caveat. Tick a result to show or hide it. The view is in the page's address: copy it to share
this view.</p>
</div>
<script type="application/json" id=ex-data>{data}</script>
<script>{SCRIPT}</script>
"""


SCRIPT = r"""
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("ex-data").textContent);
  var NS = "http://www.w3.org/2000/svg";
  var COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"];
  var W = 720, H = 420, L = 70, R = 20, T = 20, B = 50;
  var state = {x: "concurrency", y: "output_throughput", hide: {}};
  var names = {concurrency: "concurrency", rate: "request rate (req/s)"};
  data.metrics.forEach(function (m) { names[m.key] = m.label; });

  function readHash() {
    location.hash.replace(/^#/, "").split("&").forEach(function (part) {
      var kv = part.split("="), value = decodeURIComponent(kv[1] || "");
      if ((kv[0] === "x" || kv[0] === "y") && names.hasOwnProperty(value)) { state[kv[0]] = value; }
      if (kv[0] === "hide") { value.split(",").forEach(function (k) { if (k) { state.hide[k] = true; } }); }
    });
  }
  function writeHash() {
    var hidden = Object.keys(state.hide).filter(function (k) { return state.hide[k]; });
    history.replaceState(null, "", "#x=" + state.x + "&y=" + state.y + (hidden.length ? "&hide=" + hidden.join(",") : ""));
  }
  function value(point, key) {
    if (key === "concurrency") { return point.concurrency; }
    if (key === "rate") { return point.rate; }
    return point.values[key];
  }
  function el(name, attrs, text) {
    var node = document.createElementNS(NS, name);
    Object.keys(attrs).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) { node.textContent = text; }
    return node;
  }
  function fmt(v) { return v === null || v === undefined ? "-" : (Math.abs(v) >= 100 ? v.toFixed(0) : v.toPrecision(3)); }
  function said(point, s) {
    var lines = [s.label, point.level + "  n/N " + point.n];
    data.metrics.forEach(function (m) {
      var v = point.values[m.key], ci = point.intervals[m.key];
      if (v !== null && v !== undefined) { lines.push(m.label + ": " + fmt(v) + (ci ? " [" + fmt(ci[0]) + ", " + fmt(ci[1]) + "]" : "")); }
    });
    point.caveats.forEach(function (c) { lines.push("✗ " + c); });
    return lines.join("\n");
  }
  function controls() {
    ["x", "y"].forEach(function (axis) {
      var select = document.getElementById("ex-" + axis);
      var keys = (axis === "x" ? ["concurrency", "rate"] : []).concat(data.metrics.map(function (m) { return m.key; }));
      keys.forEach(function (k) {
        var option = document.createElement("option");
        option.value = k; option.textContent = names[k]; option.selected = state[axis] === k;
        select.appendChild(option);
      });
      select.addEventListener("change", function () { state[axis] = select.value; writeHash(); draw(); });
    });
    var box = document.getElementById("ex-series");
    data.series.forEach(function (s, i) {
      var label = document.createElement("label"), tick = document.createElement("input");
      tick.type = "checkbox"; tick.checked = !state.hide[s.key]; tick.id = "ex-show-" + s.key;
      tick.addEventListener("change", function () { state.hide[s.key] = !tick.checked; writeHash(); draw(); });
      label.style.color = COLORS[i % COLORS.length];
      label.appendChild(tick); label.appendChild(document.createTextNode(" " + s.label + "  "));
      box.appendChild(label);
    });
  }
  function draw() {
    var chart = document.getElementById("ex-chart");
    while (chart.firstChild) { chart.removeChild(chart.firstChild); }
    var svg = el("svg", {width: W, height: H, viewBox: "0 0 " + W + " " + H, role: "img"});
    var shown = [];
    data.series.forEach(function (s, i) {
      if (state.hide[s.key]) { return; }
      var pts = s.points.filter(function (p) {
        var x = value(p, state.x), y = value(p, state.y);
        return x !== null && x !== undefined && y !== null && y !== undefined;
      });
      shown.push({s: s, i: i, pts: pts});
    });
    var xs = [], ys = [];
    shown.forEach(function (g) { g.pts.forEach(function (p) {
      xs.push(value(p, state.x)); ys.push(value(p, state.y));
      var ci = p.intervals[state.y]; if (ci) { ys.push(ci[0]); ys.push(ci[1]); }
    }); });
    if (!xs.length) {
      svg.appendChild(el("text", {x: W / 2, y: H / 2, "text-anchor": "middle"}, "no level has both figures"));
      chart.appendChild(svg); return;
    }
    var x0 = Math.min.apply(null, xs), x1 = Math.max.apply(null, xs), y0 = Math.min(0, Math.min.apply(null, ys)), y1 = Math.max.apply(null, ys);
    if (x1 === x0) { x1 = x0 + 1; } if (y1 === y0) { y1 = y0 + 1; }
    // a concurrency sweep doubles: drawn on a log2 axis when it spans 16x or more, ticks at its own levels
    var log = state.x === "concurrency" && x0 > 0 && x1 / x0 >= 16;
    function sx(v) {
      var f = log ? Math.log(v / x0) / Math.log(x1 / x0) : (v - x0) / (x1 - x0);
      return L + f * (W - L - R);
    }
    function sy(v) { return H - B - (v - y0) / (y1 - y0) * (H - T - B); }
    svg.appendChild(el("line", {x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#444"}));
    svg.appendChild(el("line", {x1: L, y1: T, x2: L, y2: H - B, stroke: "#444"}));
    var xticks = [];
    if (log) { xs.forEach(function (v) { if (xticks.indexOf(v) < 0) { xticks.push(v); } }); }
    for (var t = 0; t <= 4; t++) {
      if (!log) { xticks.push(x0 + (x1 - x0) * t / 4); }
      var yv = y0 + (y1 - y0) * t / 4;
      svg.appendChild(el("text", {x: L - 6, y: sy(yv) + 4, "text-anchor": "end", "font-size": 11}, fmt(yv)));
      svg.appendChild(el("line", {x1: L, y1: sy(yv), x2: W - R, y2: sy(yv), stroke: "#eee"}));
    }
    xticks.forEach(function (xv) {
      svg.appendChild(el("text", {x: sx(xv), y: H - B + 16, "text-anchor": "middle", "font-size": 11}, fmt(xv)));
    });
    svg.appendChild(el("text", {x: (L + W - R) / 2, y: H - 10, "text-anchor": "middle", "font-size": 12},
      names[state.x] + (log ? " (log scale)" : "")));
    svg.appendChild(el("text", {x: 14, y: (T + H - B) / 2, "text-anchor": "middle", "font-size": 12,
      transform: "rotate(-90 14 " + (T + H - B) / 2 + ")"}, names[state.y]));
    shown.forEach(function (g) {
      var color = COLORS[g.i % COLORS.length];
      var group = el("g", {"class": "series", "data-series": g.s.key});
      var sorted = g.pts.slice().sort(function (a, b) { return value(a, state.x) - value(b, state.x); });
      group.appendChild(el("polyline", {fill: "none", stroke: color, "stroke-width": 1.5,
        points: sorted.map(function (p) { return sx(value(p, state.x)) + "," + sy(value(p, state.y)); }).join(" ")}));
      sorted.forEach(function (p) {
        var cx = sx(value(p, state.x)), cy = sy(value(p, state.y)), ci = p.intervals[state.y];
        if (ci) { group.appendChild(el("line", {x1: cx, x2: cx, y1: sy(ci[0]), y2: sy(ci[1]), stroke: color})); }
        var dot = el("circle", {cx: cx, cy: cy, r: 5, fill: p.caveats.length ? "#fff" : color, stroke: color, "stroke-width": 2});
        dot.appendChild(el("title", {}, said(p, g.s)));
        group.appendChild(dot);
      });
      svg.appendChild(group);
    });
    chart.appendChild(svg);
  }
  readHash();
  controls();
  draw();
})();
"""
