// Small helpers every view uses (docs/CONSOLE.md). Every value from the broker goes into the
// page as text (textContent, attributes), never as HTML.

export function $(sel) { return document.querySelector(sel); }

export function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  return fillIn(e, attrs, children);
}

const SVG_NS = "http://www.w3.org/2000/svg";
export function svg(tag, attrs, ...children) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null && v !== false) e.setAttribute(k, String(v));
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c instanceof Node ? c : String(c));
  return e;
}

function fillIn(e, attrs, children) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("data-") || k.startsWith("aria-")) e.setAttribute(k, v);
    else if (k === "title") e.title = v;
    else e[k] = v;
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

export function bytes(n) {
  if (n === null || n === undefined || n < 0) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n : n.toFixed(1)) + " " + units[i];
}

export function duration(ms) {
  if (ms === null || ms === undefined) return "–";
  const s = Math.floor(ms / 1000);
  if (s < 60) return s + " s";
  if (s < 3600) return Math.floor(s / 60) + " min " + (s % 60) + " s";
  if (s < 86400) return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
  return Math.floor(s / 86400) + " d " + Math.floor((s % 86400) / 3600) + " h";
}

export function num(n) { return n === null || n === undefined ? "–" : Number(n).toLocaleString("en"); }

export function time(ms) {
  if (ms === null || ms === undefined || ms < 0) return "–";
  return new Date(ms).toISOString().replace("T", " ").replace("Z", "");
}

// The hash of a view: "#name?k=v&…" -> {view, params (URLSearchParams)}
export function parseHash() {
  const h = location.hash.slice(1);
  const i = h.indexOf("?");
  return {view: i < 0 ? h : h.slice(0, i), params: new URLSearchParams(i < 0 ? "" : h.slice(i + 1))};
}

export function hashOf(view, params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== "") q.set(k, v);
  const s = q.toString();
  return "#" + view + (s ? "?" + s : "");
}

// A GET or POST of the console's API. A 401 (not logged in) goes to the login form.
export class HttpError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

export async function api(path, options) {
  const r = await fetch(path, Object.assign({cache: "no-store", credentials: "same-origin"}, options || {}));
  let doc = null;
  try { doc = await r.json(); } catch (e) { doc = {error: "HTTP " + r.status}; }
  if (!r.ok) {
    if (r.status === 401) document.dispatchEvent(new CustomEvent("oncelog-login-needed"));
    throw new HttpError(r.status, doc.error || ("HTTP " + r.status));
  }
  return doc;
}

export function post(path, action, body) {
  return api(path, {method: "POST", headers: {"Content-Type": "application/json", "X-Oncelog-Console": action},
    body: JSON.stringify(body || {})});
}

// A row: {cells: [[text or Node, sort value, class]], class, key}. Sorting by a clicked header.
export const sortState = {};
export function fill(tableId, rows, emptyText) {
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

export function cell(content, sortValue, cls) {
  return [content, sortValue === undefined ? (typeof content === "object" ? "" : content) : sortValue, cls];
}

// Bytes shown by the API ({size, truncated, format, b64}) as text: JSON pretty-printed, text as it
// is, anything else (or mode "hex") as hex.
export function payload(p, mode) {
  if (p === null || p === undefined) return el("span", {class: "null"}, "null");
  const raw = Uint8Array.from(atob(p.b64), (c) => c.charCodeAt(0));
  let text;
  let fmt = mode === "hex" ? "binary" : p.format;
  if (mode === "text" && fmt === "binary") fmt = "text";
  if (fmt === "json") {
    try { text = JSON.stringify(JSON.parse(new TextDecoder().decode(raw)), null, 2); } catch (e) { fmt = "text"; }
  }
  if (fmt === "text") text = new TextDecoder().decode(raw);
  if (fmt === "binary") text = Array.from(raw, (b) => b.toString(16).padStart(2, "0")).join(" ");
  const out = el("span", {class: "payload " + fmt, title: p.size + " bytes" + (p.truncated ? " (first " + raw.length + " shown)" : "")},
    el(fmt === "json" ? "pre" : "span", {}, text));
  if (p.truncated) out.append(el("span", {class: "note"}, " … " + num(p.size) + " bytes"));
  return out;
}
