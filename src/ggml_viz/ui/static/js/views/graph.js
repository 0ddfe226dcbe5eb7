// Graph: one graph at a time, each layer collapsed into one box between the nodes outside
// layers; a click opens a layer (its nodes in rows, the leaves they read in a band on the
// left, edges labelled with shapes); color by time or by op; a node's details beside.

import { getGraph, getGraphList } from "../api.js";
import { heat, opColor } from "../colors.js";
import { showDetails } from "../details.js";
import { addChildren, h, s, setChildren } from "../dom.js";
import { fmtNs, truncate } from "../format.js";
import { state } from "../store.js";
import { legend, tooltip } from "../widgets.js";

const COL_W = 190,
  ROW_H = 62,
  BOX_W = 168,
  BOX_H = 42;
const LEAF_KINDS = ["weight", "kv", "input"];
const KIND_FILLS = { weight: "#3d4a63", kv: "#5a3f6b", input: "#2f5d5a", external: "#2a2e38" };

// -- pure geometry and text ----------------------------------------------------------------

// An item's box's top left corner: columns of COL_W (the computations after a 24 px gap
// right of the leaves' band), rows of ROW_H.
export const itemPosition = (item) => ({
  x: 20 + item.x * COL_W + (item.x >= item.band ? 24 : 0),
  y: 20 + item.y * ROW_H,
});

// The SVG path of a link between boxes at a and b: out of a leaf, from its right side to the
// reader's left side; otherwise from the bottom of one to the top of the next.
export function linkPath(a, b, fromLeaf) {
  let x1, y1, x2, y2, d;
  if (fromLeaf) {
    x1 = a.x + BOX_W;
    y1 = a.y + BOX_H / 2;
    x2 = b.x;
    y2 = b.y + BOX_H / 2;
    const bend = Math.max(30, (x2 - x1) / 2);
    d = `M${x1},${y1} C${x1 + bend},${y1} ${x2 - bend},${y2} ${x2},${y2}`;
  } else {
    x1 = a.x + BOX_W / 2;
    y1 = a.y + BOX_H;
    x2 = b.x + BOX_W / 2;
    y2 = b.y;
    const bend = Math.max(20, (y2 - y1) / 2);
    d = `M${x1},${y1} C${x1},${y1 + bend} ${x2},${y2 - bend} ${x2},${y2}`;
  }
  return { d, labelX: (x1 + x2) / 2 + 3, labelY: (y1 + y2) / 2 };
}

// A box's color: leaves by kind; computations by op, or by time (heat of the square root of
// their share of the slowest), untimed grey.
export function itemFill(item, colorBy, maxTime, ops) {
  if (KIND_FILLS[item.kind]) return KIND_FILLS[item.kind];
  if (colorBy === "op" && item.op) return opColor(item.op, ops);
  return item.duration_ns > 0 ? heat(Math.sqrt(item.duration_ns / maxTime)) : "#59607a";
}

// A box's second line: a layer's contents, or a node's op, shape and time.
export function itemCaption(item) {
  if (item.kind === "layer")
    return `${item.n_nodes} nodes · ${item.n_weights} weights${item.reads_kv ? " · KV" : ""} · ${fmtNs(item.duration_ns)}`;
  return `${item.op || item.kind} ${item.shape || ""}${item.duration_ns > 0 ? " · " + fmtNs(item.duration_ns) : ""}`;
}

export function itemTooltip(item) {
  return [
    item.name || item.kind,
    [
      item.kind === "layer"
        ? `${item.n_nodes} nodes, ${fmtNs(item.duration_ns)}`
        : `${item.op || item.kind} · ${item.type || ""} ${item.shape || ""}`,
      item.duration_ns > 0 ? fmtNs(item.duration_ns) : "",
    ],
  ];
}

// -- the view ------------------------------------------------------------------------------

