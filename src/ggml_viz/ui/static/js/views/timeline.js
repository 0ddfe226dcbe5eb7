// Timeline: a lane per context, graphs labelled with their tokens, their nodes as bars
// colored by op; under it, for a run with GPU times, a lane per device with the kernels the
// GPU ran at their GPU times (colored by their node's op); for a joined distributed run, a lane
// per host with the messages on the wire drawn between them. The server answers each window at
// the canvas's pixel width (narrow nodes and kernels summed per pixel column); this draws,
// zooms and pans, hit-tests, and shows details.

import { getSearch, getTimeline } from "../api.js";
import { GPU_OTHER, GRAPH_BAR_COLORS, gpuColor, gpuOpName, opColor, phaseColor, phaseName } from "../colors.js";
import { eventRow, nodeDetails, showDetails } from "../details.js";
import { h, setChildren } from "../dom.js";
import { fmtBytes, fmtNs, fmtPct, truncate } from "../format.js";
import { state } from "../store.js";
import { legend, setupCanvas, showMessage, swatch, tooltip } from "../widgets.js";

const LANE_GRAPH_H = 22,
  LANE_NODE_H = 30,
  LANE_GAP = 26,
  AXIS_H = 24;
const GPU_LABEL_H = 18,
  GPU_LANE_H = 24,
  COPY_H = 14;
const MIN_SPAN_NS = 200,
  FOCUS_MIN_NS = 40000;

// -- pure geometry -------------------------------------------------------------------------

// Each lane's rows, top to bottom: its label's baseline, its graph bars' top, its node bars'
// top; then each of its GPU lanes (TimelineLane.gpu): the GPU lane's label baseline and its
// kernel bars' top.
export function laneLayout(lanes) {
  const rows = [];
  let y = AXIS_H;
  for (const lane of lanes) {
    const row = { lane, labelY: y + 12, graphY: y + 16, nodeY: y + 16 + LANE_GRAPH_H + 2, gpu: [] };
    y += 16 + LANE_GRAPH_H + 2 + LANE_NODE_H;
    for (const gpuLane of lane.gpu || []) {
      row.gpu.push({ gpuLane, labelY: y + 14, y: y + GPU_LABEL_H });
      y += GPU_LABEL_H + GPU_LANE_H;
    }
    rows.push(row);
    y += LANE_GAP;
  }
  return rows;
}

// The axis's tick spacing: 1, 2 or 5 times a power of ten, about every 110 px.
export function axisStep(t0, t1, width) {
  const rough = (t1 - t0) / Math.max(1, width / 110);
  const magnitude = Math.pow(10, Math.floor(Math.log10(rough)));
  return [1, 2, 5, 10].map((m) => m * magnitude).find((v) => v >= rough) || magnitude * 10;
}

// The window zoomed by `factor` (< 1: in) about the time under pixel anchorX, its span kept
// between 200 ns and four times the run.
export function zoomedView(view, factor, anchorX, width, duration) {
  const { t0, t1 } = view;
  const anchor = t0 + (anchorX / width) * (t1 - t0);
  const span = Math.min(Math.max((t1 - t0) * factor, MIN_SPAN_NS), duration * 4);
  const ratio = (anchor - t0) / (t1 - t0);
  return { t0: anchor - ratio * span, t1: anchor + (1 - ratio) * span };
}

// A window showing t0..t1 with a little context (at least 40 µs).
export function focusedView(t0, t1) {
  const span = Math.max((t1 - t0) * 1.15, FOCUS_MIN_NS);
  const mid = (t0 + t1) / 2;
  return { t0: mid - span / 2, t1: mid + span / 2 };
}

