// Memory: the dual-track view. DISK (views/disk.js) above, with the event log beneath
// filtered by the file range dragged across it; BUFFERS: every runtime buffer by kind, the
// KV cache's fill per layer over the graphs, and one graph's compute-buffer occupancy.

import { getGraphList, getMemory, getOccupancy, isOffline } from "../api.js";
import { BUFFER_COLORS, heat, opColor } from "../colors.js";
import { addChildren, h, setChildren } from "../dom.js";
import { eventLog } from "../eventlog.js";
import { fmtBytes, fmtInt, fmtPct } from "../format.js";
import { state } from "../store.js";
import { hbar, setupCanvas, sizedCanvas, tooltip } from "../widgets.js";
import { diskRows, diskStrip } from "./disk.js";

export async function render(section) {
  section.classList.add("fill");
  const data = await getMemory(state.runId);
  const upper = h("div", { class: "upper" });
  const lower = h("div", { class: "lower" });
  setChildren(section, h("div", { class: "memory" }, upper, lower));
  const log = eventLog(lower, { compact: true });
  diskTrack(upper, data.disk.files, log);
  buffersTrack(upper, data.buffers);
  await occupancyTrack(upper);
}

function diskTrack(upper, files, log) {
  const colorBy = h(
    "select",
    { "data-testid": "disk-color" },
    h("option", { value: "read_ns", text: "color by read time" }),
    h("option", { value: "reads", text: "color by reads" })
  );
  const layerRows = h("button", { class: "btn", text: "one row per layer", "data-testid": "disk-rows" });
  const selection = h("span", {
    class: "muted",
    "data-testid": "disk-selection",
    text: "drag across the file to filter the events below",
  });
  addChildren(
    upper,
    h(
      "div",
      { class: "track-title" },
      h("h2", { text: "DISK · the model file by byte offset" }),
      colorBy,
      layerRows,
      selection
    )
  );
  if (!files.length) addChildren(upper, h("div", { class: "empty", text: "This run holds no model-file map." }));
  const holder = h("div");
  addChildren(upper, holder);
  // A file range selected: the event log beneath shows the nodes reading those bytes.
  const onSelect = (lo, hi) => {
    state.fileRange = [lo, hi];
    selection.textContent = `selected file bytes ${fmtInt(lo)} – ${fmtInt(hi)} (${fmtBytes(hi - lo)})`;
    log.setFilter({ file_lo: lo, file_hi: hi });
  };
  let rows = false;
  const draw = () => {
    setChildren(holder);
    for (const file of files)
      addChildren(
        holder,
        h("div", { class: "muted", text: `${file.path} · ${fmtBytes(file.size)}` }),
        rows ? diskRows(file, colorBy.value, onSelect) : diskStrip(file, colorBy.value, onSelect)
      );
  };
  colorBy.addEventListener("change", draw);
  layerRows.addEventListener("click", () => {
    rows = !rows;
    layerRows.classList.toggle("on", rows);
    draw();
  });
  draw();
}

function buffersTrack(upper, buffers) {
  addChildren(upper, h("div", { class: "track-title" }, h("h2", { text: "BUFFERS · runtime memory" })));
  const maxSize = Math.max(1, ...buffers.buffers.map((b) => b.size));
  addChildren(
    upper,
    h(
      "div",
      { class: "card", "data-testid": "buffer-list" },
      buffers.buffers.map((b) =>
        hbar(`${b.kind} · ${b.name}`, b.size / maxSize, fmtBytes(b.size), BUFFER_COLORS[b.kind] || "#79706e")
      ),
      buffers.has_output_buffer
        ? null
        : h("div", {
            class: "muted",
            text: "No separate output buffer: this backend keeps the logits outside the graph's buffers.",
          })
    )
  );
  const kv = buffers.kv_cache;
  if (!kv.layers.length) return;
  const canvas = sizedCanvas("kv-heatmap", "100%", Math.min(200, kv.layers.length * 5 + 10) + "px");
  const most = Math.max(1, ...kv.used.flat());
  addChildren(
    upper,
    h("h3", {
      text: `KV cache: cells in use per layer (rows) over the graphs (columns): up to ${most} of ${kv.capacity} (color scaled to ${most})`,
    }),
    canvas
  );
  drawKv(canvas, kv);
}

// The graphs to choose from, as indexes into the overview's graph bars: a report's own
// graph, or the run's first 2000.
async function occupancyChoices(bars) {
  if (!isOffline()) return bars.graph_id.slice(0, 2000).map((_, i) => i);
  return (await getGraphList(state.runId)).graphs.map((g) => bars.graph_id.indexOf(g.graph_id));
}

async function occupancyTrack(upper) {
  const bars = state.overview.graph_bars;
  const choices = await occupancyChoices(bars);
  const graphChoice = h(
    "select",
    { "data-testid": "occupancy-graph" },
    choices.map((i) => h("option", { value: bars.graph_id[i], text: `graph ${bars.graph_id[i]} · ${bars.phase[i]}` }))
  );
  const canvas = sizedCanvas("occupancy", "100%", "220px");
  addChildren(
    upper,
    h(
      "div",
      { class: "track-title" },
      h("h3", { text: "compute buffer: each intermediate's bytes (y: offset) while it lives (x: node index)" }),
      graphChoice
    ),
    canvas
  );
  const draw = async () => drawOccupancy(canvas, await getOccupancy(state.runId, graphChoice.value));
  graphChoice.addEventListener("change", draw);
  if (graphChoice.options.length) {
    graphChoice.selectedIndex = Math.min(1, graphChoice.options.length - 1);
    draw();
  }
}

