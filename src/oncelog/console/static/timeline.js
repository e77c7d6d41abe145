// A partition's transaction timeline (docs/CONSOLE.md, "Transaction timeline"): one lane per
// producer, its transactions as ranges of offsets (committed, aborted, open), non-transactional
// records on a lane of their own, and the log start, the LSO and the log end as lines. Each range
// links to its records in the message browser. URL: #timeline?topic=T&partition=P[&offset=O].
import {$, el, svg, api, hashOf, num} from "./dom.js";

const W = 1100, LANE = 26, TOP = 34, LEFT = 190;
let lastParams = null;

function rangeLabel(r) {
  const who = r.fate === "plain" ? "non-transactional records" : "producer " + r.producer_id + " (epoch " + r.producer_epoch + ")" +
    (r.transactional_id ? ", transactional id " + r.transactional_id : "");
  const end = r.marker !== null && r.marker !== undefined ? ", " + (r.fate === "committed" ? "COMMIT" : "ABORT") + " marker at " + r.marker : "";
  return r.fate + ": offsets " + r.first + "–" + r.last + end + " — " + who + (r.clipped ? " (began before this window)" : "");
}

// Offsets to x: piecewise linear between the offsets where something starts or ends (ranges,
// markers, the LSO, the log end), each piece as wide as 1 + log2(its length): a 3-record
// transaction stays visible next to a million plain records.
function scale(doc, lo, hi, x0, x1) {
  const at = new Set([lo, hi, doc.lso, doc.high_watermark, doc.log_start]);
  for (const r of doc.ranges) { at.add(r.first); at.add(r.last + 1); if (r.marker != null) { at.add(r.marker); at.add(r.marker + 1); } }
  const cuts = [...at].filter((o) => o >= lo && o <= hi).sort((a, b) => a - b);
  const weights = cuts.slice(1).map((c, i) => 1 + Math.log2(1 + c - cuts[i]));
  const total = weights.reduce((a, b) => a + b, 0) || 1;
  const pos = [x0];
  weights.forEach((w) => pos.push(pos[pos.length - 1] + (x1 - x0) * w / total));
  return (o) => {
    if (o <= cuts[0]) return x0;
    if (o >= cuts[cuts.length - 1]) return x1;
    let i = 1;
    while (cuts[i] < o) i++;
    return pos[i - 1] + (pos[i] - pos[i - 1]) * (o - cuts[i - 1]) / (cuts[i] - cuts[i - 1]);
  };
}

function draw(doc) {
  const lanes = doc.lanes.map((l) => l.producer_id);
  const hasPlain = doc.ranges.some((r) => r.fate === "plain");
  const laneOf = (r) => r.fate === "plain" ? 0 : (lanes.includes(r.producer_id) ? 1 + lanes.indexOf(r.producer_id) : -1);
  const nLanes = 1 + lanes.length;
  const lo = Math.min(doc.start, ...doc.ranges.map((r) => r.first));
  const hi = Math.max(doc.high_watermark, doc.end, lo + 1);
  const x = scale(doc, lo, hi, LEFT, W - 20);
  const height = TOP + nLanes * LANE + 30;
  const root = svg("svg", {id: "timeline-svg", viewBox: "0 0 " + W + " " + height, width: W, height: height, role: "img",
    "aria-label": "transactions of " + doc.topic + "-" + doc.partition});
  for (let i = 0; i < nLanes; i++) {
    const label = i === 0 ? (hasPlain ? "not transactional" : "") :
      (doc.lanes[i - 1].transactional_id || "producer " + doc.lanes[i - 1].producer_id);
    root.append(svg("text", {x: 6, y: TOP + i * LANE + 17, class: "lane-label"}, label));
    root.append(svg("line", {x1: LEFT, x2: W - 20, y1: TOP + i * LANE + LANE - 2, y2: TOP + i * LANE + LANE - 2, class: "lane-line"}));
  }
  for (const r of doc.ranges) {
    const lane = laneOf(r);
    if (lane < 0) continue;  // a producer beyond the lanes shown (the table lists it)
    const last = r.fate === "open" ? Math.max(r.last, doc.high_watermark - 1) : (r.marker ?? r.last);
    const x0 = x(r.first), x1 = Math.max(x(last + 1), x0 + 3);
    const a = svg("a", {href: hashOf("messages", {topic: doc.topic, partition: doc.partition, isolation: "everything", offset: r.first}),
      class: "range range-" + r.fate, "data-fate": r.fate, "data-first": r.first, "data-last": last,
      "data-producer": r.producer_id});
    a.append(svg("title", {}, rangeLabel(r)));
    a.append(svg("rect", {x: x0, y: TOP + lane * LANE + 3, width: x1 - x0, height: LANE - 8, rx: 3}));
    if (r.marker !== null && r.marker !== undefined) {  // the marker: a tick at the end of its range
      a.append(svg("rect", {x: x(r.marker + 1) - 4, y: TOP + lane * LANE + 1, width: 4, height: LANE - 4, class: "marker"}));
    }
    root.append(a);
  }
  const mark = (o, name, cls, dy) => {
    if (o < lo || o > hi) return;
    const right = x(o) > W - 140;
    root.append(svg("line", {x1: x(o), x2: x(o), y1: TOP - 6, y2: height - 24, class: "mark " + cls, "data-offset": o}));
    root.append(svg("text", {x: x(o) + (right ? -3 : 3), y: TOP - 10 - dy, class: "mark-label " + cls,
      "text-anchor": right ? "end" : "start"}, name + " " + num(o)));
  };
  mark(doc.log_start, "log start", "mark-start", 0);
  mark(doc.lso, "LSO", "mark-lso", 12);
  mark(doc.high_watermark, "log end", "mark-end", 0);
  root.append(svg("text", {x: LEFT, y: height - 8, class: "axis"}, num(lo)));
  root.append(svg("text", {x: W - 20, y: height - 8, class: "axis", "text-anchor": "end"}, num(hi)));
  $("#timeline-svg").replaceWith(root);
}

