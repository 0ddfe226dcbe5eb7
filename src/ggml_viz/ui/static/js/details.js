// One node's details, shared by the timeline, the graph and the event log: its op, type,
// shape, time (the host's, or the GPU's in a traced GPU graph), layer and buffer, its
// --values stats, and every source with where its bytes live; buttons to show it in the
// graph and in the timeline.

import { getEvent, getNode } from "./api.js";
import { h, setChildren } from "./dom.js";
import { fmtBytes, fmtInt, fmtNs, fmtNum } from "./format.js";
import { showInGraph, showInTimeline, state } from "./store.js";
import { kv } from "./widgets.js";

const nodes = new Map(),
  events = new Map(); // answers by run, kept: a node's details never change

export function nodeDetails(graphId, nodeIndex) {
  const key = `${state.runId}:${graphId}:${nodeIndex}`;
  if (!nodes.has(key)) nodes.set(key, getNode(state.runId, graphId, nodeIndex));
  return nodes.get(key);
}

export function eventRow(event) {
  const key = `${state.runId}:${event}`;
  if (!events.has(key)) events.set(key, getEvent(state.runId, event));
  return events.get(key);
}

// A node's GPU time (NodeGpuTime) as <dl> entries: none where it has none.
export function gpuTimeLines(node) {
  const gpu = node.gpu;
  if (!gpu) return [];
  const lines = [
    ["GPU time", `${fmtNs(gpu.gpu_ns)} busy on ${gpu.device} (${gpu.kernels} kernel${gpu.kernels === 1 ? "" : "s"})`],
    ["on the GPU", `${fmtNs(gpu.start_ns)} – ${fmtNs(gpu.end_ns)}`],
  ];
  if (gpu.group_end !== gpu.node_index)
    lines.push([
      "fused",
      `nodes ${gpu.node_index}–${gpu.group_end} ran as one group: its time is node ${gpu.node_index}'s`,
    ]);
  return lines;
}

// Where a source's bytes live: "file @ offset", or "buffer @ offset".
export function sourcePlace(src) {
  if (src.memory === "disk") return `file @ ${fmtInt(src.file_offset)}`;
  return `${src.buffer || "?"}${src.buffer_offset === null ? "" : " @ " + fmtInt(src.buffer_offset)}`;
}

// A MoE layer's routing in a node's graph: each token, its experts (best first) with their weights.
function routingTable(routing) {
  const t = routing.tokens;
  return h(
    "table",
    { "data-testid": "node-routing" },
    h(
      "tr",
      {},
      ["pos", "token", "experts (weight)"].map((c) => h("th", { text: c }))
    ),
    t.position.map((position, i) =>
      h(
        "tr",
        {},
        h("td", { text: position }),
        h("td", { text: JSON.stringify(t.text[i]) }),
        h("td", {
          text: t.experts[i]
            .map((e, k) => (t.weights[i][k] === null ? `${e}` : `${e} (${t.weights[i][k].toFixed(3)})`))
            .join(", "),
        })
      )
    )
  );
}

// Where a node shows in the timeline: its host time, else its GPU time, else [null, null].
export const timeSpan = (node) =>
  node.start_ns !== null
    ? [node.start_ns, node.end_ns]
    : node.gpu
      ? [node.gpu.start_ns, node.gpu.end_ns]
      : [null, null];

export async function showDetails(panel, graphId, nodeIndex) {
  state.selected = { graph_id: graphId, node_index: nodeIndex };
  setChildren(panel, h("div", { class: "muted", text: "loading…" }));
  let node;
  try {
    node = await nodeDetails(graphId, nodeIndex);
  } catch (error) {
    setChildren(panel, h("div", { text: error.message }));
    return;
  }
  const duration = node.start_ns === null ? null : node.end_ns - node.start_ns;
  const values = node.values;
  setChildren(
    panel,
    h("h2", { "data-testid": "details-name", text: node.name }),
    h(
      "dl",
      { class: "kv", "data-testid": "details" },
      kv("op", node.op + (node.op_base && node.op_base !== node.op ? ` (${node.op_base})` : "")),
      kv("type", node.type),
      kv("shape", node.shape),
      kv("bytes", fmtBytes(node.nbytes)),
      kv("time", duration === null ? (node.gpu ? "not timed on the host" : "not timed") : fmtNs(duration)),
      kv("starts at", node.start_ns === null ? "—" : fmtNs(node.start_ns)),
      gpuTimeLines(node).flatMap(([key, value]) => kv(key, value)),
      kv("layer", node.layer === null ? "none" : node.layer),
      kv("graph", `${node.graph_id}, node ${node.node_index}`),
      kv("tokens", JSON.stringify(node.tokens)),
      kv("buffer", node.buffer === null ? "—" : `${node.buffer} @ ${fmtInt(node.buffer_offset)}`)
    ),
    values ? h("h3", { text: "output values (--values stats)" }) : null,
    values
      ? h(
          "dl",
          { class: "kv", "data-testid": "node-values" },
          kv("min … max", `${fmtNum(values.min)} … ${fmtNum(values.max)}`),
          kv("mean ± std", `${fmtNum(values.mean)} ± ${fmtNum(values.std)}`),
          kv("mean |x|", fmtNum(values.mean_abs)),
          kv("NaN / Inf", `${fmtInt(values.nan)} / ${fmtInt(values.inf)}`)
        )
      : null,
    node.routing
      ? h("h3", { text: `experts chosen (layer ${node.routing.layer ?? "?"}, ${node.routing.n_expert} experts)` })
      : null,
    node.routing ? routingTable(node.routing) : null,
    h("h3", { text: "sources" }),
    h(
      "table",
      { "data-testid": "sources" },
      h(
        "tr",
        {},
        ["#", "name", "shape", "type", "lives in"].map((c) => h("th", { text: c }))
      ),
      node.sources.map((src) =>
        h(
          "tr",
          {},
          h("td", { text: src.slot }),
          h("td", { text: src.name }),
          h("td", { text: src.shape }),
          h("td", { text: src.type }),
          h("td", { text: sourcePlace(src) })
        )
      )
    ),
    h(
      "div",
      { class: "toolbar" },
      h("button", {
        class: "btn",
        text: "show in graph",
        onclick: () => showInGraph({ graph_id: graphId, node_index: nodeIndex, layer: node.layer }),
      }),
      h("button", { class: "btn", text: "show in timeline", onclick: () => showInTimeline(...timeSpan(node)) })
    )
  );
}
