// The roofline: the run's ops against this machine's measured limits (`ggml-viz limits`), on
// log-log axes: x the work's FLOPs per byte, y the GFLOP/s achieved. The roofs, measured at
// the threads the run is judged at: the memory's read bandwidth (a slope, bandwidth ×
// FLOPs per byte) and one flat peak per matrix-product type. A point's distance under the
// roof above it is how far its op is from the limit. Ops without FLOPs (copies, gathers)
// have no place on a log axis: they are listed beside it, their GB/s against the bandwidth.
// The statistics view shows it, and so the offline report does.

import { opColor } from "../colors.js";
import { h, s } from "../dom.js";
import { fmtBytes, fmtNs, fmtPct, fmtRate } from "../format.js";
import { hbar, kv, tooltip } from "../widgets.js";

export const NO_LIMITS_COMMAND = "ggml-viz limits --for RUN";
export const CHART = { width: 720, height: 380, left: 58, right: 150, top: 14, bottom: 40 };
const ROOF_COLOR = { memory: "#6cb6ff", compute: "#f2b84b" };
const LABEL_GAP = 12; // px between the compute roofs' labels, stacked where their peaks are close

// The roofs from the limits, at the threads the run is judged at (the most where its phases
// ran on several; without judged nodes, the most measured): the CPU's read bandwidth (GB/s,
// null: not measured) and each matrix-product type's peak (GFLOP/s), highest first.
export function rooflineRoofs(limits) {
  // the device most of the run's node time was on (a GPU's roofs have no thread count)
  const device = limits.device || "CPU";
  const mine = limits.measurements.filter((m) => m.device === device);
  const measuredThreads = mine.filter((m) => m.what === "memory_read").map((m) => m.threads ?? 0);
  const threads =
    device !== "CPU" ? null : limits.judged_at.length ? Math.max(...limits.judged_at) : Math.max(0, ...measuredThreads);
  const here = mine.filter((m) => (m.threads ?? null) === threads);
  const bandwidth = Math.max(0, ...here.filter((m) => m.what === "memory_read").map((m) => m.gb_per_s ?? 0)) || null;
  const peaks = {};
  // the roofs of the types that judge the run's nodes (all measured ones where not said)
  const judges = (type) => !limits.weight_types || limits.weight_types.includes(type);
  for (const m of here)
    if (m.what === "matmul" && m.type && m.gflop_per_s > 0 && judges(m.type))
      peaks[m.type] = Math.max(peaks[m.type] ?? 0, m.gflop_per_s);
  const compute = Object.entries(peaks)
    .map(([type, gflop_per_s]) => ({ type, gflop_per_s }))
    .sort((a, b) => b.gflop_per_s - a.gflop_per_s);
  return { device, threads, bandwidth, compute };
}

// The ops a log-log chart can place (FLOPs, bytes and a rate above zero) and the ones it
// cannot: pure data movement, shown by their GB/s instead.
export function splitOps(byOp) {
  const placed = [],
    moving = [];
  for (const row of byOp) (row.flops > 0 && row.bytes > 0 && row.gflop_per_s > 0 ? placed : moving).push(row);
  return { placed, moving };
}

const decadeBelow = (v) => 10 ** Math.floor(Math.log10(v));
const decadeAbove = (v) => 10 ** Math.ceil(Math.log10(v));

// The axes' ranges, whole decades holding every point, every roof's ridge and the highest peak.
export function rooflineDomain(points, roofs) {
  const peaks = roofs.compute.map((r) => r.gflop_per_s);
  const ridges = roofs.bandwidth ? peaks.map((peak) => peak / roofs.bandwidth) : [];
  const xs = [...points.map((p) => p.flops_per_byte), ...ridges];
  const ys = [...points.map((p) => p.gflop_per_s), ...peaks];
  const x0 = decadeBelow(Math.min(...xs, 1)),
    x1 = decadeAbove(Math.max(...xs, 1) * 2);
  const y0 = decadeBelow(Math.min(...ys, 1)),
    y1 = decadeAbove(Math.max(...ys, 1) * 1.5);
  return { x: [x0, Math.max(x1, x0 * 10)], y: [y0, Math.max(y1, y0 * 10)] };
}

