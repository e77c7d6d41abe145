// oncelog's web console (docs/CONSOLE.md): the page's entry point. JavaScript modules shipped in the
// package, uPlot vendored for the charts, nothing fetched from elsewhere. Polls /api/state every
// REFRESH_MS for the tables, /api/history as often as the broker samples it (at most every 2 s); the message browser and
// the timeline read when their view (its URL) changes.
import {$, api, parseHash, sortState} from "./dom.js";
import {renderOverview, renderBrokers, renderTopics, renderGroups, renderTransactions} from "./views.js";
import {loadMessages, setupMessages, topicChoices} from "./messages.js";
import {loadTimeline, setupTimeline} from "./timeline.js";
import {loadCharts, chartEveryMs} from "./charts.js";
import {checkSession, loggedOut, setupLogin} from "./login.js";

const REFRESH_MS = 2000;
const VIEWS = ["overview", "brokers", "topics", "groups", "transactions", "messages", "timeline"];
let last = null;   // the last /api/state document
let lastOk = 0;    // when it arrived (ms)
let lastCharts = 0;

function render() {
  if (!last) return;
  renderOverview(last);
  renderBrokers(last);
  renderTopics(last);
  renderGroups(last);
  renderTransactions(last, refresh);
  topicChoices(last);
}

function showView() {
  const {view, params} = parseHash();
  const v = VIEWS.includes(view) ? view : "overview";
  for (const s of document.querySelectorAll("main > section")) s.classList.toggle("active", s.dataset.view === v);
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.dataset.view === v);
  if (loggedOut()) return;
  if (v === "messages") loadMessages(params);
  if (v === "timeline") loadTimeline(params);
  if (v === "overview" || v === "groups") loadCharts();
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
  if (inFlight || loggedOut()) return;
  inFlight = true;
  try {
    last = await api("/api/state");
    lastOk = Date.now();
    render();
    document.body.dataset.loaded = "1";
    const v = parseHash().view || "overview";
    if ((v === "overview" || v === "groups") && Date.now() - lastCharts > chartEveryMs) {
      lastCharts = Date.now();
      loadCharts();
    }
  } catch (e) {
    $("#status").classList.add("stale");
    $("#status").textContent = "cannot reach the broker: " + e.message;
  } finally {
    inFlight = false;
    setStatus();
  }
}

async function start() {
  await checkSession();
  showView();
  refresh();
}

document.addEventListener("DOMContentLoaded", () => {
  for (const table of document.querySelectorAll("table[id]")) {
    if (!table.tHead || table.dataset.nosort !== undefined) continue;
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
  setupMessages();
  setupTimeline();
  setupLogin(() => { if (loggedOut()) location.reload(); else start(); });
  window.addEventListener("hashchange", showView);
  start();
  setInterval(() => { if (!$("#paused").checked) refresh(); else setStatus(); }, REFRESH_MS);
});
