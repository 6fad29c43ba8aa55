// Draws a Grafana dashboard JSON (grafana/dashboards/*.json) from Prometheus' HTTP API, so that
// the dashboards can be pictured where Grafana cannot be installed. It is not Grafana: it reads
// what those two dashboards use (timeseries, stat and gauge panels, rows, gridPos, units,
// legends, stacking, log axes, value mappings, thresholds, dashed overrides) and draws it with
// the same queries, the same template and interval substitution Grafana applies, and Grafana's
// grid geometry. No libraries, no network beyond the Prometheus given in the URL (which must
// allow this page's origin: Prometheus' --web.cors.origin, ".*" by default).
//
// URL parameters: dashboard (path of the JSON), prometheus (base URL), from and to (unix
// seconds; default the last 30 minutes), job (the $job variable; default "actcd"; $instance is
// "All"), width (page width in px; default the window's).
"use strict";

const params = new URLSearchParams(location.search);
const PALETTE = ["#73bf69", "#f2cc0c", "#8ab8ff", "#ff780a", "#f2495c", "#5794f2", "#b877d9", "#705da0",
  "#37872d", "#fade2a", "#447ebc", "#c15c17", "#890f02", "#0a437c", "#6d1f62", "#584477"];
const COLORS = { green: "#73bf69", red: "#f2495c", orange: "#ff9830", yellow: "#fade2a", blue: "#5794f2" };
// Grafana's grid: 24 columns, 30 px cells, 8 px gaps.
const CELL_H = 30, GAP = 8, COLUMNS = 24;
// The data source's scrape interval (grafana/provisioning: timeInterval 1s).
const SCRAPE_S = 1;

function colorOf(name) { return COLORS[name] || name || PALETTE[0]; }

// ---- units (the subset of Grafana's value formats the dashboards use)

function scaled(v, base, units, decimals) {
  let i = 0;
  while (Math.abs(v) >= base && i < units.length - 1) { v /= base; i++; }
  return fixed(v, decimals) + units[i];
}

function fixed(v, decimals) {
  if (decimals !== undefined) return v.toFixed(decimals);
  if (Number.isInteger(v)) return String(v);
  const a = Math.abs(v);
  return a === 0 ? "0" : a >= 100 ? v.toFixed(0) : a >= 10 ? v.toFixed(1) : v.toFixed(2);
}

function format(v, unit, decimals) {
  if (v === null || v === undefined || Number.isNaN(v)) return "–";
  switch (unit) {
    case "bytes": return scaled(v, 1024, [" B", " KiB", " MiB", " GiB", " TiB"], decimals);
    case "decbytes": return scaled(v, 1000, [" B", " kB", " MB", " GB", " TB"], decimals);
    case "Bps": return scaled(v, 1000, [" B/s", " kB/s", " MB/s", " GB/s"], decimals);
    case "percentunit": return fixed(v * 100, decimals) + "%";
    case "percent": return fixed(v, decimals) + "%";
    case "ops": return short(v, decimals) + " ops/s";
    case "reqps": return short(v, decimals) + " req/s";
    case "cps": return short(v, decimals) + " c/s";
    case "s": return seconds(v, decimals);
    case "none": return fixed(v, decimals);
    default: return short(v, decimals);
  }
}

function short(v, decimals) { return scaled(v, 1000, ["", " K", " Mil", " Bil", " Tri"], decimals); }

function seconds(v, decimals) {
  const a = Math.abs(v);
  if (a === 0) return "0 s";
  if (a < 1e-6) return fixed(v * 1e9, decimals) + " ns";
  if (a < 1e-3) return fixed(v * 1e6, decimals) + " µs";
  if (a < 1) return fixed(v * 1e3, decimals) + " ms";
  if (a < 60) return fixed(v, decimals) + " s";
  if (a < 3600) return fixed(v / 60, decimals) + " min";
  if (a < 86400) return fixed(v / 3600, decimals) + " hour";
  return fixed(v / 86400, decimals) + " day";
}

// ---- queries

// Grafana's $__interval: the range over the panel's width in pixels, never below the scrape
// interval; $__rate_interval: max($__interval + scrape, 4 × scrape).
function intervals(rangeS, widthPx) {
  const interval = Math.max(SCRAPE_S, Math.ceil(rangeS / Math.max(widthPx, 1)));
  return { interval, rate: Math.max(interval + SCRAPE_S, 4 * SCRAPE_S) };
}

