// ggml-viz viewer. No framework, no build step: the server does the heavy lifting (level of
// detail, filtering); this draws on canvases and small DOM trees. Every string that comes
// from a run (tensor names, token text, paths) is put into the page as text, never as HTML.

"use strict";

// ---- plumbing --------------------------------------------------------------------------

const params = new URLSearchParams(location.search);
const TOKEN = params.get("token") || sessionStorage.getItem("ggml-viz-token") || "";
if (params.get("token")) {
  sessionStorage.setItem("ggml-viz-token", TOKEN);
  history.replaceState(null, "", location.pathname + location.hash); // keep the token out of the address bar
}

// A self-contained report (`ggml-viz export --format html`) carries its answers in the page.
const EMBEDDED = (() => {
  const element = document.getElementById("ggml-viz-data");
  return element ? JSON.parse(element.textContent) : null;
})();

async function api(path, query = {}) {
  if (EMBEDDED) return embeddedAnswer(path, query);
  const qs = new URLSearchParams();
  for (const [key, value] of Object.entries(query)) if (value !== undefined && value !== null && value !== "") qs.set(key, value);
  const response = await fetch(`/api/${path}${qs.toString() ? "?" + qs : ""}`, { headers: { "X-GGML-Viz-Token": TOKEN } });
  if (!response.ok) throw new Error(`${response.status}: ${await response.text()}`);
  return response.json();
}

function embeddedAnswer(path, query) {
  const answers = EMBEDDED.answers;
  if (path === "runs") return answers.runs;
  const part = path.replace(/^runs\/[^/]+\//, "");
  const missing = () => { throw new Error("not in this report: open the run with `ggml-viz view` for everything"); };
  if (["overview", "stats", "graphs", "memory", "timeline", "attention-index"].includes(part)) return answers[part];
  let match;
  if ((match = part.match(/^graph\/(\d+)$/))) return answers[`graph/${match[1]}/${query.layer ?? ""}`] || missing();
  if ((match = part.match(/^occupancy\/(\d+)$/))) return answers[`occupancy/${match[1]}`] || missing();
  const events = answers.events, n = events.graph_id.length;
  const columns = Object.keys(events).filter((key) => key !== "weights"); // weights: the filter's, not a row's
  const row = (i) => Object.fromEntries(columns.map((key) => [key, events[key][i]]).concat([["event", i]]));
  if ((match = part.match(/^event\/(\d+)$/))) return Number(match[1]) < n ? row(Number(match[1])) : missing();
  if (part === "node") {
    for (let i = 0; i < n; i++) if (events.graph_id[i] === Number(query.graph) && events.node_index[i] === Number(query.index)) {
      const r = row(i);
      return { ...r, end_ns: r.start_ns === null ? null : r.start_ns + r.duration_ns, tokens: "", nbytes: null, buffer: null, sources: [] };
    }
    return missing();
  }
  if (part === "search" || part === "events") {
    const name = String(query.name || query.q || "").toLowerCase(), layer = query.layer === undefined || query.layer === "" ? null : Number(query.layer);
    const t0 = query.t0 === undefined || query.t0 === "" ? null : Number(query.t0), t1 = query.t1 === undefined || query.t1 === "" ? null : Number(query.t1);
    // the file-region filter, as the server applies it: nodes reading a weight whose file bytes meet [lo, hi)
    const lo = query.file_lo === undefined || query.file_lo === "" ? null : Number(query.file_lo), hi = Number(query.file_hi);
    const ranges = answers.weight_ranges || { start: [], end: [] };
    const readsRange = (i) => (events.weights?.[i] || []).some((w) => ranges.end[w] > lo && ranges.start[w] < hi);
    const hits = [];
    for (let i = 0; i < n; i++) {
      if (query.op && events.op[i] !== query.op) continue;
      if (name && !events.name[i].toLowerCase().includes(name) && !(part === "search" && events.op[i].toLowerCase().includes(name))) continue;
      if (layer !== null && events.layer[i] !== layer) continue;
      if (t0 !== null && (events.start_ns[i] === null || events.start_ns[i] + events.duration_ns[i] <= t0)) continue;
      if (t1 !== null && (events.start_ns[i] === null || events.start_ns[i] >= t1)) continue;
      if (lo !== null && !readsRange(i)) continue;
      hits.push(i);
    }
    if (part === "search") return { hits: hits.slice(0, 200).map(row) };
    const offset = Number(query.offset || 0), limit = Number(query.limit || 100);
    return { total: hits.length, offset, rows: hits.slice(offset, offset + limit).map(row) };
  }
  return missing();
}

function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") el.className = value;
    else if (key === "text") el.textContent = value;
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(el.dataset, value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

// An element's children set (setChildren) or added to (addChildren) as h() takes them: a part
// left out (`cond ? h(...) : null`) adds nothing, where the DOM's own replaceChildren and
// append would write the text "null" into the page.
const present = (children) => children.flat().filter((child) => child !== null && child !== undefined && child !== false);
function setChildren(el, ...children) { el.replaceChildren(...present(children)); }
function addChildren(el, ...children) { el.append(...present(children)); }

const svgNS = "http://www.w3.org/2000/svg";
function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS(svgNS, tag);
  for (const [key, value] of Object.entries(attrs)) if (value !== undefined && value !== null) el.setAttribute(key, String(value));
  for (const child of children.flat()) if (child !== null && child !== undefined) el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return el;
}

function fmtNs(ns) {
  if (ns === null || ns === undefined || ns < 0) return "—";
  if (ns >= 1e9) return (ns / 1e9).toFixed(3) + " s";
  if (ns >= 1e6) return (ns / 1e6).toFixed(ns >= 1e8 ? 0 : 2) + " ms";
  if (ns >= 1e3) return (ns / 1e3).toFixed(1) + " µs";
  return Math.round(ns) + " ns";
}
function fmtBytes(bytes) {
  if (bytes === null || bytes === undefined) return "—";
  const units = ["B", "KiB", "MiB", "GiB"];
  let value = bytes, unit = 0;
  while (Math.abs(value) >= 1024 && unit < units.length - 1) { value /= 1024; unit++; }
  return (unit ? value.toFixed(1) : value.toFixed(0)) + " " + units[unit];
}
const fmtNum = (x) => (x === null || x === undefined ? "—" : Math.abs(x) >= 1e4 || (Math.abs(x) < 1e-3 && x !== 0) ? x.toExponential(3) : x.toFixed(4));
const fmtPct = (x) => (x === null || x === undefined ? "—" : (100 * x).toFixed(1) + " %");
const fmtInt = (x) => (x === null || x === undefined ? "—" : Number(x).toLocaleString("en-US"));

function showMessage(text, seconds = 4) {
  const box = document.getElementById("message");
  box.textContent = text;
  box.hidden = false;
  clearTimeout(showMessage.timer);
  showMessage.timer = setTimeout(() => (box.hidden = true), seconds * 1000);
}

// One palette for ops, everywhere: a fixed list of distinct hues in op order.
const HUES = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
  "#bab0ac", "#6cb6ff", "#d37295", "#a0cbe8", "#ffbe7d", "#8cd17d", "#b6992d", "#499894", "#86bcb6", "#fabfd2",
  "#d4a6c8", "#79706e", "#f1ce63", "#e8a0a0", "#9d7660"];
