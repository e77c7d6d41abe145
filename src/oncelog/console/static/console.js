// oncelog's read-only web console (docs/CONSOLE.md). Plain JavaScript, no framework, nothing
// fetched from elsewhere. Polls /api/state every REFRESH_MS and renders the tables; every value
// from the broker goes into the page as text (textContent), never as HTML.
"use strict";

const REFRESH_MS = 2000;
const VIEWS = ["brokers", "topics", "groups", "transactions"];
let last = null;          // the last /api/state document
let lastOk = 0;           // when it arrived (ms)
const sortState = {};     // table id -> {col, desc}
const armed = new Set();  // abort buttons clicked once (waiting for the confirming click)

function $(sel) { return document.querySelector(sel); }

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("data-")) e.setAttribute(k, v);
    else if (k === "title") e.title = v;
    else e[k] = v;
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function bytes(n) {
  if (n === null || n === undefined || n < 0) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n : n.toFixed(1)) + " " + units[i];
}

function duration(ms) {
  if (ms === null || ms === undefined) return "–";
  const s = Math.floor(ms / 1000);
  if (s < 60) return s + " s";
  if (s < 3600) return Math.floor(s / 60) + " min " + (s % 60) + " s";
  if (s < 86400) return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
  return Math.floor(s / 86400) + " d " + Math.floor((s % 86400) / 3600) + " h";
}

function num(n) { return n === null || n === undefined ? "–" : Number(n).toLocaleString("en"); }

function filterText() { return $("#filter").value.trim().toLowerCase(); }
function matches(...names) {
  const f = filterText();
  return !f || names.some((n) => n && String(n).toLowerCase().includes(f));
}

// A row: {cells: [[text or Node, sort value, class]], class, key}. Sorting by a clicked header.
function fill(tableId, rows, emptyText) {
  const table = document.getElementById(tableId);
  const s = sortState[tableId];
  if (s) {
    rows = rows.slice().sort((a, b) => {
      const x = a.cells[s.col][1], y = b.cells[s.col][1];
      const c = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y));
      return s.desc ? -c : c;
    });
  }
  const body = el("tbody");
  for (const r of rows) {
    const tr = el("tr", {class: r.class, "data-key": r.key});
    for (const [content, , cls] of r.cells) tr.append(el("td", {class: cls}, content));
    body.append(tr);
  }
  if (!rows.length) {
    const n = table.tHead.rows[0].cells.length;
    body.append(el("tr", {class: "empty"}, el("td", {colSpan: n}, emptyText || "none")));
  }
  table.tBodies[0].replaceWith(body);
}

function cell(content, sortValue, cls) {
  return [content, sortValue === undefined ? (typeof content === "object" ? "" : content) : sortValue, cls];
}

function renderBrokers(d) {
  const b = d.broker;
  $("#cluster").textContent = "cluster " + b.cluster_id + " · node " + b.node_id + " · " + b.mode;
  fill("brokers", d.brokers.map((x) => ({key: x.node_id, cells: [
    cell(x.node_id, x.node_id), cell(x.host), cell(x.port, x.port), cell(x.rack || "–"),
    cell(x.this ? el("span", {class: "tag"}, "this broker") : "", x.this ? 0 : 1)]})));
  fill("listeners", b.listeners.map((l) => ({key: l.name, cells: [
    cell(l.name), cell(l.protocol), cell(l.host + ":" + l.port)]})));
  $("#mode-note").textContent = b.mode === "cluster"
    ? "Cluster mode: this page shows the partitions this broker leads, the groups and transactional ids " +
      "its coordinators hold, and the live brokers of its latest view of the cluster."
    : "Embedded single broker: everything is on this broker.";
  $("#mode-note").textContent += " The last snapshot held the broker's event loop for " + b.snapshot_ms + " ms.";
}

