// The message browser (docs/CONSOLE.md, "Messages"): one partition's records as a read_committed
// consumer sees them, or everything with each record's fate and the markers. Every view is its
// URL: #messages?topic=T&partition=P&isolation=read_committed&offset=O (or from=newest|beginning,
// before=O, ts=MS; q=…&in=key|value|both; limit=N; show=auto|text|hex).
import {$, el, api, hashOf, num, time, payload, bytes} from "./dom.js";

const FATE_LABEL = {plain: "not transactional", committed: "committed", aborted: "aborted", open: "open"};
let lastParams = null;

function params() {
  const f = (id) => $(id).value.trim();
  const p = {topic: f("#msg-topic"), partition: f("#msg-partition") || "0", isolation: f("#msg-isolation")};
  const from = f("#msg-from");
  if (from === "offset") p.offset = f("#msg-offset") || "0";
  else if (from === "timestamp") {
    const ts = Date.parse(f("#msg-ts") + "Z");
    if (!Number.isNaN(ts)) p.ts = String(ts);
  } else p.from = from;
  if (f("#msg-q")) { p.q = f("#msg-q"); p.in = f("#msg-in"); }
  if (f("#msg-limit") && f("#msg-limit") !== "50") p.limit = f("#msg-limit");
  if (f("#msg-mode") !== "auto") p.show = f("#msg-mode");
  return p;
}

function formFrom(p) {
  $("#msg-topic").value = p.get("topic") || "";
  $("#msg-partition").value = p.get("partition") || "0";
  $("#msg-isolation").value = p.get("isolation") === "everything" ? "everything" : "read_committed";
  const from = p.has("ts") ? "timestamp" : p.has("offset") ? "offset" : (p.get("from") || (p.has("before") ? "offset" : "newest"));
  $("#msg-from").value = from;
  $("#msg-offset").value = p.get("offset") || p.get("before") || "";
  $("#msg-ts").value = p.has("ts") ? new Date(Number(p.get("ts"))).toISOString().slice(0, 19) : "";
  $("#msg-q").value = p.get("q") || "";
  $("#msg-in").value = p.get("in") || "both";
  $("#msg-limit").value = p.get("limit") || "50";
  $("#msg-mode").value = p.get("show") || "auto";
  showStartInputs();
}

function showStartInputs() {
  $("#msg-offset").hidden = $("#msg-from").value !== "offset";
  $("#msg-ts").hidden = $("#msg-from").value !== "timestamp";
}

function go(p) { location.hash = hashOf("messages", p); }

function fateCell(r) {
  const out = el("span", {class: "fates"});
  if (r.kind === "marker") {
    out.append(el("span", {class: "fate marker-" + r.marker.toLowerCase()}, r.marker + " marker"));
  } else {
    out.append(el("span", {class: "fate fate-" + r.fate}, FATE_LABEL[r.fate] || r.fate));
    if (r.kind === "record" && !r.visible && (r.fate === "committed" || r.fate === "plain")) {
      out.append(" ", el("span", {class: "tag warn", title: "at or above the LSO: a read_committed consumer does not get it yet"}, "above LSO"));
    }
  }
  if (r.transactional_id) out.append(" ", el("a", {class: "txn-id", href: "#transactions", title: "transactional id"}, r.transactional_id));
  else if (r.transactional_id_hidden) out.append(" ", el("span", {class: "note"}, "(transactional id not shown: no Describe)"));
  return out;
}

function headersCell(hs, mode) {
  if (!hs || !hs.length) return "–";
  const out = el("span", {class: "headers"});
  for (const h of hs) out.append(el("span", {class: "header"}, el("b", {}, h.key + ": "), payload(h.value, mode)));
  return out;
}