// A log scale from [lo, hi] onto [a, b] pixels.
export const logScale =
  ([lo, hi], a, b) =>
  (v) =>
    a + ((Math.log10(v) - Math.log10(lo)) / (Math.log10(hi) - Math.log10(lo))) * (b - a);

// The roofs as segments in data space, clipped to the domain: the memory slope up to the
// highest peak's ridge, each flat peak from its ridge on.
export function roofSegments(roofs, domain) {
  const [x0, x1] = domain.x,
    [y0] = domain.y;
  const segments = [];
  const top = roofs.compute.length ? roofs.compute[0].gflop_per_s : null;
  if (roofs.bandwidth) {
    const start = Math.max(x0, y0 / roofs.bandwidth),
      end = top ? top / roofs.bandwidth : x1;
    if (end > start)
      segments.push({
        kind: "memory",
        label: `memory ${fmtRate(roofs.bandwidth)} GB/s`,
        from: [start, roofs.bandwidth * start],
        to: [end, roofs.bandwidth * end],
      });
  }
  for (const roof of roofs.compute) {
    const ridge = roofs.bandwidth ? Math.max(x0, roof.gflop_per_s / roofs.bandwidth) : x0;
    segments.push({
      kind: "compute",
      type: roof.type,
      label: `${roof.type} ${fmtRate(roof.gflop_per_s)} GFLOP/s`,
      from: [ridge, roof.gflop_per_s],
      to: [x1, roof.gflop_per_s],
    });
  }
  return segments;
}

// Label positions (px) for values drawn at ys, each at least `gap` from the one above it.
export function spreadLabels(ys, gap = LABEL_GAP) {
  const order = ys.map((y, i) => [y, i]).sort((a, b) => a[0] - b[0]);
  const placed = new Array(ys.length);
  let last = -Infinity;
  for (const [y, i] of order) {
    last = Math.max(y, last + gap);
    placed[i] = last;
  }
  return placed;
}

// An op's point in words: its tooltip's title and lines.
export function pointText(row, totalNs) {
  const judged =
    row.of_limit === null || row.of_limit === undefined
      ? "not judged (no limit measured for its device)"
      : `${row.bound}-bound · ${fmtPct(row.of_limit)} of limit (at best ${fmtNs(row.floor_ns)})`;
  return [
    row.op,
    [
      `time ${fmtNs(row.time_ns)} (${fmtPct(totalNs ? row.time_ns / totalNs : 0)} of these ops' time)`,
      `${fmtRate(row.gflop_per_s)} GFLOP/s · ${fmtRate(row.gb_per_s)} GB/s · ${fmtRate(row.flops_per_byte)} FLOPs/byte`,
      judged,
      ...(row.upper_bound ? ["its FLOPs at most: every cell of the attention window counted"] : []),
    ],
  ];
}

// The decode step's and the prompt's floors (DecodeFloor, PromptFloor) in words.
export function floorSentences(roofline) {
  const said = [];
  const step = roofline.decode_step,
    prompt = roofline.prompt;
  const at = (threads) => (threads ? ` at ${threads} thread${threads === 1 ? "" : "s"}` : "");
  if (step) {
    const kernel = step.kernel_gb_per_s
      ? `; the ${step.weight_type} matrix-vector kernel alone reads at most ${fmtRate(step.kernel_gb_per_s)} GB/s`
      : "";
    said.push(
      `Decode step: ${fmtBytes(step.bytes)} of weights in ${fmtNs(step.median_ns)} (median), ${fmtRate(step.gb_per_s)} of ` +
        `${fmtRate(step.bandwidth_gb_per_s)} GB/s${at(step.threads)}: at best ${fmtNs(step.floor_ns)}, ${fmtPct(step.of_limit)} of the limit${kernel}.`
    );
  }
  if (prompt) {
    said.push(
      `Prompt: ${fmtRate(prompt.gflop_per_s)} of the ${prompt.peak_type} matrix product's ${fmtRate(prompt.peak_gflop_per_s)} GFLOP/s` +
        `${at(prompt.threads)}: ${fmtPct(prompt.of_limit)} of the limit.`
    );
  }
  return said;
}