function opColor(op) {
  const ops = state.overview ? state.overview.ops : [];
  const index = ops.indexOf(op);
  if (index >= 0) return HUES[index % HUES.length];
  let hash = 0;
  for (const ch of String(op)) hash = (hash * 31 + ch.charCodeAt(0)) | 0;
  return HUES[Math.abs(hash) % HUES.length];
}
function heat(x) { // 0..1 -> dark blue .. yellow
  x = Math.max(0, Math.min(1, x));
  const stops = [[20, 30, 60], [40, 90, 160], [90, 170, 160], [240, 200, 80], [255, 240, 180]];
  const scaled = x * (stops.length - 1), i = Math.min(stops.length - 2, Math.floor(scaled)), f = scaled - i;
  const c = stops[i].map((v, k) => Math.round(v + (stops[i + 1][k] - v) * f));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

function legend(ops) {
  return h("div", { class: "legend", "data-testid": "legend" },
    ops.map((op) => h("span", {}, swatch(opColor(op)), op)));
}
function swatch(color) { const el = h("span", { class: "swatch" }); el.style.background = color; return el; }

const tooltip = {
  el: document.getElementById("tooltip"),
  show(x, y, title, lines = [], arrow = false) {
    const el = this.el;
    setChildren(el, h("div", { class: "t-title", text: title }), ...lines.map((line) => h("div", { text: line })));
    el.classList.toggle("arrow", arrow);
    el.hidden = false;
    const width = el.offsetWidth, height = el.offsetHeight;
    let left = arrow ? x - 18 : x + 14, top = arrow ? y + 14 : y + 14;
    if (left + width > innerWidth - 4) left = innerWidth - width - 4;
    if (top + height > innerHeight - 4) top = y - height - 10;
    el.style.left = Math.max(4, left) + "px";
    el.style.top = Math.max(4, top) + "px";
  },
  hide() { this.el.hidden = true; },
};

function setupCanvas(canvas) {
  const ratio = devicePixelRatio || 1;
  const rect = canvas.getBoundingClientRect();
  const width = Math.max(1, Math.round(rect.width)), height = Math.max(1, Math.round(rect.height));
  if (canvas.width !== width * ratio || canvas.height !== height * ratio) {
    canvas.width = width * ratio;
    canvas.height = height * ratio;
  }
  const ctx = canvas.getContext("2d");
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  return { ctx, width, height };
}

// ---- state and navigation ---------------------------------------------------------------

const state = {
  runs: [], live: false, runId: null, overview: null, tab: "overview",
  selected: null, // {graph_id, node_index}
  fileRange: null, // [lo, hi) selected on the memory view's disk track
  rendered: {},
};
window.ggmlViz = state; // for the tests and the curious
state.api = api; // the answers as the page gets them: the server's, or the report's own

const TABS = ["overview", "timeline", "graph", "memory", "stats", "events", "attention"];

function showTab(tab) {
  if (!TABS.includes(tab)) tab = "overview";
  tooltip.hide();
  document.getElementById("lens").hidden = true;
  state.tab = tab;
  for (const button of document.querySelectorAll("#tabs button")) button.classList.toggle("active", button.dataset.tab === tab);
  for (const section of document.querySelectorAll(".view")) section.hidden = section.id !== `view-${tab}`;
  if (location.hash !== "#" + tab) history.replaceState(null, "", "#" + tab);
  if (!state.runId) return;
  const renderers = { overview: renderOverview, timeline: renderTimeline, graph: renderGraph, memory: renderMemory,
    stats: renderStats, events: renderEventsTab, attention: renderAttention };
  if (!state.rendered[tab]) {
    state.rendered[tab] = true;
    Promise.resolve(renderers[tab]()).catch((error) => showMessage("could not load: " + error.message));
  } else if (tab === "timeline") timeline.resize();
}

for (const button of document.querySelectorAll("#tabs button")) button.addEventListener("click", () => showTab(button.dataset.tab));

async function openRun(runId) {
  state.runId = runId;
  state.rendered = {};
  state.selected = null;
  nodeDetails.cache = new Map();
  eventRow.cache = new Map();
  const run = state.runs.find((r) => r.run_id === runId);
  document.getElementById("run-name").textContent = run ? run.name : runId;
  state.overview = await api(`runs/${runId}/overview`);
  document.body.dataset.ready = "1";
  showTab((location.hash || "#overview").slice(1));
  if (!EMBEDDED && (state.live || state.overview.summary.status === "recording")) followLive(runId);
}

async function start() {
  document.getElementById("tabs").hidden = true;
  let listing;
  try {
    listing = await api("runs");
  } catch (error) {
    document.getElementById("view-runs").hidden = false;
    setChildren(document.getElementById("view-runs"), h("div", { class: "empty",
      text: "This viewer needs the URL that `ggml-viz view` printed (it carries the access token). " + error.message }));
    return;
  }
  state.runs = listing.runs;
  state.live = listing.live;
  document.getElementById("live").hidden = !state.live;
  if (state.runs.length === 0) {
    const runs = document.getElementById("view-runs");
    runs.hidden = false;
    setChildren(runs, h("div", { class: "empty", "data-testid": "waiting",
      text: state.live ? "Waiting for the recording to start…" : "No run here." }));
    if (state.live) setTimeout(start, 1000);
    return;
  }
  document.getElementById("tabs").hidden = false;
  if (state.runs.length === 1) return openRun(state.runs[0].run_id);
  renderRunList();
}

function renderRunList() {
  const section = document.getElementById("view-runs");
  for (const view of document.querySelectorAll(".view")) view.hidden = view !== section;
  document.getElementById("tabs").hidden = true;
  const picked = new Set();
  const compareButton = h("button", { class: "btn", text: "compare the two ticked runs", disabled: true, "data-testid": "compare",
    onclick: () => renderComparison([...picked]) });
  const open = (run) => { document.getElementById("tabs").hidden = false; openRun(run.run_id); };
  setChildren(section, h("h2", { text: "Runs" }), h("table", { class: "runs-table", "data-testid": "runs" },
    h("tr", {}, ["", "run", "status", "model", "graphs", "created"].map((c) => h("th", { text: c }))),
    state.runs.map((run) => {
      const tick = h("input", { type: "checkbox", "data-run": run.run_id, onclick: (event) => event.stopPropagation(),
        onchange: () => { if (tick.checked) picked.add(run.run_id); else picked.delete(run.run_id); compareButton.disabled = picked.size !== 2; } });
      return h("tr", {}, h("td", {}, tick), ...[run.name, run.status || "?", run.model || "?", fmtInt(run.graphs), run.created || ""]
        .map((text) => h("td", { text, onclick: () => open(run) })));
    })), h("div", { class: "toolbar" }, compareButton), h("div", { "data-testid": "comparison" }));
}

async function renderComparison([a, b]) {
  const holder = document.querySelector("[data-testid=comparison]");
  const result = await api("compare", { a, b });
  const name = (id) => (state.runs.find((r) => r.run_id === id) || {}).name || id;
  const table = (headers, rows) => h("div", { class: "table-wrap" }, h("table", {}, h("tr", {}, headers.map((c) => h("th", { text: c }))),
    ...rows.map((cells) => h("tr", {}, cells.map((c) => h("td", { text: c }))))));
  setChildren(holder,
    h("h2", { text: `A: ${name(a)}  ·  B: ${name(b)}` }),
    h("h3", { text: "settings that differ" }),
    Object.keys(result.settings_that_differ).length
      ? table(["setting", "A", "B"], Object.entries(result.settings_that_differ).map(([k, v]) => [k, String(v.a), String(v.b)]))
      : h("div", { class: "muted", text: "none" }),
    h("h3", { text: "tokens per second" }),
    table(["phase", "A", "B", "B/A"], Object.entries(result.tokens_per_s).map(([phase, v]) =>
      [phase, v.a ? v.a.toFixed(1) : "—", v.b ? v.b.toFixed(1) : "—", v.a && v.b ? (v.b / v.a).toFixed(2) : "—"])),
    ...Object.entries(result.per_graph_time_by).flatMap(([key, rows]) => [
      h("h3", { text: `time per graph by ${key}: largest changes` }),
      table(["phase", key, "A", "B", "B − A", "B/A"], rows.map((r) => [r.phase, String(r[key]), fmtNs(r.a_ns), fmtNs(r.b_ns),
        (r.delta_ns < 0 ? "−" : "+") + fmtNs(Math.abs(r.delta_ns)), r.ratio ? r.ratio.toFixed(2) : "—"]))]));
}

function followLive(runId) {
  if (state.source) state.source.close();
  const source = new EventSource(`/api/runs/${runId}/live?token=${encodeURIComponent(TOKEN)}`);
  state.source = source;
  document.getElementById("live").hidden = false;
  let known = `${state.overview.summary.graphs}/${state.overview.summary.status}`;
  source.onmessage = async (message) => {
    const update = JSON.parse(message.data);
    if (`${update.graphs}/${update.status}` === known) return;
    known = `${update.graphs}/${update.status}`;
    state.overview = await api(`runs/${runId}/overview`);
    state.liveUpdates = (state.liveUpdates || 0) + 1;
    const keep = state.tab;
    state.rendered = {};
    if (keep === "timeline") timeline.followEnd = true;
    showTab(keep);
    if (update.status !== "recording") document.getElementById("live").textContent = "● " + update.status;
  };
}

// ---- node details (shared by the timeline, the graph and the event log) ------------------

async function nodeDetails(graphId, nodeIndex) {
  const key = `${graphId}:${nodeIndex}`;
  nodeDetails.cache = nodeDetails.cache || new Map();
  if (!nodeDetails.cache.has(key)) nodeDetails.cache.set(key, api(`runs/${state.runId}/node`, { graph: graphId, index: nodeIndex }));
  return nodeDetails.cache.get(key);
}

function eventRow(event) {
  eventRow.cache = eventRow.cache || new Map();
  if (!eventRow.cache.has(event)) eventRow.cache.set(event, api(`runs/${state.runId}/event/${event}`));
  return eventRow.cache.get(event);
}

async function showDetails(panel, graphId, nodeIndex) {
  state.selected = { graph_id: graphId, node_index: nodeIndex };
  setChildren(panel, h("div", { class: "muted", text: "loading…" }));
  let node;
  try { node = await nodeDetails(graphId, nodeIndex); } catch (error) { setChildren(panel, h("div", { text: error.message })); return; }
  const duration = node.start_ns === null ? null : node.end_ns - node.start_ns;
  setChildren(panel,
    h("h2", { "data-testid": "details-name", text: node.name }),
    h("dl", { class: "kv", "data-testid": "details" },
      kv("op", node.op + (node.op_base && node.op_base !== node.op ? ` (${node.op_base})` : "")),
      kv("type", node.type), kv("shape", node.shape), kv("bytes", fmtBytes(node.nbytes)),
      kv("time", duration === null ? "not timed" : fmtNs(duration)),
      kv("starts at", node.start_ns === null ? "—" : fmtNs(node.start_ns)),
      kv("layer", node.layer === null ? "none" : node.layer),
      kv("graph", `${node.graph_id}, node ${node.node_index}`), kv("tokens", JSON.stringify(node.tokens)),
      kv("buffer", node.buffer === null ? "—" : `${node.buffer} @ ${fmtInt(node.buffer_offset)}`)),
    node.values ? h("h3", { text: "output values (--values stats)" }) : null,
    node.values ? h("dl", { class: "kv", "data-testid": "node-values" },
      kv("min … max", `${fmtNum(node.values.min)} … ${fmtNum(node.values.max)}`),
      kv("mean ± std", `${fmtNum(node.values.mean)} ± ${fmtNum(node.values.std)}`), kv("mean |x|", fmtNum(node.values.mean_abs)),
      kv("NaN / Inf", `${fmtInt(node.values.nan)} / ${fmtInt(node.values.inf)}`)) : null,
    h("h3", { text: "sources" }),
    h("table", { "data-testid": "sources" },
      h("tr", {}, ["#", "name", "shape", "type", "lives in"].map((c) => h("th", { text: c }))),
      node.sources.map((src) => h("tr", {},
        h("td", { text: src.slot }), h("td", { text: src.name }), h("td", { text: src.shape }), h("td", { text: src.type }),
        h("td", { text: src.memory === "disk" ? `file @ ${fmtInt(src.file_offset)}` :
          `${src.buffer || "?"}${src.buffer_offset === null ? "" : " @ " + fmtInt(src.buffer_offset)}` })))),
    h("div", { class: "toolbar" },
      h("button", { class: "btn", text: "show in graph", onclick: () => { state.graphFocus = { graph_id: graphId, node_index: nodeIndex, layer: node.layer }; state.rendered.graph = false; showTab("graph"); } }),
      h("button", { class: "btn", text: "show in timeline", onclick: () => { if (node.start_ns !== null) { timeline.focus(node.start_ns, node.end_ns); } showTab("timeline"); } })),
  );
}
const kv = (key, value) => [h("dt", { text: key }), h("dd", { text: value === undefined ? "—" : String(value) })];

// ---- overview ----------------------------------------------------------------------------

function renderOverview() {
  const o = state.overview, sm = o.summary, model = sm.model || {};
  const phases = Object.fromEntries((sm.phases || []).map((p) => [p.phase, p]));
  const capture = o.capture || {};
  const section = document.getElementById("view-overview");
  const maxOp = Math.max(1, ...sm.time_by_op.map((r) => r.time_ns));
  const maxLayer = Math.max(1, ...sm.top_layers.map((r) => r.time_ns));
  const maxMem = Math.max(1, ...sm.memory_by_buffer.map((r) => r.bytes));
  const barsCanvas = h("canvas", { "data-testid": "graph-bars" });
  barsCanvas.style.width = "100%";
  barsCanvas.style.height = "140px";
  setChildren(section,
    h("div", { class: "grid" },
      h("div", { class: "card", "data-testid": "model-card" }, h("h3", { text: "model" }),
        h("div", { class: "big", text: model.name || model.description || "?" }),
        h("dl", { class: "kv" }, kv("architecture", model.architecture), kv("layers", model.layers),
          kv("parameters", model.parameters ? (model.parameters / 1e6).toFixed(1) + " M" : "?"), kv("file", model.path),
          kv("backends", (sm.backends || []).join(", ")))),
      h("div", { class: "card", "data-testid": "speed-card" }, h("h3", { text: "speed" }),
        h("div", { class: "big" }, phases.decode ? `${phases.decode.tokens_per_s.toFixed(1)} tok/s decode` : "—"),
        h("dl", { class: "kv" },
          kv("prompt", phases.prompt ? `${phases.prompt.tokens_per_s.toFixed(1)} tok/s, ${phases.prompt.tokens} tokens, ${fmtNs(phases.prompt.time_ns)}` : "—"),
          kv("decode", phases.decode ? `${phases.decode.tokens} tokens in ${fmtNs(phases.decode.time_ns)}` : "—"),
          kv("graphs", fmtInt(sm.graphs)), kv("node events", `${fmtInt(sm.node_events)} (${fmtInt(sm.timed_node_events)} timed)`),
          kv("status", sm.status + (sm.incomplete_reason ? ": " + sm.incomplete_reason : "")))),
      h("div", { class: "card" }, h("h3", { text: "settings" }),
        h("dl", { class: "kv" }, kv("recorder", capture.recorder), kv("detail", capture.detail), kv("timing", capture.timing),
          kv("sample", capture.sample || "every graph"), kv("max events", capture.max_events || "no bound"),
          kv("dropped", `${fmtInt(sm.dropped_graphs)} graphs / ${fmtInt(sm.dropped_events)} events`))),
      h("div", { class: "card" }, h("h3", { text: "prompt" }), h("div", { class: "text-block", "data-testid": "prompt", text: sm.prompt || "" }),
        h("h3", { text: "generated" }), h("div", { class: "text-block", text: sm.generated_text || "" }))),
    h("div", { class: "card" }, h("h3", { text: "one bar per graph (token) over the run" }), barsCanvas,
      h("div", { class: "legend" }, h("span", {}, swatch("#6cb6ff"), "prompt"), h("span", {}, swatch("#f28e2b"), "decode"))),
    h("div", { class: "grid" },
      h("div", { class: "card", "data-testid": "time-by-op" }, h("h3", { text: "time by op" }),
        sm.time_by_op.map((r) => hbar(r.op, r.time_ns / maxOp, fmtNs(r.time_ns), opColor(r.op)))),
      h("div", { class: "card" }, h("h3", { text: "time by layer (top)" }),
        sm.top_layers.map((r) => hbar(r.layer === "none" ? "outside layers" : "layer " + r.layer, r.time_ns / maxLayer, fmtNs(r.time_ns), "#76b7b2"))),
      h("div", { class: "card", "data-testid": "memory-by-kind" }, h("h3", { text: "memory by buffer kind" }),
        sm.memory_by_buffer.map((r) => hbar(r.kind, r.bytes / maxMem, fmtBytes(r.bytes), "#b07aa1")))),
  );
  drawGraphBars(barsCanvas, o.graph_bars);
}

function hbar(label, fraction, value, color) {
  const fill = h("div", { class: "fill" });
  fill.style.width = Math.max(0.5, 100 * fraction) + "%";
  fill.style.background = color;
  return h("div", { class: "hbar" }, h("span", { class: "label", title: label, text: label }), h("div", { class: "track" }, fill), h("span", { class: "value", text: value }));
}

function drawGraphBars(canvas, bars) {
  const draw = () => {
    const { ctx, width, height } = setupCanvas(canvas);
    ctx.clearRect(0, 0, width, height);
    const n = bars.graph_id.length;
    if (!n) return;
    const max = Math.max(...bars.duration_ns);
    const step = width / n;
    for (let i = 0; i < n; i++) {
      const barHeight = (bars.duration_ns[i] / max) * (height - 4);
      ctx.fillStyle = bars.phase[i] === "prompt" ? "#6cb6ff" : "#f28e2b";
      ctx.fillRect(i * step, height - barHeight, Math.max(1, step - (step > 3 ? 1 : 0)), barHeight);
    }
  };
  draw();
  canvas.onmousemove = (event) => {
    const rect = canvas.getBoundingClientRect();
    const i = Math.floor(((event.clientX - rect.left) / rect.width) * bars.graph_id.length);
    if (i < 0 || i >= bars.graph_id.length) return tooltip.hide();
    tooltip.show(event.clientX, event.clientY, `graph ${bars.graph_id[i]} · ${bars.phase[i]}`,
      [fmtNs(bars.duration_ns[i]) + `, ${bars.n_tokens[i]} tokens`, JSON.stringify(bars.text[i].slice(0, 80))]);
  };
  canvas.onmouseleave = () => tooltip.hide();
  canvas.onclick = (event) => {
    const rect = canvas.getBoundingClientRect();
    const i = Math.floor(((event.clientX - rect.left) / rect.width) * bars.graph_id.length);
    if (i >= 0 && i < bars.graph_id.length) { state.graphFocus = { graph_id: bars.graph_id[i] }; state.rendered.graph = false; showTab("graph"); }
  };
}

// ---- timeline ----------------------------------------------------------------------------

const LANE_GRAPH_H = 22, LANE_NODE_H = 30, LANE_GAP = 26, AXIS_H = 24;

const timeline = {
  view: null, data: null, canvas: null, panel: null, pending: null, hover: null, followEnd: false,
  frameTimes: [],

  init(section) {
    this.canvas = h("canvas", { "data-testid": "timeline-canvas", tabindex: 0 });
    this.panel = h("div", { class: "side", "data-testid": "timeline-details" }, h("div", { class: "muted", text: "Click a node for its details. Wheel: zoom · drag or shift+wheel: pan · W/S zoom, A/D pan, 0 reset." }));
    const search = h("input", { type: "search", placeholder: "search name or op…", "data-testid": "timeline-search" });
    const results = h("select", { "data-testid": "search-results", hidden: true });
    search.addEventListener("change", async () => {
      const { hits } = await api(`runs/${state.runId}/search`, { q: search.value });
      setChildren(results, h("option", { text: `${hits.length} hits` }), ...hits.map((hit) =>
        h("option", { value: hit.event, text: `${hit.name} · ${hit.op} · graph ${hit.graph_id} · ${fmtNs(hit.duration_ns)}` })));
      results.hidden = false;
      results.hits = hits;
    });
    results.addEventListener("change", () => {
      const hit = (results.hits || []).find((x) => String(x.event) === results.value);
      if (!hit) return;
      this.focus(hit.start_ns, hit.start_ns + hit.duration_ns);
      this.select(hit.graph_id, hit.node_index);
    });
    section.classList.add("fill");
    setChildren(section,
      h("div", { class: "toolbar" }, search, results,
        h("button", { class: "btn", text: "−", title: "zoom out (S)", onclick: () => this.zoom(1.6) }),
        h("button", { class: "btn", text: "+", title: "zoom in (W)", onclick: () => this.zoom(1 / 1.6) }),
        h("button", { class: "btn", text: "whole run", title: "reset (0)", onclick: () => this.reset() }),
        legend(state.overview.ops)),
      h("div", { class: "split" }, h("div", { class: "canvas-wrap" }, this.canvas), this.panel));
    this.bindInput();
    this.reset();
    new ResizeObserver(() => this.resize()).observe(this.canvas);
  },

  duration() { return Math.max(1, state.overview.duration_ns); },
  reset() { const d = this.duration(); this.view = { t0: -d * 0.01, t1: d * 1.01 }; this.request(); this.draw(); },
  focus(t0, t1) {
    const span = Math.max((t1 - t0) * 1.15, 40000); // a little context; at least 40 µs
    const mid = (t0 + t1) / 2;
    this.view = { t0: mid - span / 2, t1: mid + span / 2 };
    this.request(); this.draw();
  },
  resize() { if (this.canvas && this.canvas.isConnected) { this.request(); this.draw(); } },

  zoom(factor, anchorX) {
    const { t0, t1 } = this.view;
    const width = this.canvas.getBoundingClientRect().width || 1;
    const anchor = t0 + ((anchorX === undefined ? width / 2 : anchorX) / width) * (t1 - t0);
    const span = Math.min(Math.max((t1 - t0) * factor, 200), this.duration() * 4);
    const ratio = (anchor - t0) / (t1 - t0);
    this.view = { t0: anchor - ratio * span, t1: anchor + (1 - ratio) * span };
    this.schedule();
  },
  pan(pixels) {
    const width = this.canvas.getBoundingClientRect().width || 1;
    const shift = (pixels / width) * (this.view.t1 - this.view.t0);
    this.view = { t0: this.view.t0 + shift, t1: this.view.t1 + shift };
    this.schedule();
  },
  schedule() {
    if (!this.frameRequested) {
      this.frameRequested = true;
      requestAnimationFrame(() => { this.frameRequested = false; this.draw(); });
    }
    clearTimeout(this.requestTimer);
    this.requestTimer = setTimeout(() => this.request(), 60);
  },

  async request() {
    const width = Math.round(this.canvas.getBoundingClientRect().width) || 1000;
    const t0 = Math.floor(this.view.t0), t1 = Math.ceil(this.view.t1);
    const ticket = {};
    this.pending = ticket;
    try {
      const data = await api(`runs/${state.runId}/timeline`, { t0, t1, width });
      if (this.pending !== ticket) return;
      this.data = data;
      this.draw();
    } catch (error) { showMessage("timeline: " + error.message); }
  },

  bindInput() {
    const canvas = this.canvas;
    canvas.addEventListener("wheel", (event) => {
      event.preventDefault();
      const x = event.clientX - canvas.getBoundingClientRect().left;
      if (event.shiftKey || Math.abs(event.deltaX) > Math.abs(event.deltaY)) this.pan(event.deltaX || event.deltaY);
      else this.zoom(Math.exp(event.deltaY * 0.0015), x);
    }, { passive: false });
    let drag = null;
    canvas.addEventListener("mousedown", (event) => { drag = { x: event.clientX, moved: false }; canvas.focus(); });
    addEventListener("mousemove", (event) => {
      if (drag) {
        const dx = event.clientX - drag.x;
        if (Math.abs(dx) > 2) drag.moved = true;
        if (drag.moved) { this.pan(-dx); drag.x = event.clientX; tooltip.hide(); return; }
      }
      if (event.target === canvas) this.hoverAt(event);
    });
    addEventListener("mouseup", (event) => {
      if (drag && !drag.moved && event.target === canvas) {
        const hit = this.hitTest(event);
        if (hit && hit.kind === "node") this.selectEvent(hit);
        else if (hit && hit.kind === "graph") this.focus(hit.start, hit.end);
      }
      drag = null;
    });
    canvas.addEventListener("mouseleave", () => { tooltip.hide(); this.hover = null; this.draw(); });
    canvas.addEventListener("keydown", (event) => {
      const keys = { w: () => this.zoom(1 / 1.4), s: () => this.zoom(1.4), a: () => this.pan(-120), d: () => this.pan(120),
        ArrowLeft: () => this.pan(-60), ArrowRight: () => this.pan(60), ArrowUp: () => this.zoom(1 / 1.2), ArrowDown: () => this.zoom(1.2),
        "0": () => this.reset(), Home: () => this.reset() };
      const action = keys[event.key];
      if (action) { event.preventDefault(); action(); }
    });
  },

  layout() {
    const lanes = [];
    let y = AXIS_H;
    for (const lane of (this.data ? this.data.lanes : [])) {
      lanes.push({ lane, labelY: y + 12, graphY: y + 16, nodeY: y + 16 + LANE_GRAPH_H + 2 });
      y += 16 + LANE_GRAPH_H + 2 + LANE_NODE_H + LANE_GAP;
    }
    return lanes;
  },

  draw() {
    const began = performance.now();
    const canvas = this.canvas;
    if (!canvas || !canvas.isConnected) return;
    const { ctx, width, height } = setupCanvas(canvas);
    ctx.fillStyle = "#14161b";
    ctx.fillRect(0, 0, width, height);
    const { t0, t1 } = this.view;
    const scale = width / (t1 - t0);
    const X = (t) => (t - t0) * scale;
    this.drawAxis(ctx, width, t0, t1, scale);
    const data = this.data;
    if (!data) return;
    const ops = data.ops;
    for (const { lane, labelY, graphY, nodeY } of this.layout()) {
      ctx.fillStyle = "#9aa1b3";
      ctx.font = "12px system-ui, sans-serif";
      ctx.fillText(lane.label, 6, labelY);
      // graphs: one bar each, token text inside when there is room
      const g = lane.graphs;
      for (let i = 0; i < g.start.length; i++) {
        const x0 = X(g.start[i]), x1 = X(g.end[i]);
        if (x1 < 0 || x0 > width) continue;
        ctx.fillStyle = g.phase[i] === "prompt" ? "#2f5d8a" : "#3d4a63";
        ctx.fillRect(x0, graphY, Math.max(1, x1 - x0 - 1), LANE_GRAPH_H);
        if (x1 - x0 > 40) {
          ctx.save();
          ctx.beginPath(); ctx.rect(x0, graphY, x1 - x0 - 1, LANE_GRAPH_H); ctx.clip();
          ctx.fillStyle = "#e3e6ee";
          ctx.fillText(`${g.graph_id[i]} ${JSON.stringify(g.label[i])}`, Math.max(x0, 0) + 4, graphY + 15);
          ctx.restore();
        }
      }
      // summed pixel columns (the data's own window), then individual node bars
      const c = lane.columns;
      if (c.px.length) {
        const colScale = (data.t1 - data.t0) / data.width;
        for (let i = 0; i < c.px.length; i++) {
          const x0 = X(data.t0 + c.px[i] * colScale), x1 = X(data.t0 + (c.px[i] + 1) * colScale);
          if (x1 < 0 || x0 > width) continue;
          ctx.fillStyle = opColor(ops[c.op[i]]);
          const barHeight = LANE_NODE_H * (0.35 + 0.65 * c.fill[i]);
          ctx.fillRect(x0, nodeY + LANE_NODE_H - barHeight, Math.max(1, x1 - x0), barHeight);
        }
      }
      const n = lane.nodes;
      for (let i = 0; i < n.start.length; i++) {
        const x0 = X(n.start[i]), x1 = X(n.end[i]);
        if (x1 < 0 || x0 > width) continue;
        ctx.fillStyle = opColor(ops[n.op[i]]);
        ctx.fillRect(x0, nodeY, Math.max(1, x1 - x0 - (x1 - x0 > 3 ? 0.5 : 0)), LANE_NODE_H);
        if (x1 - x0 > 60) {
          ctx.fillStyle = "#0b0c10";
          ctx.fillText(ops[n.op[i]], x0 + 3, nodeY + 19);
        }
      }
      const sel = this.selectedBar;
      if (sel) {
        ctx.strokeStyle = "#ffffff"; ctx.lineWidth = 2;
        ctx.strokeRect(X(sel.start), nodeY - 1, Math.max(2, X(sel.end) - X(sel.start)), LANE_NODE_H + 2);
      }
    }
    if (!this.firstDataPaint) this.firstDataPaint = performance.now(); // since navigation: the benchmark reads it
    const spent = performance.now() - began;
    this.frameTimes.push(spent);
    if (this.frameTimes.length > 2000) this.frameTimes.splice(0, 1000);
    this.lastDraw = { t0, t1, ms: spent };
    canvas.dataset.drawn = String((Number(canvas.dataset.drawn) || 0) + 1);
  },

  drawAxis(ctx, width, t0, t1, scale) {
    const span = t1 - t0;
    const rough = span / Math.max(1, width / 110);
    const magnitude = Math.pow(10, Math.floor(Math.log10(rough)));
    const step = [1, 2, 5, 10].map((m) => m * magnitude).find((v) => v >= rough) || magnitude * 10;
    ctx.fillStyle = "#9aa1b3"; ctx.strokeStyle = "#313646"; ctx.lineWidth = 1;
    ctx.font = "11px system-ui, sans-serif";
    for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) {
      const x = Math.round((t - t0) * scale) + 0.5;
      ctx.beginPath(); ctx.moveTo(x, AXIS_H - 6); ctx.lineTo(x, 4000); ctx.stroke();
      ctx.fillText(fmtNs(t), x + 3, 14);
    }
  },

  hitTest(event) {
    if (!this.data) return null;
    const rect = this.canvas.getBoundingClientRect();
    const x = event.clientX - rect.left, y = event.clientY - rect.top;
    const { t0, t1 } = this.view;
    const t = t0 + (x / rect.width) * (t1 - t0);
    const slack = (3 / rect.width) * (t1 - t0);
    for (const { lane, graphY, nodeY } of this.layout()) {
      if (y >= nodeY && y <= nodeY + LANE_NODE_H) {
        const n = lane.nodes;
        let best = null;
        for (let i = 0; i < n.start.length; i++) {
          if (n.start[i] - slack <= t && t <= n.end[i] + slack) {
            if (!best || n.end[i] - n.start[i] < best.end - best.start) best = { kind: "node", i, start: n.start[i], end: n.end[i], op: this.data.ops[n.op[i]], event: n.event[i] };
          }
        }
        if (best) return best;
        const c = lane.columns, colScale = (this.data.t1 - this.data.t0) / this.data.width;
        for (let i = 0; i < c.px.length; i++) {
          const c0 = this.data.t0 + c.px[i] * colScale;
          if (c0 - slack <= t && t <= c0 + colScale + slack) return { kind: "column", op: this.data.ops[c.op[i]], fill: c.fill[i], start: c0, end: c0 + colScale };
        }
      }
      if (y >= graphY && y <= graphY + LANE_GRAPH_H) {
        const g = lane.graphs;
        for (let i = 0; i < g.start.length; i++) {
          if (g.start[i] <= t && t <= g.end[i]) return { kind: "graph", start: g.start[i], end: g.end[i], graph_id: g.graph_id[i], label: g.label[i], phase: g.phase[i] };
        }
      }
    }
    return null;
  },

  async hoverAt(event) {
    const hit = this.hitTest(event);
    if (!hit) { tooltip.hide(); this.canvas.style.cursor = "default"; return; }
    this.canvas.style.cursor = "pointer";
    if (hit.kind === "graph") {
      tooltip.show(event.clientX, event.clientY, `graph ${hit.graph_id} · ${hit.phase}`, [fmtNs(hit.end - hit.start), "tokens: " + JSON.stringify(hit.label.slice(0, 80)), "click to zoom in"]);
    } else if (hit.kind === "column") {
      tooltip.show(event.clientX, event.clientY, `many short nodes, mostly ${hit.op}`, [`${fmtPct(hit.fill)} busy in this pixel`, "zoom in to see each"]);
    } else {
      tooltip.show(event.clientX, event.clientY, hit.op, [fmtNs(hit.end - hit.start)]);
      const token = (this.hoverToken = {});
      const row = await eventRow(hit.event).catch(() => null);
      if (this.hoverToken !== token || !row) return;
      tooltip.show(event.clientX, event.clientY, row.name, [`${row.op} · ${row.type} ${row.shape}`, `${fmtNs(row.duration_ns)}${row.wait_ns ? ` (${fmtNs(row.wait_ns)} waiting for other threads)` : ""} · layer ${row.layer === null ? "none" : row.layer} · graph ${row.graph_id}`]);
    }
  },

  async selectEvent(hit) {
    const row = await eventRow(hit.event);
    this.selectedBar = { start: hit.start, end: hit.end };
    this.draw();
    await showDetails(this.panel, row.graph_id, row.node_index);
  },
  async select(graphId, nodeIndex) {
    const node = await nodeDetails(graphId, nodeIndex);
    if (node.start_ns !== null) this.selectedBar = { start: node.start_ns, end: node.end_ns };
    this.draw();
    await showDetails(this.panel, graphId, nodeIndex);
  },
};