export async function render(section) {
  section.classList.add("fill");
  const { graphs } = await getGraphList(state.runId);
  const focus =
    state.graphFocus ||
    (state.selected
      ? { graph_id: state.selected.graph_id, node_index: state.selected.node_index }
      : { graph_id: graphs.length ? graphs[Math.min(1, graphs.length - 1)].graph_id : 0 });
  const list = h("div", { class: "graph-list", "data-testid": "graph-list" });
  const area = h("div", { class: "graph-area", "data-testid": "graph-area" });
  const panel = h(
    "div",
    { class: "side", "data-testid": "graph-details" },
    h("div", { class: "muted", text: "Click a layer to open it, a node for its details." })
  );
  const crumbs = h("div", { class: "crumbs" });
  const colorBy = h(
    "select",
    { "data-testid": "graph-color" },
    h("option", { value: "time", text: "color by time" }),
    h("option", { value: "op", text: "color by op" })
  );
  setChildren(
    section,
    h("div", { class: "toolbar" }, crumbs, colorBy, legend(state.overview.ops)),
    h("div", { class: "split" }, list, area, panel)
  );
  for (const g of graphs.slice(0, 5000)) {
    addChildren(
      list,
      h(
        "div",
        { dataset: { graph: g.graph_id }, title: g.label, onclick: () => load(g.graph_id, null) },
        `${g.graph_id} · ${g.phase} · ${fmtNs(g.duration_ns)} · `,
        JSON.stringify(g.label.slice(0, 24))
      )
    );
  }
  let current = null;
  async function load(graphId, layer, nodeIndex) {
    current = await getGraph(state.runId, graphId, layer);
    for (const row of list.children) row.classList.toggle("active", Number(row.dataset.graph) === graphId);
    setChildren(
      crumbs,
      h("span", { text: `graph ${graphId}` }),
      h("a", { text: "all layers", "data-testid": "all-layers", onclick: () => load(graphId, null) }),
      ...(layer === null || layer === undefined ? [] : [h("span", { text: `› layer ${layer}` })])
    );
    draw(nodeIndex);
  }
  function draw(nodeIndex) {
    const svg = graphSvg(current, colorBy.value, nodeIndex, {
      openLayer: (layer) => load(current.graph_id, layer),
      openNode: (index) => {
        showDetails(panel, current.graph_id, index);
        draw(index);
      },
    });
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

// The graph as SVG: the leaves' band, the links, a box per item (nodeIndex: the selected node).
function graphSvg(data, colorBy, nodeIndex, { openLayer, openNode }) {
  const maxTime = Math.max(1, ...data.items.filter((i) => i.duration_ns > 0).map((i) => i.duration_ns));
  const width = (data.columns + 0.2) * COL_W + 40,
    height = data.rows * ROW_H + 40;
  const svg = s("svg", { width, height, "data-testid": "graph-svg" });
  const pos = {},
    byId = {};
  for (const item of data.items) {
    byId[item.id] = item;
    pos[item.id] = itemPosition(item);
  }
  if (data.items.length && data.items[0].band > 0) {
    svg.append(
      s("rect", { x: 8, y: 8, width: data.items[0].band * COL_W + 4, height: height - 16, fill: "#1c1f26", rx: 6 })
    );
    svg.append(s("text", { x: 16, y: height - 14, class: "edge-label" }, "inputs, weights, KV cache"));
  }
  for (const link of data.links) {
    const a = pos[link.from],
      b = pos[link.to];
    if (!a || !b) continue;
    const { d, labelX, labelY } = linkPath(a, b, LEAF_KINDS.includes(byId[link.from].kind));
    svg.append(s("path", { class: "edge", d }));
    if (data.layer !== null) svg.append(s("text", { class: "edge-label", x: labelX, y: labelY }, link.label));
  }
  for (const item of data.items) {
    const p = pos[item.id];
    const selected = item.kind === "node" && nodeIndex !== undefined && item.node_index === nodeIndex;
    const group = s(
      "g",
      { class: "item" + (selected ? " selected" : ""), "data-id": item.id, "data-kind": item.kind },
      s("rect", {
        x: p.x,
        y: p.y,
        width: BOX_W,
        height: BOX_H,
        rx: item.kind === "layer" ? 8 : 4,
        fill: itemFill(item, colorBy, maxTime, state.overview.ops),
      }),
      s("text", { x: p.x + 6, y: p.y + 16, class: "sub" }, truncate(item.name, 26)),
      s("text", { x: p.x + 6, y: p.y + 32, class: "sub" }, truncate(itemCaption(item), 30))
    );
    group.addEventListener("click", () => {
      tooltip.hide();
      if (item.kind === "layer") openLayer(item.layer);
      else if (item.kind === "node" || item.kind === "external") openNode(item.node_index);
    });
    group.addEventListener("mousemove", (event) => tooltip.show(event.clientX, event.clientY, ...itemTooltip(item)));
    group.addEventListener("mouseleave", () => tooltip.hide());
    svg.append(group);
  }
  return svg;
}