// The card: the chart, the ops without FLOPs beside it, the floors in words and a table of
// the ops; without limits, how to measure them.
export function rooflineCard(roofline, ops = []) {
  const title = h("h2", { text: "Against this machine's limits (roofline)" });
  if (!roofline || !roofline.limits) {
    return h(
      "div",
      { class: "card", "data-testid": "roofline" },
      title,
      h(
        "div",
        { class: "muted", "data-testid": "roofline-none" },
        "This run holds no measured limits: run ",
        h("code", { text: NO_LIMITS_COMMAND }),
        " to measure this machine's memory bandwidth and peak FLOP/s, and see the run against them."
      )
    );
  }
  const limits = roofline.limits,
    roofs = rooflineRoofs(limits);
  const byOp = roofline.by_op || [];
  const { placed, moving } = splitOps(byOp);
  return h(
    "div",
    { class: "card", "data-testid": "roofline" },
    title,
    h("div", { class: "muted", "data-testid": "roofline-limits", text: limitsText(limits, roofs) }),
    h(
      "div",
      { class: "roofline" },
      rooflineChart(placed, roofs, ops, byOp),
      h(
        "div",
        { class: "roofline-side" },
        movingList(moving, roofs, ops),
        h(
          "ul",
          { class: "findings", "data-testid": "roofline-floors" },
          floorSentences(roofline).map((text) => h("li", { text }))
        )
      )
    ),
    opsTable(byOp)
  );
}

function limitsText(limits, roofs) {
  const host = limits.machine && limits.machine.host ? ` on ${limits.machine.host}` : "";
  const other = limits.same_machine ? "" : " (not the machine that recorded this run)";
  const at =
    roofs.threads === null
      ? `the roofs of ${limits.device}, which holds most of the node time`
      : `roofs at ${roofs.threads} thread${roofs.threads === 1 ? "" : "s"}, the threads the run is judged at`;
  return `limits measured ${limits.measured || "?"}${host}${other}; ${at}`;
}

function rooflineChart(points, roofs, ops, byOp) {
  const { width, height, left, right, top, bottom } = CHART;
  const domain = rooflineDomain(points, roofs);
  const X = logScale(domain.x, left, width - right),
    Y = logScale(domain.y, height - bottom, top);
  const svg = s("svg", {
    width,
    height,
    viewBox: `0 0 ${width} ${height}`,
    class: "roofline-chart",
    "data-testid": "roofline-chart",
  });
  svg.append(...axes(domain, X, Y));
  const segments = roofSegments(roofs, domain);
  const computeLabels = spreadLabels(segments.filter((r) => r.kind === "compute").map((r) => Y(r.to[1])));
  let nextLabel = 0;
  for (const roof of segments) {
    const [x0, y0, x1, y1] = [X(roof.from[0]), Y(roof.from[1]), X(roof.to[0]), Y(roof.to[1])];
    svg.append(
      s("line", {
        x1: x0,
        y1: y0,
        x2: x1,
        y2: y1,
        stroke: ROOF_COLOR[roof.kind],
        "stroke-width": 2,
        "data-testid": "roofline-roof",
        "data-kind": roof.kind,
        "data-type": roof.type,
      })
    );
    svg.append(
      roof.kind === "compute"
        ? s("text", { x: x1 + 4, y: computeLabels[nextLabel++] + 4, "data-testid": "roofline-roof-label" }, roof.label)
        : s(
            "text",
            {
              x: x0 + 6,
              y: y0 - 6,
              transform: `rotate(${(Math.atan2(y1 - y0, x1 - x0) * 180) / Math.PI} ${x0} ${y0})`,
              "data-testid": "roofline-roof-label",
            },
            roof.label
          )
    );
  }
  const totalNs = byOp.reduce((sum, row) => sum + row.time_ns, 0);
  for (const row of points) svg.append(point(row, X, Y, totalNs, ops));
  return svg;
}