function renderTimeline() {
  const section = document.getElementById("view-timeline");
  state.timeline = timeline;
  timeline.data = null;
  timeline.init(section);
}

// ---- graph -----------------------------------------------------------------------------

const COL_W = 190, ROW_H = 62, BOX_W = 168, BOX_H = 42;

async function renderGraph() {
  const section = document.getElementById("view-graph");
  section.classList.add("fill");
  const { graphs } = await api(`runs/${state.runId}/graphs`);
  const focus = state.graphFocus || (state.selected ? { graph_id: state.selected.graph_id, node_index: state.selected.node_index } : { graph_id: graphs.length ? graphs[Math.min(1, graphs.length - 1)].graph_id : 0 });
  const list = h("div", { class: "graph-list", "data-testid": "graph-list" });
  const area = h("div", { class: "graph-area", "data-testid": "graph-area" });
  const panel = h("div", { class: "side", "data-testid": "graph-details" }, h("div", { class: "muted", text: "Click a layer to open it, a node for its details." }));
  const crumbs = h("div", { class: "crumbs" });
  const colorBy = h("select", { "data-testid": "graph-color" }, h("option", { value: "time", text: "color by time" }), h("option", { value: "op", text: "color by op" }));
  setChildren(section, h("div", { class: "toolbar" }, crumbs, colorBy, legend(state.overview.ops)), h("div", { class: "split" }, list, area, panel));
  const shown = graphs.slice(0, 5000);
  for (const g of shown) {
    addChildren(list, h("div", { dataset: { graph: g.graph_id }, title: g.label, onclick: () => load(g.graph_id, null) },
      `${g.graph_id} · ${g.phase} · ${fmtNs(g.duration_ns)} · `, JSON.stringify(g.label.slice(0, 24))));
  }
  let current = null;
  async function load(graphId, layer, nodeIndex) {
    current = await api(`runs/${state.runId}/graph/${graphId}`, { layer: layer === null || layer === undefined ? "" : layer });
    for (const row of list.children) row.classList.toggle("active", Number(row.dataset.graph) === graphId);
    setChildren(crumbs, h("span", { text: `graph ${graphId}` }), h("a", { text: "all layers", "data-testid": "all-layers", onclick: () => load(graphId, null) }),
      ...(layer === null || layer === undefined ? [] : [h("span", { text: `› layer ${layer}` })]));
    draw(nodeIndex);
    state.graphShown = { graph_id: graphId, layer };
  }
  function draw(nodeIndex) {
    const data = current;
    const times = data.items.filter((i) => i.duration_ns > 0).map((i) => i.duration_ns);
    const maxTime = Math.max(1, ...times);
    const width = (data.columns + 0.2) * COL_W + 40, height = data.rows * ROW_H + 40;
    const svg = s("svg", { width, height, "data-testid": "graph-svg" });
    const pos = {}, byId = {};
    for (const item of data.items) byId[item.id] = item;
    for (const item of data.items) pos[item.id] = { x: 20 + item.x * COL_W + (item.x >= item.band ? 24 : 0), y: 20 + item.y * ROW_H };
    if (data.items.length && data.items[0].band > 0) {
      svg.append(s("rect", { x: 8, y: 8, width: data.items[0].band * COL_W + 4, height: height - 16, fill: "#1c1f26", rx: 6 }));
      svg.append(s("text", { x: 16, y: height - 14, class: "edge-label" }, "inputs, weights, KV cache"));
    }
    for (const link of data.links) {
      const a = pos[link.from], b = pos[link.to];
      if (!a || !b) continue;
      const fromLeaf = ["weight", "kv", "input"].includes(byId[link.from].kind);
      let x1, y1, x2, y2, d;
      if (fromLeaf) { // out of the leaf band: right side to the reader's left side
        x1 = a.x + BOX_W; y1 = a.y + BOX_H / 2; x2 = b.x; y2 = b.y + BOX_H / 2;
        const bend = Math.max(30, (x2 - x1) / 2);
        d = `M${x1},${y1} C${x1 + bend},${y1} ${x2 - bend},${y2} ${x2},${y2}`;
      } else {
        x1 = a.x + BOX_W / 2; y1 = a.y + BOX_H; x2 = b.x + BOX_W / 2; y2 = b.y;
        const bend = Math.max(20, (y2 - y1) / 2);
        d = `M${x1},${y1} C${x1},${y1 + bend} ${x2},${y2 - bend} ${x2},${y2}`;
      }
      svg.append(s("path", { class: "edge", d }));
      if (data.layer !== null) svg.append(s("text", { class: "edge-label", x: (x1 + x2) / 2 + 3, y: (y1 + y2) / 2 }, link.label));
    }
    for (const item of data.items) {
      const p = pos[item.id];
      const fill = item.kind === "weight" ? "#3d4a63" : item.kind === "kv" ? "#5a3f6b" : item.kind === "input" ? "#2f5d5a" :
        item.kind === "external" ? "#2a2e38" : colorBy.value === "op" && item.op ? opColor(item.op) :
        item.duration_ns > 0 ? heat(Math.sqrt(item.duration_ns / maxTime)) : "#59607a";
      const selected = item.kind === "node" && nodeIndex !== undefined && item.node_index === nodeIndex;
      const group = s("g", { class: "item" + (selected ? " selected" : ""), "data-id": item.id, "data-kind": item.kind },
        s("rect", { x: p.x, y: p.y, width: BOX_W, height: BOX_H, rx: item.kind === "layer" ? 8 : 4, fill }),
        s("text", { x: p.x + 6, y: p.y + 16, class: "sub" }, truncate(item.kind === "layer" ? item.name : item.name, 26)),
        s("text", { x: p.x + 6, y: p.y + 32, class: "sub" }, truncate(item.kind === "layer"
          ? `${item.n_nodes} nodes · ${item.n_weights} weights${item.reads_kv ? " · KV" : ""} · ${fmtNs(item.duration_ns)}`
          : `${item.op || item.kind} ${item.shape || ""}${item.duration_ns > 0 ? " · " + fmtNs(item.duration_ns) : ""}`, 30)));
      group.addEventListener("click", () => {
        tooltip.hide();
        if (item.kind === "layer") load(data.graph_id, item.layer);
        else if (item.kind === "node" || item.kind === "external") { showDetails(panel, data.graph_id, item.node_index); draw(item.node_index); }
      });
      group.addEventListener("mousemove", (event) => tooltip.show(event.clientX, event.clientY, item.name || item.kind,
        [item.kind === "layer" ? `${item.n_nodes} nodes, ${fmtNs(item.duration_ns)}` : `${item.op || item.kind} · ${item.type || ""} ${item.shape || ""}`,
          item.duration_ns > 0 ? fmtNs(item.duration_ns) : ""]));
      group.addEventListener("mouseleave", () => tooltip.hide());
      svg.append(group);
    }
    setChildren(area, svg);
    if (nodeIndex !== undefined) {
      const el = svg.querySelector(".item.selected");
      if (el) el.scrollIntoView({ block: "center", inline: "center" });
    }
  }
  colorBy.addEventListener("change", () => current && draw());
  await load(focus.graph_id, focus.layer === undefined ? null : focus.layer, focus.node_index);
  if (focus.node_index !== undefined) showDetails(panel, focus.graph_id, focus.node_index);
  state.graphFocus = null;
}
const truncate = (text, n) => (text && text.length > n ? text.slice(0, n - 1) + "…" : text || "");