function substitute(expr, vars, iv, rangeS) {
  return expr
    .replace(/\$__rate_interval/g, iv.rate + "s")
    .replace(/\$__interval_ms/g, String(iv.interval * 1000))
    .replace(/\$__interval/g, iv.interval + "s")
    .replace(/\$__range_s/g, String(Math.round(rangeS)))
    .replace(/\$__range/g, Math.round(rangeS) + "s")
    .replace(/\$\{(\w+)(?::\w+)?\}|\$(\w+)/g, (m, a, b) => (vars[a || b] !== undefined ? vars[a || b] : m));
}

async function queryRange(base, expr, from, to, step) {
  const q = new URLSearchParams({ query: expr, start: String(from), end: String(to), step: String(step) });
  const r = await fetch(`${base}/api/v1/query_range?${q}`);
  const body = await r.json();
  if (body.status !== "success") throw new Error(`${body.error || r.status}: ${expr}`);
  return body.data.result.map((s) => ({
    metric: s.metric,
    points: s.values.map(([t, v]) => [Number(t), Number(v)]),
  }));
}

function legendName(fmt, metric, expr) {
  if (fmt) return fmt.replace(/\{\{\s*(\w+)\s*\}\}/g, (m, k) => metric[k] || "");
  const labels = Object.entries(metric).filter(([k]) => k !== "__name__").map(([k, v]) => `${k}="${v}"`);
  return (metric.__name__ || expr) + (labels.length ? `{${labels.join(", ")}}` : "");
}

async function panelSeries(panel, ctx, widthPx) {
  const iv = intervals(ctx.to - ctx.from, widthPx);
  const out = [];
  for (const t of panel.targets || []) {
    if (t.hide) continue;
    const expr = substitute(t.expr, ctx.vars, iv, ctx.to - ctx.from);
    for (const s of await queryRange(ctx.prometheus, expr, ctx.from, ctx.to, iv.interval)) {
      out.push({ name: legendName(t.legendFormat, s.metric, expr), points: s.points });
    }
  }
  return out;
}

function lastNotNull(points) {
  for (let i = points.length - 1; i >= 0; i--) if (Number.isFinite(points[i][1])) return points[i][1];
  return null;
}

function maxOf(points) {
  let m = null;
  for (const [, v] of points) if (Number.isFinite(v) && (m === null || v > m)) m = v;
  return m;
}

// ---- drawing

function canvasIn(el, w, h) {
  const c = document.createElement("canvas");
  c.width = w; c.height = h;
  el.appendChild(c);
  return c.getContext("2d");
}

function thresholdColor(defaults, v) {
  let color = PALETTE[0];
  for (const step of (defaults.thresholds && defaults.thresholds.steps) || []) {
    if (step.value === null || v >= step.value) color = colorOf(step.color);
  }
  return color;
}

function mapped(defaults, v) {
  for (const m of defaults.mappings || []) {
    if (m.type === "value" && m.options && m.options[String(v)]) return m.options[String(v)];
  }
  return null;
}

function drawStat(el, panel, series, w, h) {
  const d = panel.fieldConfig.defaults;
  const g = canvasIn(el, w, h);
  if (!series.length) return noData(g, w, h);
  const s = series[0];
  const v = lastNotNull(s.points);
  const map = mapped(d, v);
  let text = panel.options.textMode === "name" ? s.name : map && map.text ? map.text : format(v, d.unit, d.decimals);
  const color = map && map.color ? colorOf(map.color) : thresholdColor(d, v);
  if (panel.options.graphMode === "area") sparkline(g, s.points, w, h, color);
  let size = Math.min(h * 0.45, 40);
  g.font = `500 ${size}px "DejaVu Sans", sans-serif`;
  while (g.measureText(text).width > w - 16 && size > 10) { size -= 1; g.font = `500 ${size}px "DejaVu Sans", sans-serif`; }
  g.fillStyle = color;
  g.textAlign = "center"; g.textBaseline = "middle";
  g.fillText(text, w / 2, h / 2);
}

