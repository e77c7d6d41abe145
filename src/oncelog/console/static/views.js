// The views drawn from /api/state (docs/CONSOLE.md): overview, brokers (with the leaders and the
// object store's counters in cluster mode), topics, groups, transactions.
import {$, el, fill, cell, bytes, duration, num, post, hashOf} from "./dom.js";

const armed = new Set();  // abort buttons clicked once (waiting for the confirming click)

function filterText() { return $("#filter").value.trim().toLowerCase(); }
function matches(...names) {
  const f = filterText();
  return !f || names.some((n) => n && String(n).toLowerCase().includes(f));
}

function link(text, view, params, cls) {
  return el("a", {href: hashOf(view, params), class: cls}, text);
}

export function renderOverview(d) {
  const b = d.broker;
  const open = d.transactions.filter((t) => t.open).length;
  const user = d.topics.filter((t) => !t.internal);
  const items = [
    ["brokers", d.brokers.length], ["topics", user.length],
    ["partitions", d.partitions.filter((p) => !p.topic.startsWith("__")).length],
    ["groups", d.groups.length], ["open transactions", open], ["hanging", d.hanging.items.length],
  ];
  const box = el("div", {id: "summary", class: "summary"});
  for (const [name, n] of items) box.append(el("div", {class: "figure", "data-name": name}, el("b", {}, num(n)), el("span", {}, name)));
  $("#summary").replaceWith(box);
  $("#overview-note").textContent = b.mode === "cluster" ? "Cluster member " + b.node_id + ": this page shows what this broker leads." : "";
}

function leadCell(d, node) {
  if (d.broker.mode !== "cluster") return cell("all", 0, "n");
  const n = d.leaders.filter((l) => l.leader === node).length;
  return cell(num(n), n, "n");
}

export function renderBrokers(d) {
  const b = d.broker;
  $("#cluster").textContent = "cluster " + b.cluster_id + " · node " + b.node_id + " · " + b.mode;
  fill("brokers", d.brokers.map((x) => ({key: x.node_id, cells: [
    cell(x.node_id, x.node_id), cell(x.host), cell(x.port, x.port), cell(x.rack || "–"),
    leadCell(d, x.node_id),
    cell(x.this ? el("span", {class: "tag"}, "this broker") : "", x.this ? 0 : 1)]})));
  fill("listeners", b.listeners.map((l) => ({key: l.name, cells: [
    cell(l.name), cell(l.protocol), cell(l.host + ":" + l.port)]})));
  $("#mode-note").textContent = b.mode === "cluster"
    ? "Cluster mode: this page shows the partitions this broker leads, the groups and transactional ids " +
      "its coordinators hold, and the live brokers of its latest view of the cluster."
    : "Embedded single broker: everything is on this broker.";
  $("#mode-note").textContent += " The last snapshot held the broker's event loop for " + b.snapshot_ms + " ms.";
  const internal = $("#show-internal").checked;
  $("#cluster-only").hidden = b.mode !== "cluster";
  const leaders = d.leaders.filter((l) => (internal || !l.internal) && matches(l.topic));
  fill("leaders", leaders.map((l) => ({key: l.topic + "-" + l.partition, cells: [
    cell(l.topic), cell(l.partition, l.partition, "n"),
    cell(l.leader < 0 ? el("span", {class: "tag bad"}, "no live leader") : String(l.leader), l.leader, "n"),
    cell(l.leader_epoch, l.leader_epoch, "n"), cell(l.diskless ? el("span", {class: "tag"}, "diskless") : "–", l.diskless ? 0 : 1)]})),
  "no partitions");
  const c = d.diskless;
  $("#diskless-note").textContent = c ? "" : "This broker has no object store (diskless.storage.url is unset).";
  const rows = [];
  if (c) {
    for (const [k, v] of Object.entries(c).sort()) {
      rows.push({key: k, cells: [cell(k.replaceAll("_", " ")), cell(k.endsWith("bytes") ? bytes(v) : num(v), v, "n")]});
    }
  }
  fill("diskless", rows, "no counters");
}

export function renderTopics(d) {
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
    cell(p.segments < 0 ? "–" : p.segments, p.segments, "n"),
    cell(el("span", {class: "links"},
      link("messages", "messages", {topic: p.topic, partition: p.partition, isolation: "read_committed", from: "newest"}, "messages"),
      " ", link("timeline", "timeline", {topic: p.topic, partition: p.partition}, "timeline")), "")]})), "no partitions");
}

function groupTable(cls, headers, rows, emptyText) {
  const t = el("table", {class: cls}, el("thead", {}, el("tr", {}, ...headers.map(([h, n]) => el("th", {class: n ? "n" : null}, h)))));
  const body = el("tbody");
  for (const r of rows) body.append(r);
  if (!rows.length) body.append(el("tr", {class: "empty"}, el("td", {colSpan: headers.length}, emptyText)));
  t.append(body);
  return t;
}