// ---- memory ------------------------------------------------------------------------------

async function renderMemory() {
  const section = document.getElementById("view-memory");
  section.classList.add("fill");
  const data = await api(`runs/${state.runId}/memory`);
  const upper = h("div", { class: "upper" });
  const lower = h("div", { class: "lower" });
  setChildren(section, h("div", { class: "memory" }, upper, lower));
  const log = eventLog(lower, { compact: true });
  const files = data.disk.files;
  const colorBy = h("select", { "data-testid": "disk-color" }, h("option", { value: "read_ns", text: "color by read time" }), h("option", { value: "reads", text: "color by reads" }));
  const fullScreen = h("button", { class: "btn", text: "one row per layer", "data-testid": "disk-rows" });
  const selection = h("span", { class: "muted", "data-testid": "disk-selection", text: "drag across the file to filter the events below" });
  addChildren(upper, h("div", { class: "track-title" }, h("h2", { text: "DISK · the model file by byte offset" }), colorBy, fullScreen, selection));
  if (!files.length) addChildren(upper, h("div", { class: "empty", text: "This run holds no model-file map." }));
  const diskHolder = h("div");
  addChildren(upper, diskHolder);
  let rows = false;
  const drawDisk = () => {
    setChildren(diskHolder);
    for (const file of files) addChildren(diskHolder, h("div", { class: "muted", text: `${file.path} · ${fmtBytes(file.size)}` }),
      rows ? diskRows(file, colorBy.value, log, selection) : diskStrip(file, colorBy.value, log, selection));
  };
  colorBy.addEventListener("change", drawDisk);
  fullScreen.addEventListener("click", () => { rows = !rows; fullScreen.classList.toggle("on", rows); drawDisk(); });
  drawDisk();

  const buffers = data.buffers;
  addChildren(upper, h("div", { class: "track-title" }, h("h2", { text: "BUFFERS · runtime memory" })));
  const maxSize = Math.max(1, ...buffers.buffers.map((b) => b.size));
  addChildren(upper, h("div", { class: "card", "data-testid": "buffer-list" }, buffers.buffers.map((b) =>
    hbar(`${b.kind} · ${b.name}`, b.size / maxSize, fmtBytes(b.size), { weights: "#4e79a7", kv_cache: "#b07aa1", compute: "#59a14f", output: "#edc948" }[b.kind] || "#79706e")),
    buffers.has_output_buffer ? null : h("div", { class: "muted", text: "No separate output buffer: this backend keeps the logits outside the graph's buffers." })));
  const kv = buffers.kv_cache;
  if (kv.layers.length) {
    const canvas = h("canvas", { "data-testid": "kv-heatmap" });
    canvas.style.width = "100%";
    canvas.style.height = Math.min(200, kv.layers.length * 5 + 10) + "px";
    const most = Math.max(1, ...kv.used.flat());
    addChildren(upper, h("h3", { text: `KV cache: cells in use per layer (rows) over the graphs (columns): up to ${most} of ${kv.capacity} (color scaled to ${most})` }), canvas);
    drawKv(canvas, kv);
  }
  const bars = state.overview.graph_bars;
  const choices = EMBEDDED ? EMBEDDED.answers.graphs.graphs.map((g) => bars.graph_id.indexOf(g.graph_id)) : bars.graph_id.slice(0, 2000).map((_, i) => i);
  const graphChoice = h("select", { "data-testid": "occupancy-graph" }, choices.map((i) =>
    h("option", { value: bars.graph_id[i], text: `graph ${bars.graph_id[i]} · ${bars.phase[i]}` })));
  const occCanvas = h("canvas", { "data-testid": "occupancy" });
  occCanvas.style.width = "100%";
  occCanvas.style.height = "220px";
  addChildren(upper, h("div", { class: "track-title" }, h("h3", { text: "compute buffer: each intermediate's bytes (y: offset) while it lives (x: node index)" }), graphChoice), occCanvas);
  const drawOcc = async () => drawOccupancy(occCanvas, await api(`runs/${state.runId}/occupancy/${graphChoice.value}`));
  graphChoice.addEventListener("change", drawOcc);
  if (graphChoice.options.length) { graphChoice.selectedIndex = Math.min(1, graphChoice.options.length - 1); drawOcc(); }
}

