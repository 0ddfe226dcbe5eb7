// Slots: a served run's KV cache over time. The cells each sequence (a server's slot) holds after
// each llama_decode call, stacked, under the cache's capacity; its context shifts and prompt-cache
// reuses marked; and the KV bytes a decode step read per token against the context it reached.

import { getSlots } from "../api.js";
import { HUES } from "../colors.js";
import { h, setChildren } from "../dom.js";
import { fmtBytes, fmtInt, fmtNs } from "../format.js";
import { state } from "../store.js";
import { setupCanvas, sizedCanvas, swatch, tooltip } from "../widgets.js";

const NONE = "No tokens of a sequence in this run: the slots view is for llama.cpp's programs and servers.";
const EVENT_COLORS = { context_shift: "#e15759", cache_reuse: "#edc948" };
const EVENT_NAMES = { context_shift: "context shift", cache_reuse: "cache reuse" };
const CAPACITY_COLOR = "#c9ccd6";
const PAD = { left: 56, right: 12, top: 10, bottom: 22 };
const LISTED_EVENTS = 200; // events listed in words (all are marked on the chart)

const seqColor = (i) => HUES[i % HUES.length];

export async function render(section) {
  const data = await getSlots(state.runId);
  if (!data.sequences.length) {
    setChildren(section, h("div", { class: "empty", "data-testid": "slots-empty", text: NONE }));
    return;
  }
  const cellsCanvas = sizedCanvas("slots-cells-canvas", "100%", "280px");
  const axis = h(
    "select",
    { "data-testid": "slots-axis" },
    h("option", { value: "time", text: "over time" }),
    h("option", { value: "call", text: "over llama_decode calls" })
  );
  axis.addEventListener("change", () => drawCells(cellsCanvas, data, axis.value === "call"));
  const readsCanvas = sizedCanvas("slots-reads-canvas", "100%", "220px");
  setChildren(
    section,
    h(
      "div",
      { class: "slots", "data-testid": "slots-view" },
      h(
        "div",
        { class: "card", "data-testid": "slots-cells" },
        h("h3", { text: "KV cells per sequence (slot) after each llama_decode call, stacked" }),
        h("div", { class: "toolbar" }, axis, slotsLegend(data)),
        cellsCanvas
      ),
      h("div", { class: "card" }, h("h3", { text: "context shifts and cache reuses" }), eventList(data)),
      h(
        "div",
        { class: "card", "data-testid": "slots-reads" },
        h("h3", { text: "KV cache bytes a decode step read per token, against the context (cells) it reached" }),
        readsCanvas
      )
    )
  );
  requestAnimationFrame(() => {
    drawCells(cellsCanvas, data);
    drawReads(readsCanvas, data.reads);
  });
}

function slotsLegend(data) {
  const capacity = data.capacity
    ? `capacity: ${fmtInt(data.capacity)} cells` +
      (data.per_sequence_capacity ? ` (${fmtInt(data.per_sequence_capacity)} per sequence, dashed)` : " (shared)")
    : data.capacity_note;
  return h(
    "div",
    { class: "legend" },
    data.sequences.map((seq, i) => h("span", {}, swatch(seqColor(i)), `sequence ${seq}`)),
    h("span", {}, swatch(CAPACITY_COLOR), capacity),
    Object.entries(EVENT_NAMES).map(([kind, name]) => h("span", {}, swatch(EVENT_COLORS[kind]), name))
  );
}

function eventList(data) {
  if (!data.events.length) return h("div", { class: "muted", text: "none: no slot was shifted or reused a prefix" });
  const more = data.events.length - LISTED_EVENTS;
  return h(
    "ul",
    { class: "slots-events" },
    data.events.slice(0, LISTED_EVENTS).map((e) =>
      h("li", {
        "data-testid": "slots-event",
        text:
          `${EVENT_NAMES[e.kind]} · sequence ${e.seq_id} at ${fmtNs(e.time_ns)} (call ${fmtInt(e.decode_index)}): ` +
          `${fmtInt(e.cells_before)} → ${fmtInt(e.cells_after)} cells` +
          (e.kind === "cache_reuse" ? ` (${fmtInt(e.cells_after)} cached prompt tokens)` : " kept"),
      })
    ),
    more > 0 ? h("li", { class: "muted", text: `and ${fmtInt(more)} more, marked on the chart` }) : null
  );
}

function axes(ctx, width, height, yMax, yText) {
  ctx.strokeStyle = "#313646";
  ctx.fillStyle = "#8a90a2";
  ctx.font = "11px sans-serif";
  ctx.beginPath();
  ctx.moveTo(PAD.left, PAD.top);
  ctx.lineTo(PAD.left, height - PAD.bottom);
  ctx.lineTo(width - PAD.right, height - PAD.bottom);
  ctx.stroke();
  ctx.textAlign = "right";
  ctx.fillText(yText(yMax), PAD.left - 4, PAD.top + 8);
  ctx.fillText(yText(0), PAD.left - 4, height - PAD.bottom);
}

