// The memory view's DISK track: the model file by byte offset, each region a segment colored
// by how long (or how often) the run's nodes read it, at least MIN_SEGMENT_PX wide; as one
// strip, or one row per layer. Hover: a tooltip and a magnifying lens; drag: select a file
// range (onSelect(lo, hi)).

import { heat } from "../colors.js";
import { addChildren, h } from "../dom.js";
import { fmtBytes, fmtInt, fmtNs } from "../format.js";
import { lens, setupCanvas, tooltip } from "../widgets.js";

export const MIN_SEGMENT_PX = 5;

// -- pure layout ---------------------------------------------------------------------------

// Segment edges xs (n + 1 of them) for regions [starts[i], ends[i]): every region at least
// MIN_SEGMENT_PX wide, the rest of the width shared by size; the canvas grows to fit them.
export function segmentLayout(starts, ends, width) {
  const n = starts.length;
  const total = ends.reduce((sum, end, i) => sum + (end - starts[i]), 0) || 1;
  const needed = n * MIN_SEGMENT_PX;
  const canvasWidth = Math.max(width, needed + 50);
  const spare = canvasWidth - needed;
  const xs = new Float64Array(n + 1);
  for (let i = 0; i < n; i++) xs[i + 1] = xs[i] + MIN_SEGMENT_PX + (spare * (ends[i] - starts[i])) / total;
  return { xs, canvasWidth };
}

// The segment under pixel x (binary search of the edges; clamped to the first and last).
export function segmentAt(xs, x) {
  let lo = 0,
    hi = xs.length - 2;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (xs[mid] <= x) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// Region i's color: a tensor by heat of colorBy ("read_ns" or "reads") against max, never
// read dark; padding and other regions grey.
export function regionColor(r, i, colorBy, max) {
  if (r.kind[i] !== "tensor") return r.kind[i] === "padding" ? "#2a2e38" : "#3a4152";
  const value = r[colorBy][i];
  return value > 0 ? heat(0.15 + 0.85 * Math.sqrt(value / max)) : "#232733";
}

// The rows that lookups (token embeddings) read, at their exact file bytes: [x0, x1] of each
// within its table's segment, in pixels.
export function rowSpans(rows, r, xs) {
  const spans = [];
  if (!rows || !rows.start.length) return spans;
  let i = 0;
  for (let k = 0; k < rows.start.length; k++) {
    while (i < r.start.length - 1 && r.end[i] <= rows.start[k]) i++;
    const span = Math.max(1, r.end[i] - r.start[i]),
      width = xs[i + 1] - xs[i];
    spans.push([
      xs[i] + ((rows.start[k] - r.start[i]) / span) * width,
      xs[i] + ((rows.end[k] - r.start[i]) / span) * width,
    ]);
  }
  return spans;
}

// Region i's tooltip: [title, lines].
export function regionTooltip(r, i) {
  return [
    r.name[i] || r.kind[i],
    [
      `${r.kind[i]}${r.type[i] ? " · " + r.type[i] : ""} · ${fmtBytes(r.end[i] - r.start[i])}`,
      `file bytes ${fmtInt(r.start[i])} – ${fmtInt(r.end[i])}`,
      `layer ${r.layer[i] >= 0 ? r.layer[i] : "none"}${r.category[i] ? " · " + r.category[i] : ""}`,
      r.kind[i] === "tensor" ? `${fmtInt(r.reads[i])} reads · ${fmtNs(r.read_ns[i])} of reading nodes` : "",
      r.rows_read && r.rows_read[i] >= 0
        ? `looked up by row: ${fmtInt(r.rows_read[i])} rows read (${fmtBytes(r.row_bytes_read[i])}, white ticks)`
        : "",
    ],
  ];
}

// The tensors by layer, in file order: [label, region indexes] ("outside layers" for -1).
export function regionsByLayer(r) {
  const byLayer = new Map();
  for (let i = 0; i < r.start.length; i++) {
    if (r.kind[i] !== "tensor") continue;
    const key = r.layer[i] >= 0 ? `layer ${r.layer[i]}` : "outside layers";
    if (!byLayer.has(key)) byLayer.set(key, []);
    byLayer.get(key).push(i);
  }
  return [...byLayer];
}

// Regions i0..i1 (either order) as the file range [lo, hi) they cover.
export const regionRange = (r, i0, i1) => [r.start[Math.min(i0, i1)], r.end[Math.max(i0, i1)]];

// -- drawing -------------------------------------------------------------------------------

// One strip for the whole file (DiskFile), colored by colorBy.
export function diskStrip(file, colorBy, onSelect) {
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
      ctx.fillStyle = "#ffffffd0"; // rows read by lookups: white ticks in the lower half, at least a pixel wide
      for (const [x0, x1] of rowSpans(file.rows, r, xs))
        ctx.fillRect(x0, height * 0.55, Math.max(1, x1 - x0), height * 0.45);
      if (selected) {
        ctx.fillStyle = "#6cb6ff44";
        ctx.strokeStyle = "#6cb6ff";
        ctx.lineWidth = 2;
        ctx.fillRect(selected[0], 0, selected[1] - selected[0], height);
        ctx.strokeRect(selected[0], 1, selected[1] - selected[0], height - 2);
      }
    };
    paint();
    bindSegments(
      canvas,
      r,
      (x) => segmentAt(xs, x),
      (i0, i1) => {
        selected = [xs[Math.min(i0, i1)], xs[Math.max(i0, i1) + 1]];
        paint();
        onSelect(...regionRange(r, i0, i1));
      }
    );
  });
  return wrap;
}