const MIN_SEGMENT_PX = 5;

// Widths: every region at least 5 px, the rest of the width shared by size.
function segmentLayout(starts, ends, width) {
  const n = starts.length;
  const total = ends.reduce((sum, end, i) => sum + (end - starts[i]), 0) || 1;
  const needed = n * MIN_SEGMENT_PX;
  const canvasWidth = Math.max(width, needed + 50);
  const spare = canvasWidth - needed;
  const xs = new Float64Array(n + 1);
  for (let i = 0; i < n; i++) xs[i + 1] = xs[i] + MIN_SEGMENT_PX + (spare * (ends[i] - starts[i])) / total;
  return { xs, canvasWidth };
}

function regionColor(r, i, colorBy, max) {
  if (r.kind[i] !== "tensor") return r.kind[i] === "padding" ? "#2a2e38" : "#3a4152";
  const value = r[colorBy][i];
  return value > 0 ? heat(0.15 + 0.85 * Math.sqrt(value / max)) : "#232733";
}

function diskStrip(file, colorBy, log, selectionLabel) {
  const r = file.regions;
  const wrap = h("div", { class: "strip-wrap" });
  const canvas = h("canvas", { "data-testid": "disk-strip" });
  addChildren(wrap, canvas);
  requestAnimationFrame(() => {
    const { xs, canvasWidth } = segmentLayout(r.start, r.end, wrap.clientWidth || 1000);
    canvas.style.width = canvasWidth + "px";
    canvas.style.height = "56px";
    const max = Math.max(1, ...r[colorBy]);
    let selected = null;
    const paint = () => {
      const { ctx, height } = setupCanvas(canvas);
      for (let i = 0; i < r.start.length; i++) {
        ctx.fillStyle = regionColor(r, i, colorBy, max);
        ctx.fillRect(xs[i], 0, Math.max(1, xs[i + 1] - xs[i] - 1), height);
      }
      paintRows(ctx, height, file.rows, r, xs);
      if (selected) {
        ctx.fillStyle = "#6cb6ff44"; ctx.strokeStyle = "#6cb6ff"; ctx.lineWidth = 2;
        ctx.fillRect(selected[0], 0, selected[1] - selected[0], height);
        ctx.strokeRect(selected[0], 1, selected[1] - selected[0], height - 2);
      }
    };
    paint();
    const indexAt = (x) => { let lo = 0, hi = r.start.length - 1; while (lo < hi) { const mid = (lo + hi + 1) >> 1; if (xs[mid] <= x) lo = mid; else hi = mid - 1; } return lo; };
    bindSegments(canvas, r, indexAt, (i0, i1) => {
      selected = [xs[Math.min(i0, i1)], xs[Math.max(i0, i1) + 1]];
      paint();
      selectFileRange(r, i0, i1, log, selectionLabel);
    });
  });
  return wrap;
}