// What is under (x, y) on a canvas `width` px wide showing `view` of `data`: the narrowest
// node bar or kernel (3 px of slack), a summed pixel column, or a graph bar; null if nothing.
export function hitAt(data, view, x, y, width) {
  const { t0, t1 } = view;
  const t = t0 + (x / width) * (t1 - t0);
  const slack = (3 / width) * (t1 - t0);
  for (const { lane, graphY, nodeY, gpu } of laneLayout(data.lanes)) {
    for (const { gpuLane, y: top } of gpu) {
      if (y >= top && y <= top + GPU_LANE_H) return kernelAt(data, gpuLane, t, slack);
    }
    if (y >= nodeY && y <= nodeY + LANE_NODE_H) {
      const n = lane.nodes;
      let best = null;
      for (let i = 0; i < n.start.length; i++) {
        if (
          n.start[i] - slack <= t &&
          t <= n.end[i] + slack &&
          (!best || n.end[i] - n.start[i] < best.end - best.start)
        ) {
          best = { kind: "node", i, start: n.start[i], end: n.end[i], op: data.ops[n.op[i]], event: n.event[i] };
        }
      }
      if (best) return best;
      const c = lane.columns,
        colScale = (data.t1 - data.t0) / data.width;
      for (let i = 0; i < c.px.length; i++) {
        const c0 = data.t0 + c.px[i] * colScale;
        if (c0 - slack <= t && t <= c0 + colScale + slack)
          return { kind: "column", op: data.ops[c.op[i]], fill: c.fill[i], start: c0, end: c0 + colScale };
      }
    }
    if (y >= graphY && y <= graphY + LANE_GRAPH_H) {
      const g = lane.graphs;
      for (let i = 0; i < g.start.length; i++) {
        if (g.start[i] <= t && t <= g.end[i])
          return {
            kind: "graph",
            start: g.start[i],
            end: g.end[i],
            graph_id: g.graph_id[i],
            label: g.label[i],
            phase: g.phase[i],
          };
      }
    }
  }
  return null;
}

// What is at time t (± slack) of a GPU lane: the narrowest kernel, or a summed pixel column; null if nothing.
function kernelAt(data, gpuLane, t, slack) {
  const k = gpuLane.bars;
  let best = -1;
  for (let i = 0; i < k.start.length; i++) {
    if (
      k.start[i] - slack <= t &&
      t <= k.end[i] + slack &&
      (best < 0 || k.end[i] - k.start[i] < k.end[best] - k.start[best])
    )
      best = i;
  }
  if (best >= 0) {
    const i = best,
      name = k.kernel[i];
    return {
      kind: "kernel",
      i,
      start: k.start[i],
      end: k.end[i],
      busy: k.busy[i],
      code: k.op[i],
      op: gpuOpName(k.op[i], data.ops),
      event: k.event[i],
      kernel: gpuLane.kernels[name],
      name: gpuLane.names[name],
      bytes: k.bytes[i],
      device: gpuLane.device_name,
    };
  }
  const c = gpuLane.columns,
    colScale = (data.t1 - data.t0) / data.width;
  for (let i = 0; i < c.px.length; i++) {
    const c0 = data.t0 + c.px[i] * colScale;
    if (c0 - slack <= t && t <= c0 + colScale + slack)
      return {
        kind: "column",
        op: gpuOpName(c.op[i], data.ops),
        fill: c.fill[i],
        start: c0,
        end: c0 + colScale,
        gpu: true,
      };
  }
  return null;
}

// A kernel's tooltip (KernelBars, as hitAt found it), and once its node's EventRow is known,
// with the node: [title, lines].
export function kernelTooltip(hit, row = null) {
  const duration = hit.end - hit.start;
  const node = row
    ? `${row.name} · ${row.op} · layer ${row.layer === null ? "none" : row.layer} · graph ${row.graph_id}`
    : hit.event >= 0
      ? `a ${hit.op} node`
      : hit.op;
  const busy =
    `${fmtNs(duration)} on ${hit.device} · busy ${fmtNs(hit.busy)}` +
    (duration > 0 ? ` (${fmtPct(hit.busy / duration)}, overlap counted once)` : "");
  const lines = [node, busy];
  if (hit.code < -1) lines.push(fmtBytes(hit.bytes));
  if (hit.name && hit.name !== hit.kernel) lines.push(truncate(hit.name, 160));
  if (hit.event >= 0) lines.push("click for the node");
  return [hit.kernel, lines];
}