function sparkline(g, points, w, h, color) {
  const vals = points.filter(([, v]) => Number.isFinite(v));
  if (vals.length < 2) return;
  const t0 = vals[0][0], t1 = vals[vals.length - 1][0];
  let lo = Math.min(...vals.map((p) => p[1])), hi = Math.max(...vals.map((p) => p[1]));
  if (hi === lo) { hi += 1; lo -= 1; }
  g.beginPath();
  vals.forEach(([t, v], i) => {
    const x = ((t - t0) / (t1 - t0 || 1)) * w, y = h - ((v - lo) / (hi - lo)) * h * 0.5;
    i ? g.lineTo(x, y) : g.moveTo(x, y);
  });
  g.lineTo(w, h); g.lineTo(0, h); g.closePath();
  g.fillStyle = color + "33"; g.fill();
}

function drawGauge(el, panel, series, w, h) {
  const d = panel.fieldConfig.defaults;
  const g = canvasIn(el, w, h);
  if (!series.length) return noData(g, w, h);
  const v = lastNotNull(series[0].points);
  const min = d.min !== undefined ? d.min : 0, max = d.max !== undefined ? d.max : 100;
  const frac = Math.max(0, Math.min(1, (v - min) / (max - min || 1)));
  const r = Math.min(w / 2, h) * 0.8, cx = w / 2, cy = h * 0.85;
  g.lineWidth = r * 0.2;
  g.strokeStyle = "#2a2d35";
  g.beginPath(); g.arc(cx, cy, r, Math.PI, 2 * Math.PI); g.stroke();
  g.strokeStyle = thresholdColor(d, v);
  g.beginPath(); g.arc(cx, cy, r, Math.PI, Math.PI + Math.PI * frac); g.stroke();
  g.fillStyle = thresholdColor(d, v);
  g.font = `500 ${Math.max(12, r * 0.35)}px "DejaVu Sans", sans-serif`;
  g.textAlign = "center"; g.textBaseline = "alphabetic";
  g.fillText(format(v, d.unit, d.decimals), cx, cy);
}

function noData(g, w, h) {
  g.fillStyle = "#8e8ea0"; g.font = "13px \"DejaVu Sans\", sans-serif";
  g.textAlign = "center"; g.textBaseline = "middle";
  g.fillText("No data", w / 2, h / 2);
}

function dashOverride(panel, name) {
  for (const o of panel.fieldConfig.overrides || []) {
    if (o.matcher.id !== "byRegexp") continue;
    const m = /^\/(.*)\/$/.exec(o.matcher.options);
    if (m && new RegExp(m[1]).test(name)) {
      const style = o.properties.find((p) => p.id === "custom.lineStyle");
      if (style) return style.value.dash;
    }
  }
  return null;
}