// The rows that lookups (token embeddings) read, at their exact file bytes: a white tick in
// the lower half of their table's segment, each at least a pixel wide.
function paintRows(ctx, height, rows, r, xs) {
  if (!rows || !rows.start.length) return;
  ctx.fillStyle = "#ffffffd0";
  let i = 0;
  for (let k = 0; k < rows.start.length; k++) {
    while (i < r.start.length - 1 && r.end[i] <= rows.start[k]) i++;
    const span = Math.max(1, r.end[i] - r.start[i]), width = xs[i + 1] - xs[i];
    const x0 = xs[i] + ((rows.start[k] - r.start[i]) / span) * width, x1 = xs[i] + ((rows.end[k] - r.start[i]) / span) * width;
    ctx.fillRect(x0, height * 0.55, Math.max(1, x1 - x0), height * 0.45);
  }
}

// Regions i0..i1 selected: the event log beneath shows the nodes reading those bytes.
function selectFileRange(r, i0, i1, log, label) {
  const lo = r.start[Math.min(i0, i1)], hi = r.end[Math.max(i0, i1)];
  state.fileRange = [lo, hi];
  label.textContent = `selected file bytes ${fmtInt(lo)} – ${fmtInt(hi)} (${fmtBytes(hi - lo)})`;
  log.setFilter({ file_lo: lo, file_hi: hi });
}

function diskRows(file, colorBy, log, selectionLabel) {
  const r = file.regions;
  const holder = h("div", { class: "layer-rows", "data-testid": "disk-layer-rows" });
  const byLayer = new Map();
  for (let i = 0; i < r.start.length; i++) {
    if (r.kind[i] !== "tensor") continue;
    const key = r.layer[i] >= 0 ? `layer ${r.layer[i]}` : "outside layers";
    if (!byLayer.has(key)) byLayer.set(key, []);
    byLayer.get(key).push(i);
  }
  const max = Math.max(1, ...r[colorBy]);
  requestAnimationFrame(() => {
    for (const [label, members] of byLayer) {
      const canvas = h("canvas", { "data-testid": "disk-row" });
      const width = (holder.clientWidth || 1000) - 110;
      canvas.style.width = width + "px";
      canvas.style.height = "18px";
      const row = h("div", { class: "hbar" }, h("span", { class: "label", text: label }), canvas);
      row.style.gridTemplateColumns = "100px 1fr";
      addChildren(holder, row);
      const sub = { start: members.map((i) => r.start[i]), end: members.map((i) => r.end[i]) };
      const { xs } = segmentLayout(sub.start, sub.end, width);
      const scale = width / xs[xs.length - 1];
      const { ctx, height } = setupCanvas(canvas);
      members.forEach((i, k) => { ctx.fillStyle = regionColor(r, i, colorBy, max); ctx.fillRect(xs[k] * scale, 0, Math.max(1, (xs[k + 1] - xs[k]) * scale - 1), height); });
      const indexAt = (x) => { let k = 0; while (k < members.length - 1 && xs[k + 1] * scale <= x) k++; return members[k]; };
      bindSegments(canvas, r, indexAt, (i0, i1) => selectFileRange(r, i0, i1, log, selectionLabel));
    }
  });
  return holder;
}