function renderTopics(d) {
  const internal = $("#show-internal").checked;
  const topics = d.topics.filter((t) => (internal || !t.internal) && matches(t.name));
  fill("topics", topics.map((t) => ({key: t.name, class: t.internal ? "internal" : null, cells: [
    cell(t.name), cell(num(t.partitions), t.partitions, "n"), cell(num(t.records), t.records, "n"),
    cell(bytes(t.size_bytes), t.size_bytes, "n"),
    cell(num(t.lso_lag), t.lso_lag, "n" + (t.lso_lag > 0 ? " lag-bad" : "")),
    cell(num(t.open_transactions), t.open_transactions, "n"),
    cell(t.groups.map((g) => g.group_id + " (" + num(g.lag) + ")").join(", ") || "–",
      t.groups.reduce((a, g) => a + g.lag, 0))]})), "no topics");
  const parts = d.partitions.filter((p) => (internal || !p.topic.startsWith("__")) && matches(p.topic));
  fill("partitions", parts.map((p) => ({key: p.topic + "-" + p.partition, cells: [
    cell(p.topic), cell(p.partition, p.partition, "n"), cell(num(p.log_start), p.log_start, "n"),
    cell(num(p.lso), p.lso, "n"), cell(num(p.log_end), p.log_end, "n"),
    cell(num(p.lso_lag), p.lso_lag, "n" + (p.lso_lag > 0 ? " lag-bad" : "")),
    cell(bytes(p.size_bytes), p.size_bytes, "n"),
    cell(p.segments < 0 ? "–" : p.segments, p.segments, "n")]})), "no partitions");
}

function renderGroups(d) {
  const groups = d.groups.filter((g) => matches(g.group_id, ...g.offsets.map((o) => o.topic),
    ...(g.share_partitions || []).map((s) => s.topic)));
  fill("groups", groups.map((g) => ({key: g.group_id, cells: [
    cell(g.group_id), cell(g.state),
    cell(g.type === "classic" ? "classic: " + g.protocol_type + (g.protocol ? " / " + g.protocol : "") : g.type),
    cell(g.members.length, g.members.length, "n"),
    cell(num(g.lag), g.lag, "n" + (g.lag > 0 ? " lag-bad" : ""))]})), "no groups");
  const box = el("div", {id: "group-details"});
  for (const g of groups) {
    const members = el("table", {class: "members"}, el("thead", {}, el("tr", {},
      el("th", {}, "member"), el("th", {}, "client id"), el("th", {}, "host"), el("th", {}, "assigned"))));
    const mb = el("tbody");
    for (const m of g.members) {
      mb.append(el("tr", {}, el("td", {}, m.member_id + (m.instance_id ? " (static " + m.instance_id + ")" : "")),
        el("td", {}, m.client_id), el("td", {}, m.client_host), el("td", {}, m.assignment.join(", ") || "–")));
    }
    if (!g.members.length) mb.append(el("tr", {class: "empty"}, el("td", {colSpan: 4}, "no members")));
    members.append(mb);
    const offsets = el("table", {class: "offsets"}, el("thead", {}, el("tr", {},
      el("th", {}, "topic-partition"), el("th", {class: "n"}, "committed"), el("th", {class: "n"}, "log end"),
      el("th", {class: "n"}, "lag"), el("th", {}, "member"))));
    const ob = el("tbody");
    for (const o of g.offsets) {
      ob.append(el("tr", {"data-key": o.topic + "-" + o.partition},
        el("td", {}, o.topic + "-" + o.partition), el("td", {class: "n"}, num(o.committed)),
        el("td", {class: "n"}, num(o.log_end)),
        el("td", {class: "n" + (o.lag > 0 ? " lag-bad" : ""), title: o.lag === null ? "led by another broker" : null},
          num(o.lag)),
        el("td", {}, o.member || "–")));
    }
    if (!g.offsets.length) ob.append(el("tr", {class: "empty"}, el("td", {colSpan: 5}, "no committed offsets")));
    offsets.append(ob);
    const parts = [];
    if (g.share_partitions) {  // a share group (KIP-932): its records in flight, per share partition
      const st = el("table", {class: "share-partitions"}, el("thead", {}, el("tr", {},
        el("th", {}, "topic-partition"), el("th", {class: "n"}, "start offset"), el("th", {class: "n"}, "in flight"),
        el("th", {class: "n"}, "acquired"), el("th", {class: "n"}, "acknowledged"), el("th", {class: "n"}, "archived"),
        el("th", {class: "n"}, "log end"), el("th", {class: "n"}, "lag"))));
      const sb = el("tbody");
      for (const s of g.share_partitions) {
        sb.append(el("tr", {"data-key": s.topic + "-" + s.partition},
          el("td", {}, s.topic + "-" + s.partition), el("td", {class: "n"}, num(s.start_offset)),
          el("td", {class: "n"}, num(s.in_flight)), el("td", {class: "n"}, num(s.acquired)),
          el("td", {class: "n"}, num(s.acknowledged)), el("td", {class: "n"}, num(s.archived)),
          el("td", {class: "n"}, num(s.log_end)),
          el("td", {class: "n" + (s.lag > 0 ? " lag-bad" : ""), title: s.lag === null ? "led by another broker" : null},
            num(s.lag))));
      }
      if (!g.share_partitions.length) sb.append(el("tr", {class: "empty"}, el("td", {colSpan: 8}, "nothing fetched yet")));
      st.append(sb);
      parts.push(st);
    } else {
      parts.push(offsets);
    }
    box.append(el("div", {class: "group", "data-group": g.group_id},
      el("h3", {}, g.group_id + " · " + g.type + " · " + g.state + " · " + (g.type === "classic" ? "generation " : "epoch ") +
        g.generation + " · lag " + num(g.lag)),
      members, ...parts));
  }
  $("#group-details").replaceWith(box);
}