// A hit's tooltip, before its row is fetched: [title, lines].
export function hitTooltip(hit) {
  if (hit.kind === "kernel") return kernelTooltip(hit);
  if (hit.kind === "graph")
    return [
      `graph ${hit.graph_id} · ${hit.phase}`,
      [fmtNs(hit.end - hit.start), "tokens: " + JSON.stringify(hit.label.slice(0, 80)), "click to zoom in"],
    ];
  if (hit.kind === "column")
    return [
      `many short ${hit.gpu ? "kernels" : "nodes"}, mostly ${hit.op}`,
      [`${fmtPct(hit.fill)} busy in this pixel`, "zoom in to see each"],
    ];
  return [hit.op, [fmtNs(hit.end - hit.start)]];
}

// A node's tooltip once its EventRow is known: [title, lines].
export function rowTooltip(row) {
  const waiting = row.wait_ns ? ` (${fmtNs(row.wait_ns)} waiting for other threads)` : "";
  return [
    row.name,
    [
      `${row.op} · ${row.type} ${row.shape}`,
      `${fmtNs(row.duration_ns)}${waiting} · layer ${row.layer === null ? "none" : row.layer} · graph ${row.graph_id}`,
    ],
  ];
}

// -- the view ------------------------------------------------------------------------------

export const timeline = {
  view: null,
  data: null,
  canvas: null,
  panel: null,
  hover: null,
  asked: 0,
  shown: 0, // requests for bars: the last asked, the last drawn
  frameTimes: [],

  init(section) {
    this.canvas = h("canvas", { "data-testid": "timeline-canvas", tabindex: 0 });
    this.panel = h(
      "div",
      { class: "side", "data-testid": "timeline-details" },
      h("div", {
        class: "muted",
        text: "Click a node for its details. Wheel: zoom · drag or shift+wheel: pan · W/S zoom, A/D pan, 0 reset.",
      })
    );
    const search = h("input", { type: "search", placeholder: "search name or op…", "data-testid": "timeline-search" });
    const results = h("select", { "data-testid": "search-results", hidden: true });
    search.addEventListener("change", async () => {
      const { hits } = await getSearch(state.runId, search.value);
      setChildren(
        results,
        h("option", { text: `${hits.length} hits` }),
        ...hits.map((hit) =>
          h("option", {
            value: hit.event,
            text: `${hit.name} · ${hit.op} · graph ${hit.graph_id} · ${fmtNs(hit.duration_ns)}`,
          })
        )
      );
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
    setChildren(
      section,
      h(
        "div",
        { class: "toolbar" },
        search,
        results,
        h("button", { class: "btn", text: "−", title: "zoom out (S)", onclick: () => this.zoom(1.6) }),
        h("button", { class: "btn", text: "+", title: "zoom in (W)", onclick: () => this.zoom(1 / 1.6) }),
        h("button", { class: "btn", text: "whole run", title: "reset (0)", onclick: () => this.reset() }),
        legend(state.overview.ops),
        state.overview.gpu ? gpuLegend() : null
      ),
      h("div", { class: "split" }, h("div", { class: "canvas-wrap" }, this.canvas), this.panel)
    );
    this.bindInput();
    this.reset();
    new ResizeObserver(() => this.resize()).observe(this.canvas);
  },

  duration() {
    return Math.max(1, state.overview.duration_ns);
  },
  width() {
    return this.canvas.getBoundingClientRect().width || 1;
  },
  reset() {
    const d = this.duration();
    this.view = { t0: -d * 0.01, t1: d * 1.01 };
    this.request();
    this.draw();
  },
  focus(t0, t1) {
    this.view = focusedView(t0, t1);
    this.request();
    this.draw();
  },
  resize() {
    if (this.canvas && this.canvas.isConnected) {
      this.request();
      this.draw();
    }
  },
  layout() {
    return laneLayout(this.data ? this.data.lanes : []);
  },

  zoom(factor, anchorX) {
    const width = this.width();
    this.view = zoomedView(this.view, factor, anchorX === undefined ? width / 2 : anchorX, width, this.duration());
    this.schedule();
  },
  pan(pixels) {
    const shift = (pixels / this.width()) * (this.view.t1 - this.view.t0);
    this.view = { t0: this.view.t0 + shift, t1: this.view.t1 + shift };
    this.schedule();
  },
  schedule() {
    if (!this.frameRequested) {
      this.frameRequested = true;
      requestAnimationFrame(() => {
        this.frameRequested = false;
        this.draw();
      });
    }
    clearTimeout(this.requestTimer);
    this.requestTimer = setTimeout(() => this.request(), 60);
  },

  // Ask for the bars of the view. Answers are drawn in the order asked, an older one never
  // over a newer; one that arrives after a newer was asked is still drawn (at its own times)
  // until that one arrives, so requests faster than answers (a fast live run) never starve it.
  async request() {
    const width = Math.round(this.canvas.getBoundingClientRect().width) || 1000;
    const t0 = Math.floor(this.view.t0),
      t1 = Math.ceil(this.view.t1);
    const ticket = ++this.asked,
      runId = state.runId;
    try {
      const data = await getTimeline(runId, t0, t1, width);
      if (ticket < this.shown || runId !== state.runId) return;
      this.shown = ticket;
      this.data = data;
      this.draw();
    } catch (error) {
      showMessage("timeline: " + error.message);
    }
  },

  // A live run grew from `before` ns: a view of the whole run follows it; one reaching its
  // old end asks again for its bars; a view inside the run stays as it is.
  grew(before) {
    if (!this.canvas || !this.canvas.isConnected) return;
    if (this.view.t0 <= 0 && this.view.t1 >= before) this.reset();
    else if (this.view.t1 >= before) this.request();
  },

  bindInput() {
    const canvas = this.canvas;
    canvas.addEventListener(
      "wheel",
      (event) => {
        event.preventDefault();
        const x = event.clientX - canvas.getBoundingClientRect().left;
        if (event.shiftKey || Math.abs(event.deltaX) > Math.abs(event.deltaY)) this.pan(event.deltaX || event.deltaY);
        else this.zoom(Math.exp(event.deltaY * 0.0015), x);
      },
      { passive: false }
    );
    let drag = null;
    canvas.addEventListener("mousedown", (event) => {
      drag = { x: event.clientX, moved: false };
      canvas.focus();
    });
    addEventListener("mousemove", (event) => {
      if (drag) {
        const dx = event.clientX - drag.x;
        if (Math.abs(dx) > 2) drag.moved = true;
        if (drag.moved) {
          this.pan(-dx);
          drag.x = event.clientX;
          tooltip.hide();
          return;
        }
      }
      if (event.target === canvas) this.hoverAt(event);
    });
    addEventListener("mouseup", (event) => {
      if (drag && !drag.moved && event.target === canvas) {
        const hit = this.hitTest(event);
        if (hit && (hit.kind === "node" || (hit.kind === "kernel" && hit.event >= 0))) this.selectEvent(hit);
        else if (hit && hit.kind === "graph") this.focus(hit.start, hit.end);
      }
      drag = null;
    });
    canvas.addEventListener("mouseleave", () => {
      tooltip.hide();
      this.hover = null;
      this.draw();
    });
    canvas.addEventListener("keydown", (event) => {
      const keys = {
        w: () => this.zoom(1 / 1.4),
        s: () => this.zoom(1.4),
        a: () => this.pan(-120),
        d: () => this.pan(120),
        ArrowLeft: () => this.pan(-60),
        ArrowRight: () => this.pan(60),
        ArrowUp: () => this.zoom(1 / 1.2),
        ArrowDown: () => this.zoom(1.2),
        0: () => this.reset(),
        Home: () => this.reset(),
      };
      const action = keys[event.key];
      if (action) {
        event.preventDefault();
        action();
      }
    });
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
    for (const { lane, labelY, graphY, nodeY, gpu } of this.layout()) {
      ctx.fillStyle = "#9aa1b3";
      ctx.font = "12px system-ui, sans-serif";
      ctx.fillText(lane.label, 6, labelY);
      drawGraphs(ctx, lane.graphs, X, width, graphY);
      drawNodes(ctx, lane, data, X, width, nodeY);
      const sel = this.selectedBar;
      if (sel) {
        ctx.strokeStyle = "#ffffff";
        ctx.lineWidth = 2;
        ctx.strokeRect(X(sel.start), nodeY - 1, Math.max(2, X(sel.end) - X(sel.start)), LANE_NODE_H + 2);
      }
      for (const row of gpu) drawGpuLane(ctx, row, data, X, width, this.selectedEvent);
    }
    drawTransfers(ctx, data.transfers, this.layout(), t0, scale, width);
    if (!this.firstDataPaint) this.firstDataPaint = performance.now(); // since navigation: the benchmark reads it
    const spent = performance.now() - began;
    this.frameTimes.push(spent);
    if (this.frameTimes.length > 2000) this.frameTimes.splice(0, 1000);
    this.lastDraw = { t0, t1, ms: spent };
    canvas.dataset.drawn = String((Number(canvas.dataset.drawn) || 0) + 1);
  },

  drawAxis(ctx, width, t0, t1, scale) {
    const step = axisStep(t0, t1, width);
    ctx.fillStyle = "#9aa1b3";
    ctx.strokeStyle = "#313646";
    ctx.lineWidth = 1;
    ctx.font = "11px system-ui, sans-serif";
    for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) {
      const x = Math.round((t - t0) * scale) + 0.5;
      ctx.beginPath();
      ctx.moveTo(x, AXIS_H - 6);
      ctx.lineTo(x, 4000);
      ctx.stroke();
      ctx.fillText(fmtNs(t), x + 3, 14);
    }
  },

  hitTest(event) {
    if (!this.data) return null;
    const rect = this.canvas.getBoundingClientRect();
    return hitAt(this.data, this.view, event.clientX - rect.left, event.clientY - rect.top, rect.width);
  },

  async hoverAt(event) {
    const hit = this.hitTest(event);
    if (!hit) {
      tooltip.hide();
      this.canvas.style.cursor = "default";
      return;
    }
    this.canvas.style.cursor = "pointer";
    tooltip.show(event.clientX, event.clientY, ...hitTooltip(hit));
    if (hit.kind !== "node" && !(hit.kind === "kernel" && hit.event >= 0)) return;
    const token = (this.hoverToken = {});
    const row = await eventRow(hit.event).catch(() => null);
    if (this.hoverToken !== token || !row) return;
    tooltip.show(event.clientX, event.clientY, ...(hit.kind === "kernel" ? kernelTooltip(hit, row) : rowTooltip(row)));
  },

  // A node bar or a kernel: its node's details; a node's bar outlined, or its kernels.
  async selectEvent(hit) {
    const row = await eventRow(hit.event);
    this.selectedBar = hit.kind === "node" ? { start: hit.start, end: hit.end } : null;
    this.selectedEvent = hit.event;
    this.draw();
    await showDetails(this.panel, row.graph_id, row.node_index);
  },
  async select(graphId, nodeIndex) {
    const node = await nodeDetails(graphId, nodeIndex);
    if (node.start_ns !== null) this.selectedBar = { start: node.start_ns, end: node.end_ns };
    this.selectedEvent = node.event;
    this.draw();
    await showDetails(this.panel, graphId, nodeIndex);
  },
};

// A joined run's messages between hosts: a line from the sender's node lane when it was sent
// to the receiver's when it arrived (on the head's clock), thicker for more bytes.
export function transferSegments(transfers, rows, t0, scale) {
  const segments = [],
    X = (t) => (t - t0) * scale;
  if (!transfers) return segments;
  const middle = (i) => (rows[i] ? rows[i].nodeY + LANE_NODE_H / 2 : null);
  for (let i = 0; i < transfers.start.length; i++) {
    const y0 = middle(transfers.source[i]),
      y1 = middle(transfers.target[i]);
    if (y0 === null || y1 === null) continue;
    segments.push({
      x0: X(transfers.start[i]),
      y0,
      x1: X(transfers.end[i]),
      y1,
      width: transfers.bytes[i] >= 65536 ? 2 : 1,
    });
  }
  return segments;
}

function drawTransfers(ctx, transfers, rows, t0, scale, width) {
  ctx.save();
  ctx.strokeStyle = "rgba(225, 87, 89, 0.7)";
  for (const s of transferSegments(transfers, rows, t0, scale)) {
    if (Math.max(s.x0, s.x1) < 0 || Math.min(s.x0, s.x1) > width) continue;
    ctx.lineWidth = s.width;
    ctx.beginPath();
    ctx.moveTo(s.x0, s.y0);
    ctx.lineTo(s.x1, s.y1);
    ctx.stroke();
  }
  ctx.restore();
}

// Graph bars, with their tokens inside where there is room.
function drawGraphs(ctx, g, X, width, graphY) {
  for (let i = 0; i < g.start.length; i++) {
    const x0 = X(g.start[i]),
      x1 = X(g.end[i]);
    if (x1 < 0 || x0 > width) continue;
    ctx.fillStyle = phaseColor(g.phase[i], GRAPH_BAR_COLORS);
    ctx.fillRect(x0, graphY, Math.max(1, x1 - x0 - 1), LANE_GRAPH_H);
    if (x1 - x0 > 40) {
      ctx.save();
      ctx.beginPath();
      ctx.rect(x0, graphY, x1 - x0 - 1, LANE_GRAPH_H);
      ctx.clip();
      ctx.fillStyle = "#e3e6ee";
      const phase = g.phase[i] === "prompt" || g.phase[i] === "decode" ? "" : phaseName(g.phase[i]) + " ";
      ctx.fillText(`${g.graph_id[i]} ${phase}${JSON.stringify(g.label[i])}`, Math.max(x0, 0) + 4, graphY + 15);
      ctx.restore();
    }
  }
}

// Summed pixel columns (of the data's own window: each a column's busiest op, as tall as the
// column is full) in a band of `height` from `y`.
function drawColumns(ctx, c, data, X, width, y, height, colorOf) {
  const colScale = (data.t1 - data.t0) / data.width;
  for (let i = 0; i < c.px.length; i++) {
    const x0 = X(data.t0 + c.px[i] * colScale),
      x1 = X(data.t0 + (c.px[i] + 1) * colScale);
    if (x1 < 0 || x0 > width) continue;
    ctx.fillStyle = colorOf(c.op[i]);
    const barHeight = height * (0.35 + 0.65 * c.fill[i]);
    ctx.fillRect(x0, y + height - barHeight, Math.max(1, x1 - x0), barHeight);
  }
}

// Summed pixel columns, then each node's own bar.
function drawNodes(ctx, lane, data, X, width, nodeY) {
  const ops = data.ops;
  drawColumns(ctx, lane.columns, data, X, width, nodeY, LANE_NODE_H, (op) => opColor(ops[op], state.overview.ops));
  const n = lane.nodes;
  for (let i = 0; i < n.start.length; i++) {
    const x0 = X(n.start[i]),
      x1 = X(n.end[i]);
    if (x1 < 0 || x0 > width) continue;
    ctx.fillStyle = opColor(ops[n.op[i]], state.overview.ops);
    ctx.fillRect(x0, nodeY, Math.max(1, x1 - x0 - (x1 - x0 > 3 ? 0.5 : 0)), LANE_NODE_H);
    if (x1 - x0 > 60) {
      ctx.fillStyle = "#0b0c10";
      ctx.fillText(ops[n.op[i]], x0 + 3, nodeY + 19);
    }
  }
}

// A GPU lane: its label, the traced graphs' spans (where the GPU was watched), summed pixel
// columns, then each kernel at its GPU times; the selected node's kernels outlined.
function drawGpuLane(ctx, { gpuLane, labelY, y }, data, X, width, selectedEvent) {
  ctx.fillStyle = "#9aa1b3";
  ctx.font = "11px system-ui, sans-serif";
  ctx.fillText(gpuLane.label, 6, labelY);
  const traced = gpuLane.traced;
  ctx.fillStyle = "#1d222c";
  for (let i = 0; i < traced.start.length; i++) {
    const x0 = X(traced.start[i]),
      x1 = X(traced.end[i]);
    if (x1 >= 0 && x0 <= width) ctx.fillRect(x0, y, Math.max(1, x1 - x0), GPU_LANE_H);
  }
  const ops = data.ops,
    runOps = state.overview.ops;
  drawColumns(ctx, gpuLane.columns, data, X, width, y, GPU_LANE_H, (op) => gpuColor(op, ops, runOps));
  const k = gpuLane.bars;
  for (let i = 0; i < k.start.length; i++) {
    const x0 = X(k.start[i]),
      x1 = X(k.end[i]);
    if (x1 < 0 || x0 > width) continue;
    const copy = k.op[i] < -1,
      top = copy ? y + GPU_LANE_H - COPY_H : y;
    ctx.fillStyle = gpuColor(k.op[i], ops, runOps);
    ctx.fillRect(x0, top, Math.max(1, x1 - x0 - (x1 - x0 > 3 ? 0.5 : 0)), copy ? COPY_H : GPU_LANE_H);
    if (x1 - x0 > 70) {
      ctx.save();
      ctx.beginPath();
      ctx.rect(x0, y, x1 - x0, GPU_LANE_H);
      ctx.clip();
      ctx.fillStyle = "#0b0c10";
      ctx.fillText(gpuLane.kernels[k.kernel[i]], x0 + 3, y + 16);
      ctx.restore();
    }
  }
  if (selectedEvent === undefined || selectedEvent === null || selectedEvent < 0) return;
  ctx.strokeStyle = "#ffffff";
  ctx.lineWidth = 2;
  for (let i = 0; i < k.start.length; i++) {
    if (k.event[i] === selectedEvent)
      ctx.strokeRect(X(k.start[i]), y - 1, Math.max(2, X(k.end[i]) - X(k.start[i])), GPU_LANE_H + 2);
  }
}

// The GPU lanes' own colors: what is not a node's kernel.
function gpuLegend() {
  return h(
    "div",
    { class: "legend", "data-testid": "gpu-legend" },
    h("span", { class: "muted", text: "GPU:" }),
    Object.values(GPU_OTHER).map(({ name, color }) => h("span", {}, swatch(color), name))
  );
}

export function render(section) {
  state.timeline = timeline;
  timeline.data = null;
  timeline.init(section);
  if (state.timeFocus) takeFocus();
}

// Shown again: zoomed onto a span another view asked for, or fitted to its canvas.
export function onShow() {
  if (state.timeFocus) takeFocus();
  else timeline.resize();
}

function takeFocus() {
  const [t0, t1] = state.timeFocus;
  state.timeFocus = null;
  timeline.focus(t0, t1);
}