// Hover: a tooltip with an arrow pointing at the segment and a magnifying lens around the
// cursor (small tensors stay findable). Drag: select a range of regions.
function bindSegments(canvas, r, indexAt, onSelect) {
  const lens = document.getElementById("lens");
  let dragFrom = null;
  canvas.addEventListener("mousemove", (event) => {
    const rect = canvas.getBoundingClientRect();
    const x = event.clientX - rect.left;
    const i = indexAt(x);
    const size = r.end[i] - r.start[i];
    tooltip.show(event.clientX, rect.bottom, r.name[i] || r.kind[i], [
      `${r.kind[i]}${r.type[i] ? " · " + r.type[i] : ""} · ${fmtBytes(size)}`,
      `file bytes ${fmtInt(r.start[i])} – ${fmtInt(r.end[i])}`,
      `layer ${r.layer[i] >= 0 ? r.layer[i] : "none"}${r.category[i] ? " · " + r.category[i] : ""}`,
      r.kind[i] === "tensor" ? `${fmtInt(r.reads[i])} reads · ${fmtNs(r.read_ns[i])} of reading nodes` : "",
      r.rows_read && r.rows_read[i] >= 0 ? `looked up by row: ${fmtInt(r.rows_read[i])} rows read (${fmtBytes(r.row_bytes_read[i])}, white ticks)` : ""], true);
    // the lens: this canvas's pixels around the cursor, enlarged 4x
    const ratio = canvas.width / rect.width;
    const ctx = lens.getContext("2d");
    ctx.imageSmoothingEnabled = false;
    ctx.fillStyle = "#14161b"; ctx.fillRect(0, 0, lens.width, lens.height);
    const sourceWidth = lens.width / 4;
    ctx.drawImage(canvas, (x - sourceWidth / 2) * ratio, 0, sourceWidth * ratio, canvas.height, 0, 0, lens.width, lens.height);
    ctx.strokeStyle = "#fff"; ctx.beginPath(); ctx.moveTo(lens.width / 2, 0); ctx.lineTo(lens.width / 2, lens.height); ctx.stroke();
    lens.hidden = false;
    lens.style.left = Math.max(4, event.clientX - lens.width / 2) + "px";
    lens.style.top = Math.max(4, rect.top - lens.height - 8) + "px";
    if (dragFrom !== null && Math.abs(x - dragFrom.x) > 3) onSelect(dragFrom.i, i);
  });
  canvas.addEventListener("mouseleave", () => { tooltip.hide(); lens.hidden = true; });
  canvas.addEventListener("mousedown", (event) => { const x = event.clientX - canvas.getBoundingClientRect().left; dragFrom = { x, i: indexAt(x) }; });
  canvas.addEventListener("mouseup", (event) => {
    if (dragFrom === null) return;
    const x = event.clientX - canvas.getBoundingClientRect().left;
    onSelect(dragFrom.i, indexAt(x));
    dragFrom = null;
  });
}

function drawKv(canvas, kv) {
  const { ctx, width, height } = setupCanvas(canvas);
  const nGraphs = kv.graph_id.length, nLayers = kv.layers.length;
  const most = Math.max(1, ...kv.used.flat());
  const cw = width / Math.max(1, nGraphs), rh = (height - 4) / nLayers;
  for (let g = 0; g < nGraphs; g++) for (let l = 0; l < nLayers; l++) {
    ctx.fillStyle = heat(0.1 + 0.9 * (kv.used[g][l] / most));
    ctx.fillRect(g * cw, l * rh, Math.ceil(cw), Math.ceil(rh));
  }
  canvas.onmousemove = (event) => {
    const rect = canvas.getBoundingClientRect();
    const g = Math.min(nGraphs - 1, Math.floor(((event.clientX - rect.left) / rect.width) * nGraphs));
    const l = Math.min(nLayers - 1, Math.floor(((event.clientY - rect.top) / (rect.height - 4)) * nLayers));
    if (g < 0 || l < 0) return;
    tooltip.show(event.clientX, event.clientY, `layer ${kv.layers[l]} · graph ${kv.graph_id[g]}`, [`${kv.used[g][l]} of ${kv.capacity} cells (${fmtPct(kv.used[g][l] / kv.capacity)})`]);
  };
  canvas.onmouseleave = () => tooltip.hide();
}

function drawOccupancy(canvas, occ) {
  const { ctx, width, height } = setupCanvas(canvas);
  ctx.fillStyle = "#14161b"; ctx.fillRect(0, 0, width, height);
  const t = occ.tensors;
  // The y axis ends a little above where 95 % of the intermediates end: one far-out tensor
  // (the logits, placed at the top of a buffer sized for the largest batch) would squash
  // the rest into a line. Beyond it, tensors are drawn clipped at the top edge.
  const ends = [...t.end].sort((a, b) => a - b);
  const top = Math.max(1, (ends[Math.floor(0.95 * (ends.length - 1))] || 1) * 1.15, occ.peak_bytes * 1.05);
  const X = (node) => (node / Math.max(1, occ.n_nodes)) * width;
  const Y = (byte) => Math.max(18, height - (byte / top) * (height - 20));
  ctx.fillStyle = "#2a3b5588"; // bytes alive after each node, behind the tensors
  ctx.beginPath(); ctx.moveTo(0, height);
  occ.live_bytes.forEach((bytes, node) => { ctx.lineTo(X(node), Y(bytes)); ctx.lineTo(X(node + 1), Y(bytes)); });
  ctx.lineTo(width, height); ctx.closePath(); ctx.fill();
  for (let i = 0; i < t.name.length; i++) {
    ctx.fillStyle = opColor(t.op[i]);
    const x0 = X(t.first_node[i]), x1 = X(t.last_node[i] + 1);
    ctx.fillRect(x0, Y(t.end[i]), Math.max(1.5, x1 - x0), Math.max(1.5, Y(t.start[i]) - Y(t.end[i])));
  }
  ctx.fillStyle = "#9aa1b3"; ctx.font = "11px system-ui, sans-serif";
  ctx.fillText(`live bytes (shaded), peak ${fmtBytes(occ.peak_bytes)} · axis to ${fmtBytes(top)} · highest tensor end ${fmtBytes(ends[ends.length - 1] || 0)}`, 6, 14);
  canvas.onmousemove = (event) => {
    const rect = canvas.getBoundingClientRect();
    const x = event.clientX - rect.left, y = event.clientY - rect.top;
    for (let i = t.name.length - 1; i >= 0; i--) {
      if (X(t.first_node[i]) <= x && x <= X(t.last_node[i] + 1) && Y(t.end[i]) <= y && y <= Y(t.start[i])) {
        return tooltip.show(event.clientX, event.clientY, t.name[i], [`${t.op[i]} · ${fmtBytes(t.end[i] - t.start[i])} at ${fmtInt(t.start[i])}`, `lives from node ${t.first_node[i]} to ${t.last_node[i]}`]);
      }
    }
    tooltip.hide();
  };
  canvas.onmouseleave = () => tooltip.hide();
}

// ---- statistics ------------------------------------------------------------------------

async function renderStats() {
  const section = document.getElementById("view-stats");
  const stats = await api(`runs/${state.runId}/stats`);
  setChildren(section,
    h("div", { class: "card", "data-testid": "findings" }, h("h2", { text: "Where the time goes" }),
      h("ul", { class: "findings" }, stats.findings.map((text) => h("li", { text })))),
    stats.activation_by_layer.length ? activationChart(stats.activation_by_layer) : null,
    h("h3", { text: "by op" }), sortableTable(stats.by_op, "op", "stats-op"),
    h("h3", { text: "by layer" }), sortableTable(stats.by_layer, "layer", "stats-layer"),
    h("h3", { text: "by tensor (top 500)" }), sortableTable(stats.by_tensor, "tensor", "stats-tensor"));
}

// --values stats: per layer, the range of its nodes' outputs (bar) and their mean |x| (dot).
function activationChart(rows) {
  const canvas = h("canvas", { "data-testid": "activation-chart" });
  canvas.style.width = "100%";
  canvas.style.height = "200px";
  const card = h("div", { class: "card" }, h("h3", { text: "activation range by layer (min … max, dot: mean |x|)" }), canvas);
  requestAnimationFrame(() => {
    const { ctx, width, height } = setupCanvas(canvas);
    const top = Math.max(1e-9, ...rows.map((r) => Math.max(Math.abs(r.min ?? 0), Math.abs(r.max ?? 0))));
    const Y = (v) => height / 2 - (v / top) * (height / 2 - 12);
    const step = width / rows.length;
    ctx.strokeStyle = "#313646"; ctx.beginPath(); ctx.moveTo(0, Y(0)); ctx.lineTo(width, Y(0)); ctx.stroke();
    rows.forEach((r, i) => {
      const x = i * step + step / 2;
      ctx.fillStyle = r.nan || r.inf ? "#ff6b6b" : "#4e79a7";
      ctx.fillRect(x - Math.max(2, step * 0.3), Y(r.max ?? 0), Math.max(4, step * 0.6), Math.max(1, Y(r.min ?? 0) - Y(r.max ?? 0)));
      ctx.fillStyle = "#edc948"; ctx.beginPath(); ctx.arc(x, Y(r.mean_abs ?? 0), 3, 0, 7); ctx.fill();
    });
    canvas.onmousemove = (event) => {
      const rect = canvas.getBoundingClientRect();
      const r = rows[Math.min(rows.length - 1, Math.floor(((event.clientX - rect.left) / rect.width) * rows.length))];
      tooltip.show(event.clientX, event.clientY, r.layer === "none" ? "outside layers" : `layer ${r.layer}`,
        [`${fmtNum(r.min)} … ${fmtNum(r.max)}, mean |x| ${fmtNum(r.mean_abs)}`, `${fmtInt(r.nan)} NaN, ${fmtInt(r.inf)} Inf in ${fmtInt(r.nodes)} node outputs`]);
    };
    canvas.onmouseleave = () => tooltip.hide();
  });
  return card;
}

// ---- attention -------------------------------------------------------------------------