function abortButton(h, enabled, why) {
  const key = h.topic + "-" + h.partition + "@" + h.current_txn_start_offset;
  const b = el("button", {class: "abort" + (armed.has(key) ? " confirm" : ""), disabled: !enabled,
    title: enabled ? "oncelog transactions abort " + h.abort_args.join(" ") : why,
    "data-topic": h.topic, "data-partition": h.partition, "data-start-offset": h.current_txn_start_offset},
    armed.has(key) ? "Confirm abort" : "Abort");
  b.addEventListener("click", () => {
    if (!armed.has(key)) { armed.add(key); b.textContent = "Confirm abort"; b.classList.add("confirm"); return; }
    armed.delete(key);
    abort(h.topic, h.partition, h.current_txn_start_offset, b);
  });
  return b;
}

async function abort(topic, partition, startOffset, button) {
  button.disabled = true;
  const out = $("#abort-result");
  out.className = "";
  out.textContent = "aborting " + topic + "-" + partition + " at offset " + startOffset + "…";
  try {
    const r = await fetch("/api/transactions/abort", {method: "POST",
      headers: {"Content-Type": "application/json", "X-Oncelog-Console": "abort"},
      body: JSON.stringify({topic: topic, partition: partition, start_offset: startOffset})});
    const doc = await r.json();
    if (!r.ok) throw new Error(doc.error || ("HTTP " + r.status));
    out.textContent = "aborted the transaction of producer " + doc.producer_id + " (epoch " + doc.producer_epoch +
      ") on " + topic + "-" + partition;
  } catch (e) {
    out.className = "error";
    out.textContent = "abort failed: " + e.message;
  }
  refresh();
}