function drawTimeseries(el, panel, series, w, h, ctx) {
  const d = panel.fieldConfig.defaults, custom = d.custom || {};
  const g = canvasIn(el, w, h);
  const stacked = custom.stacking && custom.stacking.mode === "normal";
  const log = custom.scaleDistribution && custom.scaleDistribution.type === "log";
  // Legend: a table (name, last, max) under the chart, as the dashboards ask; rows that do
  // not fit are summarised.
  const rowH = 14, maxRows = Math.max(1, Math.floor((h * 0.4) / rowH) - 1);
  const shown = series.slice(0, maxRows + (series.length === maxRows + 1 ? 1 : 0));
  const legendH = series.length ? (shown.length + 1 + (shown.length < series.length ? 1 : 0)) * rowH + 4 : 0;
  const left = 64, right = 8, top = 10, bottom = 18 + legendH;
  const cw = w - left - right, ch = h - top - bottom;
  if (!series.length) return noData(g, w, h);

  const t0 = ctx.from, t1 = ctx.to;
  // Stacked series are drawn as running sums at each timestamp.
  const drawn = series.map((s) => ({ ...s, plot: s.points.map(([t, v]) => [t, v]) }));
  if (stacked) {
    const acc = new Map();
    for (const s of drawn) {
      s.plot = s.plot.map(([t, v]) => {
        const base = acc.get(t) || 0;
        const top = Number.isFinite(v) ? base + v : base;
        acc.set(t, top);
        return [t, top, base];
      });
    }
  }
  const finite = drawn.flatMap((s) => s.plot.map((p) => p[1])).filter((v) => Number.isFinite(v) && (!log || v > 0));
  let lo = d.min !== undefined ? d.min : Math.min(0, ...finite);
  let hi = d.max !== undefined ? d.max : Math.max(...finite, lo);
  if (log) {
    lo = Math.pow(10, Math.floor(Math.log10(Math.min(...finite, 1))));
    hi = Math.pow(10, Math.ceil(Math.log10(Math.max(...finite, lo * 10))));
  } else if (hi <= lo) {
    hi = lo + 1;
  } else {
    hi += (hi - lo) * 0.05;
  }
  const X = (t) => left + ((t - t0) / (t1 - t0)) * cw;
  const Y = log
    ? (v) => top + ch - ((Math.log10(v) - Math.log10(lo)) / (Math.log10(hi) - Math.log10(lo))) * ch
    : (v) => top + ch - ((v - lo) / (hi - lo)) * ch;

  // Axes and grid.
  g.font = "10px \"DejaVu Sans\", sans-serif"; g.fillStyle = "#8e8ea0"; g.strokeStyle = "#2a2d35"; g.lineWidth = 1;
  const ticks = log
    ? Array.from({ length: Math.round(Math.log10(hi / lo)) + 1 }, (_, i) => lo * Math.pow(10, i))
    : Array.from({ length: 5 }, (_, i) => lo + ((hi - lo) * i) / 4);
  g.textAlign = "right"; g.textBaseline = "middle";
  for (const v of ticks) {
    const y = Math.round(Y(v)) + 0.5;
    g.beginPath(); g.moveTo(left, y); g.lineTo(left + cw, y); g.stroke();
    g.fillText(format(v, d.unit, d.decimals), left - 4, y);
  }
  g.textAlign = "center"; g.textBaseline = "top";
  const span = t1 - t0, tickS = [10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600].find((s) => span / s <= 8) || 3600;
  for (let t = Math.ceil(t0 / tickS) * tickS; t <= t1; t += tickS) {
    const x = Math.round(X(t)) + 0.5;
    if (x > left + cw - 22) break; // its label would be cut at the panel's edge
    g.beginPath(); g.moveTo(x, top); g.lineTo(x, top + ch); g.stroke();
    const dt = new Date(t * 1000);
    g.fillText(`${String(dt.getUTCHours()).padStart(2, "0")}:${String(dt.getUTCMinutes()).padStart(2, "0")}:${String(dt.getUTCSeconds()).padStart(2, "0")}`, x, top + ch + 3);
  }

  // Series: a gap where a sample is missing (spanNulls false) or not finite.
  g.save();
  g.beginPath(); g.rect(left, top, cw, ch); g.clip();
  const fill = (custom.fillOpacity || 0) / 100;
  const stepS = drawn.length && drawn[0].plot.length > 1 ? drawn[0].plot[1][0] - drawn[0].plot[0][0] : 1;
  drawn.forEach((s, i) => {
    const color = PALETTE[i % PALETTE.length];
    const segments = [];
    let cur = [];
    let prevT = null;
    for (const p of s.plot) {
      const ok = Number.isFinite(p[1]) && (!log || p[1] > 0);
      if (!ok || (prevT !== null && p[0] - prevT > stepS * 1.5)) { if (cur.length) segments.push(cur); cur = []; }
      if (ok) cur.push(p);
      prevT = p[0];
    }
    if (cur.length) segments.push(cur);
    const dash = dashOverride(panel, s.name);
    for (const seg of segments) {
      if (fill > 0 && !dash && !log) {
        g.beginPath();
        seg.forEach(([t, v], j) => (j ? g.lineTo(X(t), Y(v)) : g.moveTo(X(t), Y(v))));
        for (let j = seg.length - 1; j >= 0; j--) g.lineTo(X(seg[j][0]), Y(stacked ? seg[j][2] : Math.max(lo, 0)));
        g.closePath();
        g.globalAlpha = stacked ? Math.max(fill, 0.25) : fill; g.fillStyle = color; g.fill(); g.globalAlpha = 1;
      }
      g.beginPath();
      seg.forEach(([t, v], j) => (j ? g.lineTo(X(t), Y(v)) : g.moveTo(X(t), Y(v))));
      if (seg.length === 1) g.arc(X(seg[0][0]), Y(seg[0][1]), 1.5, 0, 2 * Math.PI);
      g.setLineDash(dash || []); g.lineWidth = custom.lineWidth || 1; g.strokeStyle = color; g.stroke();
      g.setLineDash([]);
    }
  });
  g.restore();

  // Legend table.
  let y = top + ch + 18;
  g.textBaseline = "top"; g.font = "10px \"DejaVu Sans\", sans-serif";
  const colLast = w - 110, colMax = w - 10;
  g.fillStyle = "#8e8ea0"; g.textAlign = "right";
  g.fillText("Last *", colLast, y); g.fillText("Max", colMax, y);
  y += rowH;
  shown.forEach((s, i) => {
    g.fillStyle = PALETTE[i % PALETTE.length]; g.fillRect(left - 56, y + 4, 10, 3);
    g.fillStyle = "#ccccdc"; g.textAlign = "left";
    let name = s.name;
    while (g.measureText(name).width > colLast - 80 - left + 40 && name.length > 4) name = name.slice(0, -2);
    g.fillText(name === s.name ? name : name + "…", left - 42, y);
    g.textAlign = "right";
    g.fillText(format(lastNotNull(s.points), d.unit, d.decimals), colLast, y);
    g.fillText(format(maxOf(s.points), d.unit, d.decimals), colMax, y);
    y += rowH;
  });
  if (shown.length < series.length) {
    g.fillStyle = "#8e8ea0"; g.textAlign = "left";
    g.fillText(`… ${series.length - shown.length} more series`, left - 42, y);
  }
}