// One row per layer (its tensors in file order), each as wide as the view.
export function diskRows(file, colorBy, onSelect) {
  const r = file.regions;
  const holder = h("div", { class: "layer-rows", "data-testid": "disk-layer-rows" });
  const max = Math.max(1, ...r[colorBy]);
  requestAnimationFrame(() => {
    for (const [label, members] of regionsByLayer(r)) {
      const canvas = h("canvas", { "data-testid": "disk-row" });
      const width = (holder.clientWidth || 1000) - 110;
      canvas.style.width = width + "px";
      canvas.style.height = "18px";
      const row = h("div", { class: "hbar" }, h("span", { class: "label", text: label }), canvas);
      row.style.gridTemplateColumns = "100px 1fr";
      addChildren(holder, row);
      const { xs } = segmentLayout(
        members.map((i) => r.start[i]),
        members.map((i) => r.end[i]),
        width
      );
      const scale = width / xs[xs.length - 1];
      const { ctx, height } = setupCanvas(canvas);
      members.forEach((i, k) => {
        ctx.fillStyle = regionColor(r, i, colorBy, max);
        ctx.fillRect(xs[k] * scale, 0, Math.max(1, (xs[k + 1] - xs[k]) * scale - 1), height);
      });
      const indexAt = (x) => {
        let k = 0;
        while (k < members.length - 1 && xs[k + 1] * scale <= x) k++;
        return members[k];
      };
      bindSegments(canvas, r, indexAt, (i0, i1) => onSelect(...regionRange(r, i0, i1)));
    }
  });
  return holder;
}

// Hover: a tooltip with an arrow pointing at the segment and a magnifying lens around the
// cursor (small tensors stay findable). Drag: select a range of regions.
function bindSegments(canvas, r, indexAt, onSelect) {
  const magnifier = lens();
  let dragFrom = null;
  canvas.addEventListener("mousemove", (event) => {
    const rect = canvas.getBoundingClientRect();
    const x = event.clientX - rect.left;
    const i = indexAt(x);
    const [title, lines] = regionTooltip(r, i);
    tooltip.show(event.clientX, rect.bottom, title, lines, true);
    // the lens: this canvas's pixels around the cursor, enlarged 4x
    const ratio = canvas.width / rect.width;
    const ctx = magnifier.getContext("2d");
    ctx.imageSmoothingEnabled = false;
    ctx.fillStyle = "#14161b";
    ctx.fillRect(0, 0, magnifier.width, magnifier.height);
    const sourceWidth = magnifier.width / 4;
    ctx.drawImage(
      canvas,
      (x - sourceWidth / 2) * ratio,
      0,
      sourceWidth * ratio,
      canvas.height,
      0,
      0,
      magnifier.width,
      magnifier.height
    );
    ctx.strokeStyle = "#fff";
    ctx.beginPath();
    ctx.moveTo(magnifier.width / 2, 0);
    ctx.lineTo(magnifier.width / 2, magnifier.height);
    ctx.stroke();
    magnifier.hidden = false;
    magnifier.style.left = Math.max(4, event.clientX - magnifier.width / 2) + "px";
    magnifier.style.top = Math.max(4, rect.top - magnifier.height - 8) + "px";
    if (dragFrom !== null && Math.abs(x - dragFrom.x) > 3) onSelect(dragFrom.i, i);
  });
  canvas.addEventListener("mouseleave", () => {
    tooltip.hide();
    magnifier.hidden = true;
  });
  canvas.addEventListener("mousedown", (event) => {
    const x = event.clientX - canvas.getBoundingClientRect().left;
    dragFrom = { x, i: indexAt(x) };
  });
  canvas.addEventListener("mouseup", (event) => {
    if (dragFrom === null) return;
    const x = event.clientX - canvas.getBoundingClientRect().left;
    onSelect(dragFrom.i, indexAt(x));
    dragFrom = null;
  });
}