async function renderAttention() {
  const section = document.getElementById("view-attention");
  const index = await api(`runs/${state.runId}/attention-index`);
  const graphs = Object.keys(index.graphs);
  if (!graphs.length) {
    setChildren(section, h("div", { class: "empty", "data-testid": "attention-empty", text: index.flash_attention
      ? "This run used flash attention: no softmax node exists to capture. Record with flash attention off (Llama(..., flash_attn=False)) and --capture 'kq_soft_max-*' to see attention."
      : "No attention captured. Record with --capture 'kq_soft_max-*' (and --capture-bytes if needed) to see each layer's and head's attention here." }));
    return;
  }
  const graphSelect = h("select", { "data-testid": "attention-graph" }, graphs.map((g) => h("option", { value: g, text: `graph ${g}` })));
  const layerSelect = h("select", { "data-testid": "attention-layer" });
  const headSelect = h("select", { "data-testid": "attention-head" }, Array.from({ length: index.heads }, (_, i) => h("option", { value: i, text: `head ${i}` })));
  const holder = h("div", { "data-testid": "attention-map" });
  const fillLayers = () => setChildren(layerSelect, ...index.graphs[graphSelect.value].map((l) => h("option", { value: l, text: `layer ${l}` })));
  const draw = async () => {
    const data = await api(`runs/${state.runId}/attention`, { graph: graphSelect.value, layer: layerSelect.value, head: headSelect.value });
    const cell = Math.max(6, Math.min(28, Math.floor(900 / Math.max(1, data.key_labels.length))));
    const canvas = h("canvas", { "data-testid": "attention-canvas" });
    const nQ = data.query_labels.length, nK = data.key_labels.length;
    canvas.style.width = nK * cell + "px";
    canvas.style.height = nQ * cell + "px";
    const keyLabels = h("div", { class: "attention-keys", "data-testid": "attention-keys" }, data.key_labels.map((t) => {
      const label = h("span", { text: JSON.stringify(t).slice(1, -1) }); label.style.width = cell + "px"; return label; }));
    const queryLabels = h("div", { class: "attention-queries", "data-testid": "attention-queries" }, data.query_labels.map((t) => {
      const label = h("div", { text: JSON.stringify(t).slice(1, -1) }); label.style.height = cell + "px"; return label; }));
    setChildren(holder, h("div", { class: "muted", text: `graph ${data.graph_id}, layer ${data.layer}, head ${data.head}: rows are the graph's tokens (queries), columns the KV cells (keys) by position` }),
      h("div", { class: "attention-grid" }, h("div"), keyLabels, queryLabels, canvas));
    const { ctx } = setupCanvas(canvas);
    for (let q = 0; q < nQ; q++) for (let k = 0; k < nK; k++) {
      ctx.fillStyle = heat(Math.sqrt(data.weights[q][k]));
      ctx.fillRect(k * cell, q * cell, cell - 1, cell - 1);
    }
    canvas.onmousemove = (event) => {
      const rect = canvas.getBoundingClientRect();
      const k = Math.floor((event.clientX - rect.left) / cell), q = Math.floor((event.clientY - rect.top) / cell);
      if (q < 0 || q >= nQ || k < 0 || k >= nK) return tooltip.hide();
      tooltip.show(event.clientX, event.clientY, `${JSON.stringify(data.query_labels[q])} → ${JSON.stringify(data.key_labels[k])}`, [`weight ${data.weights[q][k].toFixed(4)}`]);
    };
    canvas.onmouseleave = () => tooltip.hide();
  };
  graphSelect.addEventListener("change", () => { fillLayers(); draw(); });
  for (const select of [layerSelect, headSelect]) select.addEventListener("change", draw);
  setChildren(section, h("div", { class: "toolbar" }, graphSelect, layerSelect, headSelect), holder);
  fillLayers();
  await draw();
}

function sortableTable(rows, key, testid) {
  // "of it, waiting": the part of the time thread 0 waited at the barrier for the other
  // threads to finish these nodes (their stragglers), included in the time.
  const columns = [[key, key, (v) => v], ["count", "events", fmtInt], ["time_ns", "time", fmtNs], ["time_share", "share of time", fmtPct],
    ["wait_ns", "of it, waiting", fmtNs], ["mean_ns", "mean", fmtNs], ["bytes", "bytes written", fmtBytes], ["bytes_share", "share of bytes", fmtPct]];
  let sortKey = "time_ns", ascending = false;
  const table = h("table", { "data-testid": testid });
  const render = () => {
    const sorted = [...rows].sort((a, b) => {
      const x = a[sortKey], y = b[sortKey];
      const order = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y), undefined, { numeric: true });
      return ascending ? order : -order;
    });
    setChildren(table,
      h("tr", {}, columns.map(([name, label]) => h("th", { class: (name === sortKey ? "sorted" + (ascending ? " asc" : "") : "") + (name === key ? "" : " num"), text: label,
        onclick: () => { if (sortKey === name) ascending = !ascending; else { sortKey = name; ascending = name === key; } render(); } }))),
      ...sorted.map((row) => h("tr", {}, columns.map(([name, , format]) => h("td", { class: name === key ? "" : "num", text: format(row[name]) })))));
  };
  render();
  return h("div", { class: "table-wrap" }, table);
}

// ---- event log ---------------------------------------------------------------------------

const ROW_H_PX = 22, PAGE = 200;
const EVENT_COLUMNS = [["graph_id", "graph", "70px", fmtInt, true], ["node_index", "node", "60px", fmtInt, true],
  ["start_ns", "start", "100px", fmtNs, true], ["duration_ns", "time", "90px", fmtNs, true],
  ["wait_ns", "waiting", "80px", (v) => (v === null ? "—" : fmtNs(v)), true], ["op", "op", "110px", (v) => v],
  ["name", "name", "minmax(200px, 2fr)", (v) => v], ["layer", "layer", "60px", (v) => (v === null ? "—" : v), true],
  ["type", "type", "60px", (v) => v], ["shape", "shape", "minmax(120px, 1fr)", (v) => v]];

function eventLog(container, { compact = false } = {}) {
  let filter = {};
  const opSelect = h("select", { "data-testid": "filter-op" }, h("option", { value: "", text: "any op" }), state.overview.ops.map((op) => h("option", { value: op, text: op })));
  const nameInput = h("input", { type: "search", placeholder: "name contains…", "data-testid": "filter-name" });
  const layerInput = h("input", { type: "number", placeholder: "layer", min: 0, "data-testid": "filter-layer" });
  layerInput.style.width = "80px";
  const fromInput = h("input", { type: "number", placeholder: "from ms", step: "any", "data-testid": "filter-from" });
  const toInput = h("input", { type: "number", placeholder: "to ms", step: "any", "data-testid": "filter-to" });
  fromInput.style.width = toInput.style.width = "90px";
  const count = h("span", { class: "muted", "data-testid": "event-count" });
  const clear = h("button", { class: "btn", text: "clear", onclick: () => { filter = {}; opSelect.value = nameInput.value = layerInput.value = fromInput.value = toInput.value = ""; reload(); } });
  const grid = EVENT_COLUMNS.map((c) => c[2]).join(" ");
  const head = h("div", { class: "vhead" }, EVENT_COLUMNS.map(([, label, , , numeric]) => h("div", { class: "cell" + (numeric ? " num" : ""), text: label })));
  head.style.gridTemplateColumns = grid;
  const spacer = h("div");
  const body = h("div", { class: "vtable", "data-testid": "event-table" }, head, spacer);
  const detailPanel = h("div", { class: "side", "data-testid": "event-details" }, h("div", { class: "muted", text: "Click an event for its details." }));
  addChildren(container, h("div", { class: "toolbar" }, compact ? h("strong", { text: "events" }) : null, opSelect, nameInput, layerInput, fromInput, toInput, clear, count),
    h("div", { class: "split" }, body, compact ? null : detailPanel));
  let total = 0, pages = new Map(), generation = 0, selectedEvent = null;
  const query = () => ({ ...filter, op: opSelect.value, name: nameInput.value, layer: layerInput.value,
    t0: fromInput.value === "" ? "" : Math.round(Number(fromInput.value) * 1e6), t1: toInput.value === "" ? "" : Math.round(Number(toInput.value) * 1e6) });
  async function fetchPage(index, gen) {
    if (pages.has(index)) return pages.get(index);
    const promise = api(`runs/${state.runId}/events`, { ...query(), offset: index * PAGE, limit: PAGE });
    pages.set(index, promise);
    const result = await promise;
    if (gen !== generation) return null;
    total = result.total;
    return result;
  }
  const rowsShown = new Map();
  async function paint() {
    const gen = generation;
    const top = Math.max(0, body.scrollTop - 30);
    const first = Math.floor(top / ROW_H_PX), last = Math.min(total, first + Math.ceil(body.clientHeight / ROW_H_PX) + 2);
    const needed = new Set();
    for (let i = first; i < last; i++) needed.add(Math.floor(i / PAGE));
    for (const [i, el] of rowsShown) if (i < first || i >= last) { el.remove(); rowsShown.delete(i); }
    for (const pageIndex of needed) {
      const page = await fetchPage(pageIndex, gen);
      if (!page || gen !== generation) return;
      page.rows.forEach((row, k) => {
        const i = pageIndex * PAGE + k;
        if (i < first || i >= last || rowsShown.has(i)) return;
        const el = h("div", { class: "vrow" + (row.event === selectedEvent ? " selected" : ""), "data-event": row.event, onclick: () => {
          selectedEvent = row.event;
          for (const other of body.querySelectorAll(".vrow.selected")) other.classList.remove("selected");
          el.classList.add("selected");
          if (!compact) showDetails(detailPanel, row.graph_id, row.node_index);
        } }, EVENT_COLUMNS.map(([name, , , format, numeric]) => h("div", { class: "cell" + (numeric ? " num" : ""), text: format(row[name]) })));
        el.style.gridTemplateColumns = grid;
        el.style.top = (28 + i * ROW_H_PX) + "px";
        addChildren(body, el);
        rowsShown.set(i, el);
      });
    }
  }
  async function reload() {
    generation++;
    pages = new Map();
    for (const el of rowsShown.values()) el.remove();
    rowsShown.clear();
    body.scrollTop = 0;
    const first = await fetchPage(0, generation);
    if (!first) return;
    spacer.style.height = (28 + total * ROW_H_PX) + "px";
    count.textContent = `${fmtInt(total)} events`;
    paint();
  }
  let scrollFrame = false;
  body.addEventListener("scroll", () => { if (!scrollFrame) { scrollFrame = true; requestAnimationFrame(() => { scrollFrame = false; paint(); }); } });
  let typing;
  for (const input of [opSelect, nameInput, layerInput, fromInput, toInput]) input.addEventListener("input", () => { clearTimeout(typing); typing = setTimeout(reload, 250); });
  reload();
  return { setFilter(extra) { filter = { ...filter, ...extra }; reload(); } };
}

function renderEventsTab() {
  const section = document.getElementById("view-events");
  section.classList.add("fill");
  setChildren(section);
  const log = eventLog(section);
  if (state.fileRange) log.setFilter({ file_lo: state.fileRange[0], file_hi: state.fileRange[1] });
}

addEventListener("hashchange", () => showTab(location.hash.slice(1)));
start();