// ---- the dashboard

async function main() {
  const ctx = {
    prometheus: (params.get("prometheus") || "http://127.0.0.1:9090").replace(/\/$/, ""),
    to: Number(params.get("to")) || Math.floor(Date.now() / 1000),
    vars: { job: params.get("job") || "actcd", instance: ".*" },
  };
  ctx.from = Number(params.get("from")) || ctx.to - 1800;
  const dash = await (await fetch(params.get("dashboard"))).json();
  document.getElementById("title").textContent = dash.title;
  const iso = (t) => new Date(t * 1000).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
  document.getElementById("range").textContent = `${iso(ctx.from)} – ${iso(ctx.to)}`;
  document.getElementById("note").textContent =
    `job=${ctx.vars.job}, instance=All · drawn by grafana/render from ${ctx.prometheus} (not Grafana)`;

  const grid = document.getElementById("grid");
  const width = (Number(params.get("width")) || window.innerWidth) - 16;
  const colW = (width + GAP) / COLUMNS;
  // Panels of a collapsed row stay hidden (Grafana keeps them inside the row until opened).
  let bottom = 0;
  const jobs = [];
  for (const panel of dash.panels) {
    const p = panel.gridPos;
    const x = p.x * colW, y = p.y * (CELL_H + GAP), w = p.w * colW - GAP, h = p.h * CELL_H + (p.h - 1) * GAP;
    bottom = Math.max(bottom, y + h);
    if (panel.type === "row") {
      const el = document.createElement("div");
      el.className = "row" + (panel.collapsed ? " collapsed" : "");
      el.style.cssText = `left:${x}px;top:${y}px;width:${w}px;height:${h}px`;
      el.textContent = (panel.collapsed ? "▸ " : "▾ ") + panel.title +
        (panel.collapsed ? ` (${panel.panels.length} panels, collapsed)` : "");
      grid.appendChild(el);
      continue;
    }
    const el = document.createElement("div");
    el.className = "panel";
    el.style.cssText = `left:${x}px;top:${y}px;width:${w}px;height:${h}px`;
    const title = document.createElement("h2");
    title.textContent = panel.title;
    el.appendChild(title);
    grid.appendChild(el);
    const innerW = Math.floor(w - 2), innerH = Math.floor(h - 2 - 22);
    jobs.push((async () => {
      try {
        const series = await panelSeries(panel, ctx, innerW);
        if (panel.type === "stat") drawStat(el, panel, series, innerW, innerH);
        else if (panel.type === "gauge") drawGauge(el, panel, series, innerW, innerH);
        else drawTimeseries(el, panel, series, innerW, innerH, ctx);
      } catch (e) {
        const err = document.createElement("div");
        err.className = "error";
        err.textContent = String(e);
        el.appendChild(err);
      }
    })());
  }
  grid.style.height = `${bottom}px`;
  await Promise.all(jobs);
  document.title = "rendered";
}

main().catch((e) => {
  document.getElementById("title").textContent = "render failed: " + e;
  document.title = "failed";
});