// The cells per sequence, stacked, over time or over calls (byCall: each call one step wide).
function drawCells(canvas, data, byCall = false) {
  const { ctx, width, height } = setupCanvas(canvas);
  ctx.clearRect(0, 0, width, height);
  const n = data.time_ns.length;
  const along = byCall ? data.decode_index : data.time_ns;
  const eventAt = (e) => (byCall ? e.decode_index : e.time_ns);
  const label = (v) => (byCall ? `call ${fmtInt(v)}` : fmtNs(v));
  const totals = data.time_ns.map((_, p) => data.cells.reduce((sum, row) => sum + row[p], 0));
  const yMax = Math.max(1, data.capacity || 0, ...totals) * 1.05;
  const t0 = along[0],
    t1 = Math.max(along[n - 1], t0 + 1);
  const X = (t) => PAD.left + ((t - t0) / (t1 - t0)) * (width - PAD.left - PAD.right);
  const Y = (v) => height - PAD.bottom - (v / yMax) * (height - PAD.top - PAD.bottom);
  axes(ctx, width, height, yMax, (v) => fmtInt(Math.round(v)));
  const below = new Array(n).fill(0);
  data.cells.forEach((row, i) => {
    const above = row.map((v, p) => below[p] + v);
    ctx.fillStyle = seqColor(i);
    ctx.globalAlpha = 0.75;
    ctx.beginPath();
    ctx.moveTo(X(along[0]), Y(below[0]));
    for (let p = 0; p < n; p++) ctx.lineTo(X(along[p]), Y(above[p]));
    for (let p = n - 1; p >= 0; p--) ctx.lineTo(X(along[p]), Y(below[p]));
    ctx.closePath();
    ctx.fill();
    ctx.globalAlpha = 1;
    above.forEach((v, p) => (below[p] = v));
  });
  const line = (value, dashed) => {
    ctx.strokeStyle = CAPACITY_COLOR;
    ctx.setLineDash(dashed ? [5, 4] : []);
    ctx.beginPath();
    ctx.moveTo(PAD.left, Y(value));
    ctx.lineTo(width - PAD.right, Y(value));
    ctx.stroke();
    ctx.setLineDash([]);
  };
  if (data.capacity) line(data.capacity, false);
  if (data.per_sequence_capacity) line(data.per_sequence_capacity, true);
  for (const e of data.events) {
    const x = X(eventAt(e));
    ctx.strokeStyle = ctx.fillStyle = EVENT_COLORS[e.kind];
    ctx.beginPath();
    ctx.moveTo(x, PAD.top);
    ctx.lineTo(x, height - PAD.bottom);
    ctx.stroke();
    ctx.beginPath();
    ctx.moveTo(x - 5, PAD.top);
    ctx.lineTo(x + 5, PAD.top);
    ctx.lineTo(x, PAD.top + 8);
    ctx.fill();
  }
  ctx.fillStyle = "#8a90a2";
  ctx.textAlign = "left";
  ctx.fillText(label(t0), PAD.left, height - 6);
  ctx.textAlign = "right";
  ctx.fillText(label(t1), width - PAD.right, height - 6);
  canvas.onmousemove = (event) => {
    const rect = canvas.getBoundingClientRect();
    const t = t0 + ((event.clientX - rect.left - PAD.left) / (width - PAD.left - PAD.right)) * (t1 - t0);
    let p = along.findIndex((value) => value >= t);
    if (p < 0) p = n - 1;
    const lines = data.sequences.map((seq, i) => `sequence ${seq}: ${fmtInt(data.cells[i][p])} cells`);
    lines.push(`in all: ${fmtInt(totals[p])} cells`);
    const title = `call ${fmtInt(data.decode_index[p])} at ${fmtNs(data.time_ns[p])}`;
    tooltip.show(event.clientX, event.clientY, title, lines);
  };
  canvas.onmouseleave = () => tooltip.hide();
}

function drawReads(canvas, reads) {
  const { ctx, width, height } = setupCanvas(canvas);
  const n = reads.context_cells.length;
  if (!n) {
    ctx.fillStyle = "#8a90a2";
    ctx.fillText("no decode step read the KV cache", PAD.left, PAD.top + 12);
    return;
  }
  const xMax = Math.max(1, ...reads.context_cells),
    yMax = Math.max(1, ...reads.kv_bytes_per_token) * 1.05;
  const X = (c) => PAD.left + (c / xMax) * (width - PAD.left - PAD.right);
  const Y = (v) => height - PAD.bottom - (v / yMax) * (height - PAD.top - PAD.bottom);
  axes(ctx, width, height, yMax, (v) => fmtBytes(v));
  ctx.strokeStyle = ctx.fillStyle = HUES[0];
  ctx.beginPath();
  reads.context_cells.forEach((c, i) => {
    const y = Y(reads.kv_bytes_per_token[i]);
    if (i === 0) ctx.moveTo(X(c), y);
    else ctx.lineTo(X(c), y);
  });
  ctx.stroke();
  reads.context_cells.forEach((c, i) => ctx.fillRect(X(c) - 1.5, Y(reads.kv_bytes_per_token[i]) - 1.5, 3, 3));
  ctx.fillStyle = "#8a90a2";
  ctx.textAlign = "left";
  ctx.fillText("0 cells", PAD.left, height - 6);
  ctx.textAlign = "right";
  ctx.fillText(`${fmtInt(xMax)} cells`, width - PAD.right, height - 6);
  canvas.onmousemove = (event) => {
    const rect = canvas.getBoundingClientRect();
    const c = ((event.clientX - rect.left - PAD.left) / (width - PAD.left - PAD.right)) * xMax;
    let i = reads.context_cells.findIndex((cells) => cells >= c);
    if (i < 0) i = n - 1;
    tooltip.show(event.clientX, event.clientY, `context ${fmtInt(reads.context_cells[i])} cells`, [
      `KV bytes read per token: ${fmtBytes(reads.kv_bytes_per_token[i])}`,
    ]);
  };
  canvas.onmouseleave = () => tooltip.hide();
}