export function renderGroups(d) {
  const groups = d.groups.filter((g) => matches(g.group_id, ...g.offsets.map((o) => o.topic),
    ...(g.share_partitions || []).map((s) => s.topic)));
  fill("groups", groups.map((g) => ({key: g.group_id, cells: [
    cell(g.group_id), cell(g.state),
    cell(g.type === "classic" ? "classic: " + g.protocol_type + (g.protocol ? " / " + g.protocol : "") : g.type),
    cell(g.members.length, g.members.length, "n"),
    cell(num(g.lag), g.lag, "n" + (g.lag > 0 ? " lag-bad" : ""))]})), "no groups");
  const box = el("div", {id: "group-details"});
  for (const g of groups) {
    const members = groupTable("members", [["member"], ["client id"], ["host"], ["assigned"]], g.members.map((m) =>
      el("tr", {}, el("td", {}, m.member_id + (m.instance_id ? " (static " + m.instance_id + ")" : "")),
        el("td", {}, m.client_id), el("td", {}, m.client_host), el("td", {}, m.assignment.join(", ") || "–"))), "no members");
    let detail;
    if (g.share_partitions) {  // a share group (KIP-932): its records in flight, per share partition
      detail = groupTable("share-partitions", [["topic-partition"], ["start offset", 1], ["in flight", 1], ["acquired", 1],
        ["acknowledged", 1], ["archived", 1], ["log end", 1], ["lag", 1]], g.share_partitions.map((s) =>
        el("tr", {"data-key": s.topic + "-" + s.partition},
          el("td", {}, s.topic + "-" + s.partition), el("td", {class: "n"}, num(s.start_offset)),
          el("td", {class: "n"}, num(s.in_flight)), el("td", {class: "n"}, num(s.acquired)),
          el("td", {class: "n"}, num(s.acknowledged)), el("td", {class: "n"}, num(s.archived)),
          el("td", {class: "n"}, num(s.log_end)),
          el("td", {class: "n" + (s.lag > 0 ? " lag-bad" : ""), title: s.lag === null ? "led by another broker" : null}, num(s.lag)))),
      "nothing fetched yet");
    } else {
      detail = groupTable("offsets", [["topic-partition"], ["committed", 1], ["log end", 1], ["lag", 1], ["member"]],
        g.offsets.map((o) => el("tr", {"data-key": o.topic + "-" + o.partition},
          el("td", {}, o.topic + "-" + o.partition), el("td", {class: "n"}, num(o.committed)),
          el("td", {class: "n"}, num(o.log_end)),
          el("td", {class: "n" + (o.lag > 0 ? " lag-bad" : ""), title: o.lag === null ? "led by another broker" : null}, num(o.lag)),
          el("td", {}, o.member || "–"))), "no committed offsets");
    }
    box.append(el("div", {class: "group", "data-group": g.group_id},
      el("h3", {}, g.group_id + " · " + g.type + " · " + g.state + " · " + (g.type === "classic" ? "generation " : "epoch ") +
        g.generation + " · lag " + num(g.lag)),
      members, detail));
  }
  $("#group-details").replaceWith(box);
}

function abortButton(h, enabled, why, refresh) {
  const key = h.topic + "-" + h.partition + "@" + h.current_txn_start_offset;
  const b = el("button", {class: "abort" + (armed.has(key) ? " confirm" : ""), disabled: !enabled,
    title: enabled ? "oncelog transactions abort " + h.abort_args.join(" ") : why,
    "data-topic": h.topic, "data-partition": h.partition, "data-start-offset": h.current_txn_start_offset},
    armed.has(key) ? "Confirm abort" : "Abort");
  b.addEventListener("click", () => {
    if (!armed.has(key)) { armed.add(key); b.textContent = "Confirm abort"; b.classList.add("confirm"); return; }
    armed.delete(key);
    abort(h.topic, h.partition, h.current_txn_start_offset, b, refresh);
  });
  return b;
}

async function abort(topic, partition, startOffset, button, refresh) {
  button.disabled = true;
  const out = $("#abort-result");
  out.className = "";
  out.textContent = "aborting " + topic + "-" + partition + " at offset " + startOffset + "…";
  try {
    const doc = await post("/api/transactions/abort", "abort", {topic: topic, partition: partition, start_offset: startOffset});
    out.textContent = "aborted the transaction of producer " + doc.producer_id + " (epoch " + doc.producer_epoch +
      ") on " + topic + "-" + partition;
  } catch (e) {
    out.className = "error";
    out.textContent = "abort failed: " + e.message;
  }
  refresh();
}

export function renderTransactions(d, refresh) {
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
      cell(x.transactional_id || (x.transactional_id_hidden ? "(not shown: no Describe on it)" : "– (unknown to every coordinator)"),
        x.transactional_id || ""),
      cell(x.reason), cell(abortButton(x, d.abort.enabled, d.abort.why_not, refresh), "")]})), "no hanging transactions");
  const txns = d.transactions.filter((t) => matches(t.transactional_id, ...t.partitions));
  fill("transactions", txns.map((t) => {
    const state = el("span", {}, el("span", {class: "tag" + (t.hanging ? " bad" : t.over_timeout ? " warn" : "")}, t.state));
    if (t.hanging) state.append(" ", el("span", {class: "tag bad"}, "hanging"));
    if (t.over_timeout) state.append(" ", el("span", {class: "tag warn"}, "past its timeout"));
    const parts = el("span", {});
    t.partitions.forEach((tp, i) => {
      const cut = tp.lastIndexOf("-");
      if (i) parts.append(", ");
      parts.append(link(tp, "timeline", {topic: tp.slice(0, cut), partition: tp.slice(cut + 1)}));
    });
    return {key: t.transactional_id, class: t.hanging ? "hanging" : t.over_timeout ? "over" : null, cells: [
      cell(t.transactional_id), cell(state, t.state), cell(t.producer_id, t.producer_id, "n"),
      cell(t.producer_epoch, t.producer_epoch, "n"), cell(duration(t.age_ms), t.age_ms === null ? -1 : t.age_ms, "n"),
      cell(duration(t.timeout_ms), t.timeout_ms, "n"), cell(t.partitions.length ? parts : "–", t.partitions.join(", "))]};
  }), "no transactional ids");
}