function renderRows(doc, mode) {
  const body = el("tbody");
  for (const r of doc.rows) {
    const tr = el("tr", {"data-key": String(r.offset), "data-kind": r.kind, "data-fate": r.kind === "marker" ? "marker" : r.fate,
      class: r.kind + " fate-row-" + (r.kind === "marker" ? "marker" : r.fate)});
    const producer = r.producer_id >= 0 ? r.producer_id + " / " + r.producer_epoch : "–";
    if (r.kind === "record") {
      tr.append(el("td", {class: "n"}, String(r.offset)), el("td", {}, time(r.timestamp)),
        el("td", {class: "key"}, payload(r.key, mode)), el("td", {class: "value"}, payload(r.value, mode)),
        el("td", {}, headersCell(r.headers, mode)), el("td", {class: "n"}, producer), el("td", {}, fateCell(r)));
    } else if (r.kind === "marker") {
      tr.append(el("td", {class: "n"}, String(r.offset)), el("td", {}, time(r.timestamp)),
        el("td", {colSpan: 3, class: "note"}, "control record: " + r.marker + " of producer " + r.producer_id +
          " (coordinator epoch " + r.coordinator_epoch + ")"),
        el("td", {class: "n"}, producer), el("td", {}, fateCell(r)));
    } else {
      tr.append(el("td", {class: "n"}, String(r.offset)), el("td", {}, "–"), el("td", {colSpan: 3, class: "error"}, r.error),
        el("td", {class: "n"}, producer), el("td", {}, fateCell(r)));
    }
    body.append(tr);
  }
  if (!doc.rows.length) body.append(el("tr", {class: "empty"}, el("td", {colSpan: 7}, "no records here")));
  $("#messages-table").tBodies[0].replaceWith(body);
}

function pager(doc, p) {
  const base = {topic: doc.topic, partition: doc.partition, isolation: doc.isolation, q: p.get("q"), in: p.get("in"),
    limit: p.get("limit"), show: p.get("show")};
  const box = el("span", {id: "msg-pager", class: "pager"});
  const older = el("button", {type: "button", id: "msg-older", disabled: !doc.more_before}, "← older");
  older.addEventListener("click", () => go(Object.assign({}, base, {before: doc.start_offset})));
  const newer = el("button", {type: "button", id: "msg-newer", disabled: !doc.more_after}, "newer →");
  newer.addEventListener("click", () => go(Object.assign({}, base, {offset: doc.next_offset})));
  const other = doc.isolation === "read_committed" ? "everything" : "read_committed";
  const same = Object.assign({}, base, {isolation: other, offset: doc.start_offset});
  box.append(older, " ", newer, " ",
    el("a", {id: "msg-other-view", href: hashOf("messages", same)}, "the same offsets " + (other === "everything" ? "with every record's fate" : "as read_committed")),
    " · ", el("a", {href: hashOf("timeline", {topic: doc.topic, partition: doc.partition})}, "timeline"));
  $("#msg-pager").replaceWith(box);
}

export async function loadMessages(p) {
  lastParams = p;
  const hash = location.hash;
  formFrom(p);
  if (!p.get("topic")) {
    $("#msg-info").textContent = "Pick a topic and a partition.";
    return;
  }
  const q = new URLSearchParams(p);
  q.delete("show");
  $("#msg-info").textContent = "reading…";
  document.body.dataset.messages = "loading";
  try {
    const doc = await api("/api/messages?" + q.toString());
    if (lastParams !== p) return;  // a newer view was asked for meanwhile
    renderRows(doc, p.get("show") || "auto");
    pager(doc, p);
    const s = doc.scanned;
    $("#msg-info").className = "note";
    $("#msg-info").textContent = doc.topic + "-" + doc.partition + " · " +
      (doc.isolation === "read_committed" ? "as a read_committed consumer sees it" : "everything, with each record's fate and the markers") +
      " · log start " + num(doc.log_start) + " · LSO " + num(doc.lso) + " · log end " + num(doc.high_watermark) +
      " · " + doc.rows.length + " rows" + (s.from >= 0 ? " · looked at offsets " + num(s.from) + "–" + num(Math.max(s.from, s.to - 1)) +
      " (" + bytes(s.bytes) + ")" : "") + (s.budget_spent ? " · stopped at this request's budget: go on with newer →" : "");
    document.body.dataset.messagesFor = hash;  // tests wait for the view of the URL shown
    document.body.dataset.messages = "loaded";
  } catch (e) {
    $("#msg-info").className = "error";
    $("#msg-info").textContent = "cannot read: " + e.message;
    renderRows({rows: []}, "auto");
    document.body.dataset.messagesFor = hash;
    document.body.dataset.messages = "error";
  }
}

export function setupMessages(topics) {
  $("#msg-form").addEventListener("submit", (ev) => { ev.preventDefault(); go(params()); });
  $("#msg-from").addEventListener("change", showStartInputs);
  $("#msg-mode").addEventListener("change", () => go(params()));
  $("#msg-isolation").addEventListener("change", () => go(params()));
}

export function topicChoices(d) {
  const list = el("datalist", {id: "topic-list"});
  for (const t of d.topics) list.append(el("option", {value: t.name}));
  $("#topic-list").replaceWith(list);
}