// The KV cache's cell (graph g, layer l) under (x, y) of a width x height heatmap.
export function kvCellAt(x, y, width, height, nGraphs, nLayers) {
  return {
    g: Math.min(nGraphs - 1, Math.floor((x / width) * nGraphs)),
    l: Math.min(nLayers - 1, Math.floor((y / (height - 4)) * nLayers)),
  };
}

function drawKv(canvas, kv) {
  const { ctx, width, height } = setupCanvas(canvas);
  const nGraphs = kv.graph_id.length,
    nLayers = kv.layers.length;
  const most = Math.max(1, ...kv.used.flat());
  const cw = width / Math.max(1, nGraphs),
    rh = (height - 4) / nLayers;
  for (let g = 0; g < nGraphs; g++)
    for (let l = 0; l < nLayers; l++) {
      ctx.fillStyle = heat(0.1 + 0.9 * (kv.used[g][l] / most));
      ctx.fillRect(g * cw, l * rh, Math.ceil(cw), Math.ceil(rh));
    }
  canvas.onmousemove = (event) => {
    const rect = canvas.getBoundingClientRect();
    const { g, l } = kvCellAt(
      event.clientX - rect.left,
      event.clientY - rect.top,
      rect.width,
      rect.height,
      nGraphs,
      nLayers
    );
    if (g < 0 || l < 0) return;
    tooltip.show(event.clientX, event.clientY, `layer ${kv.layers[l]} · graph ${kv.graph_id[g]}`, [
      `${kv.used[g][l]} of ${kv.capacity} cells (${fmtPct(kv.used[g][l] / kv.capacity)})`,
    ]);
  };
  canvas.onmouseleave = () => tooltip.hide();
}

// The occupancy chart's top byte: a little above where 95 % of the intermediates end, and
// above the peak of live bytes. One far-out tensor (the logits, placed at the top of a
// buffer sized for the largest batch) would otherwise squash the rest into a line; beyond
// the top, tensors are drawn clipped at the edge.
export function occupancyTop(ends, peakBytes) {
  const sorted = [...ends].sort((a, b) => a - b);
  return Math.max(1, (sorted[Math.floor(0.95 * (sorted.length - 1))] || 1) * 1.15, peakBytes * 1.05);
}

function drawOccupancy(canvas, occ) {
  const { ctx, width, height } = setupCanvas(canvas);
  ctx.fillStyle = "#14161b";
  ctx.fillRect(0, 0, width, height);
  const t = occ.tensors,
    ops = state.overview.ops;
  const top = occupancyTop(t.end, occ.peak_bytes);
  const X = (node) => (node / Math.max(1, occ.n_nodes)) * width;
  const Y = (byte) => Math.max(18, height - (byte / top) * (height - 20));
  ctx.fillStyle = "#2a3b5588"; // bytes alive after each node, behind the tensors
  ctx.beginPath();
  ctx.moveTo(0, height);
  occ.live_bytes.forEach((bytes, node) => {
    ctx.lineTo(X(node), Y(bytes));
    ctx.lineTo(X(node + 1), Y(bytes));
  });
  ctx.lineTo(width, height);
  ctx.closePath();
  ctx.fill();
  for (let i = 0; i < t.name.length; i++) {
    ctx.fillStyle = opColor(t.op[i], ops);
    const x0 = X(t.first_node[i]),
      x1 = X(t.last_node[i] + 1);
    ctx.fillRect(x0, Y(t.end[i]), Math.max(1.5, x1 - x0), Math.max(1.5, Y(t.start[i]) - Y(t.end[i])));
  }
  ctx.fillStyle = "#9aa1b3";
  ctx.font = "11px system-ui, sans-serif";
  const highest = t.end.reduce((most, end) => Math.max(most, end), 0);
  ctx.fillText(
    `live bytes (shaded), peak ${fmtBytes(occ.peak_bytes)} · axis to ${fmtBytes(top)} · highest tensor end ${fmtBytes(highest)}`,
    6,
    14
  );
  canvas.onmousemove = (event) => {
    const rect = canvas.getBoundingClientRect();
    const x = event.clientX - rect.left,
      y = event.clientY - rect.top;
    for (let i = t.name.length - 1; i >= 0; i--) {
      if (X(t.first_node[i]) <= x && x <= X(t.last_node[i] + 1) && Y(t.end[i]) <= y && y <= Y(t.start[i])) {
        return tooltip.show(event.clientX, event.clientY, t.name[i], [
          `${t.op[i]} · ${fmtBytes(t.end[i] - t.start[i])} at ${fmtInt(t.start[i])}`,
          `lives from node ${t.first_node[i]} to ${t.last_node[i]}`,
        ]);
      }
    }
    tooltip.hide();
  };
  canvas.onmouseleave = () => tooltip.hide();
}