function renderTransactions(d) {
  const h = d.hanging;
  const items = h.items.filter((x) => matches(x.topic, x.transactional_id));
  const badge = $("#hanging-badge");
  badge.hidden = !h.items.length;
  badge.textContent = h.items.length;
  const note = $("#hanging-note");
  note.className = h.error ? "note error" : "note";
  note.textContent = (h.checked_ms ? "checked " + duration(Math.max(0, d.now_ms - h.checked_ms)) + " ago with the code of " +
    "`oncelog transactions find-hanging`" : "not checked yet") + (h.error ? " — " + h.error : "") +
    (d.abort.enabled ? "" : " — " + d.abort.why_not);
  fill("hanging", items.map((x) => ({key: x.topic + "-" + x.partition + "@" + x.current_txn_start_offset,
    class: "hanging", cells: [
      cell(x.topic + "-" + x.partition), cell(num(x.current_txn_start_offset), x.current_txn_start_offset, "n"),
      cell(x.producer_id, x.producer_id, "n"), cell(x.producer_epoch, x.producer_epoch, "n"),
      cell(x.transactional_id || "– (unknown to every coordinator)", x.transactional_id || ""),
      cell(x.reason), cell(abortButton(x, d.abort.enabled, d.abort.why_not), "")]})), "no hanging transactions");
  const txns = d.transactions.filter((t) => matches(t.transactional_id, ...t.partitions));
  fill("transactions", txns.map((t) => {
    const state = el("span", {}, el("span", {class: "tag" + (t.hanging ? " bad" : t.over_timeout ? " warn" : "")}, t.state));
    if (t.hanging) state.append(" ", el("span", {class: "tag bad"}, "hanging"));
    if (t.over_timeout) state.append(" ", el("span", {class: "tag warn"}, "past its timeout"));
    return {key: t.transactional_id, class: t.hanging ? "hanging" : t.over_timeout ? "over" : null, cells: [
      cell(t.transactional_id), cell(state, t.state), cell(t.producer_id, t.producer_id, "n"),
      cell(t.producer_epoch, t.producer_epoch, "n"), cell(duration(t.age_ms), t.age_ms === null ? -1 : t.age_ms, "n"),
      cell(duration(t.timeout_ms), t.timeout_ms, "n"), cell(t.partitions.join(", ") || "–")]};
  }), "no transactional ids");
}

function render() {
  if (!last) return;
  renderBrokers(last);
  renderTopics(last);
  renderGroups(last);
  renderTransactions(last);
}

function showView() {
  const v = VIEWS.includes(location.hash.slice(1)) ? location.hash.slice(1) : "topics";
  for (const s of document.querySelectorAll("section")) s.classList.toggle("active", s.dataset.view === v);
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.dataset.view === v);
}

function setStatus() {
  const s = $("#status");
  if (!last) return;
  const age = Date.now() - lastOk;
  s.classList.toggle("stale", age > 3 * REFRESH_MS);
  s.textContent = (age > 3 * REFRESH_MS ? "STALE: last answer " : "updated ") +
    new Date(lastOk).toLocaleTimeString("en-GB") + ($("#paused").checked ? " (paused)" : "");
}

let inFlight = false;
async function refresh() {
  if (inFlight) return;
  inFlight = true;
  try {
    const r = await fetch("/api/state", {cache: "no-store"});
    const doc = await r.json();
    if (!r.ok) throw new Error(doc.error || ("HTTP " + r.status));
    last = doc;
    lastOk = Date.now();
    render();
    document.body.dataset.loaded = "1";
  } catch (e) {
    $("#status").classList.add("stale");
    $("#status").textContent = "cannot reach the broker: " + e.message;
  } finally {
    inFlight = false;
    setStatus();
  }
}

document.addEventListener("DOMContentLoaded", () => {
  for (const table of document.querySelectorAll("table[id]")) {
    [...table.tHead.rows[0].cells].forEach((th, i) => th.addEventListener("click", () => {
      const s = sortState[table.id];
      sortState[table.id] = {col: i, desc: s && s.col === i ? !s.desc : false};
      render();
    }));
  }
  for (const id of ["filter", "show-internal", "paused"]) {  // kept in this browser across reloads
    const input = document.getElementById(id), key = "oncelog-console-" + id;
    const saved = localStorage.getItem(key);
    if (saved !== null) { if (input.type === "checkbox") input.checked = saved === "1"; else input.value = saved; }
    input.addEventListener(input.type === "checkbox" ? "change" : "input", () => {
      localStorage.setItem(key, input.type === "checkbox" ? (input.checked ? "1" : "0") : input.value);
      render();
    });
  }
  window.addEventListener("hashchange", showView);
  showView();
  refresh();
  setInterval(() => { if (!$("#paused").checked) refresh(); else setStatus(); }, REFRESH_MS);
});