function table(doc) {
  const body = el("tbody");
  for (const r of doc.ranges.filter((r) => r.fate !== "plain").slice().reverse()) {
    body.append(el("tr", {"data-key": r.producer_id + "@" + r.first, "data-fate": r.fate, class: "range-row-" + r.fate},
      el("td", {}, el("span", {class: "fate fate-" + r.fate}, r.fate)),
      el("td", {class: "n"}, num(r.first)),
      el("td", {class: "n"}, r.fate === "open" ? "…" : num(r.marker ?? r.last)),
      el("td", {class: "n"}, r.producer_id + " / " + r.producer_epoch),
      el("td", {}, r.transactional_id || "–"),
      el("td", {}, el("a", {href: hashOf("messages", {topic: doc.topic, partition: doc.partition, isolation: "everything", offset: r.first})}, "records"))));
  }
  if (!body.rows.length) body.append(el("tr", {class: "empty"}, el("td", {colSpan: 6}, "no transactions in this window")));
  $("#timeline-table").tBodies[0].replaceWith(body);
}

export async function loadTimeline(p) {
  lastParams = p;
  const hash = location.hash;
  $("#tl-topic").value = p.get("topic") || "";
  $("#tl-partition").value = p.get("partition") || "0";
  if (!p.get("topic")) { $("#tl-info").textContent = "Pick a topic and a partition."; return; }
  document.body.dataset.timeline = "loading";
  try {
    const doc = await api("/api/timeline?" + new URLSearchParams(p).toString());
    if (lastParams !== p) return;
    draw(doc);
    table(doc);
    const open = doc.open.map((o) => (o.transactional_id || "producer " + o.producer_id) + " from " + num(o.first)).join(", ");
    $("#tl-info").className = "note";
    $("#tl-info").textContent = doc.topic + "-" + doc.partition + " · offsets " + num(doc.start) + "–" + num(Math.max(doc.start, doc.end - 1)) +
      (doc.complete ? "" : " (window cut short: more follows)") + " · log start " + num(doc.log_start) + " · LSO " + num(doc.lso) +
      " · log end " + num(doc.high_watermark) + (open ? " · open: " + open : " · no open transaction");
    document.body.dataset.timelineFor = hash;
    document.body.dataset.timeline = "loaded";
  } catch (e) {
    $("#tl-info").className = "error";
    $("#tl-info").textContent = "cannot read: " + e.message;
    document.body.dataset.timeline = "error";
  }
}

export function setupTimeline() {
  $("#tl-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    location.hash = hashOf("timeline", {topic: $("#tl-topic").value.trim(), partition: $("#tl-partition").value.trim() || "0"});
  });
}