// Gridlines and labels at each decade, and the axes' names.
function axes(domain, X, Y) {
  const { width, height, left, right, top, bottom } = CHART;
  const parts = [];
  const decades = ([lo, hi]) => {
    const out = [];
    for (let v = lo; v <= hi * 1.0001; v *= 10) out.push(v);
    return out;
  };
  const tick = (v) => (v >= 1 ? String(Math.round(v)) : String(Number(v.toPrecision(1))));
  for (const v of decades(domain.x)) {
    parts.push(s("line", { x1: X(v), y1: top, x2: X(v), y2: height - bottom, stroke: "#313646" }));
    parts.push(s("text", { x: X(v), y: height - bottom + 14, "text-anchor": "middle" }, tick(v)));
  }
  for (const v of decades(domain.y)) {
    parts.push(s("line", { x1: left, y1: Y(v), x2: width - right, y2: Y(v), stroke: "#313646" }));
    parts.push(s("text", { x: left - 6, y: Y(v) + 4, "text-anchor": "end" }, tick(v)));
  }
  parts.push(
    s(
      "text",
      { x: (left + width - right) / 2, y: height - 6, "text-anchor": "middle", class: "edge-label" },
      "FLOPs per byte (arithmetic intensity)"
    )
  );
  parts.push(
    s(
      "text",
      {
        x: 12,
        y: (top + height - bottom) / 2,
        "text-anchor": "middle",
        class: "edge-label",
        transform: `rotate(-90 12 ${(top + height - bottom) / 2})`,
      },
      "GFLOP/s achieved"
    )
  );
  return parts;
}

// One op: a circle sized by its share of the time, its name beside it, its numbers on hover.
function point(row, X, Y, totalNs, ops) {
  const share = totalNs ? row.time_ns / totalNs : 0;
  const cx = X(row.flops_per_byte),
    cy = Y(row.gflop_per_s),
    r = 4 + 14 * Math.sqrt(share);
  const [title, lines] = pointText(row, totalNs);
  const show = (event) => tooltip.show(event.clientX, event.clientY, title, lines);
  const circle = s("circle", {
    cx,
    cy,
    r,
    fill: opColor(row.op, ops),
    "fill-opacity": 0.8,
    stroke: "#0b0c10",
    "data-testid": "roofline-point",
    "data-op": row.op,
  });
  circle.addEventListener("mouseenter", show);
  circle.addEventListener("mousemove", show);
  circle.addEventListener("mouseleave", () => tooltip.hide());
  return s("g", {}, circle, s("text", { x: cx + r + 3, y: cy + 4, class: "edge-label" }, row.op));
}

// Ops without FLOPs: their GB/s, each bar's length its share of the read bandwidth.
function movingList(moving, roofs, ops) {
  if (!moving.length) return null;
  const bandwidth = roofs.bandwidth;
  return h(
    "div",
    { "data-testid": "roofline-moving" },
    h("h3", { text: "data movement (no FLOPs)" }),
    moving.map((row) =>
      h(
        "div",
        { "data-testid": "roofline-moving-op", dataset: { op: row.op } },
        hbar(
          row.op,
          bandwidth ? (row.gb_per_s ?? 0) / bandwidth : 0,
          `${fmtRate(row.gb_per_s)} GB/s`,
          opColor(row.op, ops)
        )
      )
    ),
    h("dl", { class: "kv" }, kv("read bandwidth", bandwidth ? `${fmtRate(bandwidth)} GB/s` : "not measured"))
  );
}

function opsTable(byOp) {
  const columns = [
    ["op", (r) => r.op],
    ["time", (r) => fmtNs(r.time_ns)],
    ["GFLOP/s", (r) => fmtRate(r.gflop_per_s)],
    ["GB/s", (r) => fmtRate(r.gb_per_s)],
    ["FLOPs/byte", (r) => fmtRate(r.flops_per_byte)],
    ["bound", (r) => r.bound ?? "—"],
    ["at best", (r) => fmtNs(r.floor_ns)],
    ["of limit", (r) => fmtPct(r.of_limit)],
  ];
  return h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      { "data-testid": "roofline-table" },
      h(
        "tr",
        {},
        columns.map(([label], i) => h("th", { class: i ? "num" : "", text: label }))
      ),
      byOp.map((row) =>
        h(
          "tr",
          { dataset: { op: row.op } },
          columns.map(([, value], i) => h("td", { class: i ? "num" : "", text: value(row) }))
        )
      )
    )
  );
}
