// Charts of the last hour (docs/CONSOLE.md, "Charts"), drawn by uPlot (static/vendor/, shipped with
// the package) from /api/history: the broker samples the traffic per topic and the lag per group
// every console.history.interval.ms and keeps the last hour (bounded).
import {api, bytes, num} from "./dom.js";

const COLORS = ["#2b59c3", "#d9480f", "#2f9e44", "#9c36b5", "#e67700", "#0c8599", "#c2255c", "#5c940d",
  "#1864ab", "#862e9c"];
const charts = {};  // container id -> {plot, names}
export let chartEveryMs = 5000;  // as often as the broker samples, but at most every 2 s

// A chart of some series (name -> values, null where there is none) over times (ms), in `box`.
function draw(id, times, series, unit) {
  const box = document.getElementById(id);
  if (!box || box.offsetParent === null) return;  // a hidden view's chart is drawn when it is shown
  const names = Object.keys(series).sort();
  const fmt = unit === "bytes" ? (v) => v === null ? "–" : bytes(v) + "/s" : unit === "rate" ? (v) => v === null ? "–" : num(Math.round(v)) + "/s"
    : (v) => v === null ? "–" : num(Math.round(v));
  box.dataset.series = names.join(",");
  box.dataset.points = String(names.reduce((n, k) => n + series[k].filter((v) => v !== null && v > 0).length, 0));
  const empty = box.parentElement.querySelector(".chart-empty");
  if (empty) empty.hidden = names.length > 0;
  const data = [times.map((t) => t / 1000), ...names.map((n) => series[n])];
  const old = charts[id];
  if (old && old.names.join("\n") === names.join("\n")) {
    old.plot.setData(data);
    return;
  }
  if (old) old.plot.destroy();
  if (!names.length) { delete charts[id]; return; }
  const opts = {
    width: Math.max(320, box.parentElement.clientWidth - 24), height: 220,
    series: [{}, ...names.map((n, i) => ({label: n, stroke: COLORS[i % COLORS.length], width: 2, spanGaps: false, value: (u, v) => fmt(v)}))],
    axes: [{}, {values: (u, vals) => vals.map(fmt), size: 80}],
    legend: {live: true},
    cursor: {drag: {x: false, y: false}},
  };
  charts[id] = {plot: new uPlot(opts, data, box), names: names};  // eslint-disable-line no-undef
}

export async function loadCharts() {
  let doc;
  try {
    doc = await api("/api/history");
  } catch (e) {
    for (const n of document.querySelectorAll(".chart-note")) n.textContent = "no history: " + e.message;
    return;
  }
  chartEveryMs = Math.max(2000, doc.interval_s * 1000);
  const t = doc.times_ms;
  const s = doc.series;
  const dropped = Object.values(doc.dropped).reduce((a, b) => a + b, 0);
  for (const n of document.querySelectorAll(".chart-note")) {
    n.textContent = "one sample every " + doc.interval_s + " s, the last hour" +
      (dropped ? " · " + dropped + " series not kept (too many topics or groups)" : "");
  }
  draw("chart-produce", t, s.produce_bytes, "bytes");
  draw("chart-produce-records", t, s.produce_records, "rate");
  draw("chart-fetch", t, s.fetch_bytes, "bytes");
  const lag = (type) => Object.fromEntries(Object.entries(s.group_lag).filter(([g]) =>
    (doc.group_types[g] === "share") === (type === "share")));
  draw("chart-lag", t, lag("consumer"), "count");
  draw("chart-share-lag", t, lag("share"), "count");
  draw("chart-group-lag", t, lag("consumer"), "count");
  draw("chart-group-share-lag", t, lag("share"), "count");
  document.body.dataset.charts = "loaded";
}
