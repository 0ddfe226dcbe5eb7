// Attention: one captured softmax (kq_soft_max-L) at a time, by graph, layer and head: the
// graph's tokens (queries) by the KV cells (keys), labelled with their tokens.

import { getAttention, getAttentionIndex } from "../api.js";
import { heat } from "../colors.js";
import { h, setChildren } from "../dom.js";
import { state } from "../store.js";
import { setupCanvas, tooltip } from "../widgets.js";

const NONE_CAPTURED =
  "No attention captured. Record with --capture 'kq_soft_max-*' (and --capture-bytes if needed) to see each layer's and head's attention here.";
const FLASH =
  "This run used flash attention: no softmax node exists to capture. Record with flash attention off (Llama(..., flash_attn=False)) and --capture 'kq_soft_max-*' to see attention.";

// A cell's size in px: about 900 px for all keys, between 6 and 28.
export const cellSize = (nKeys) => Math.max(6, Math.min(28, Math.floor(900 / Math.max(1, nKeys))));
// A token as a label: its JSON escapes (newlines, quotes) without the quotes.
export const tokenLabel = (text) => JSON.stringify(text).slice(1, -1);

export async function render(section) {
  const index = await getAttentionIndex(state.runId);
  const graphs = Object.keys(index.graphs);
  if (!graphs.length) {
    setChildren(
      section,
      h("div", {
        class: "empty",
        "data-testid": "attention-empty",
        text: index.flash_attention ? FLASH : NONE_CAPTURED,
      })
    );
    return;
  }
  const graphSelect = h(
    "select",
    { "data-testid": "attention-graph" },
    graphs.map((g) => h("option", { value: g, text: `graph ${g}` }))
  );
  const layerSelect = h("select", { "data-testid": "attention-layer" });
  const headSelect = h(
    "select",
    { "data-testid": "attention-head" },
    Array.from({ length: index.heads }, (_, i) => h("option", { value: i, text: `head ${i}` }))
  );
  const holder = h("div", { "data-testid": "attention-map" });
  const fillLayers = () =>
    setChildren(
      layerSelect,
      ...index.graphs[graphSelect.value].map((l) => h("option", { value: l, text: `layer ${l}` }))
    );
  const draw = async () =>
    drawMap(holder, await getAttention(state.runId, graphSelect.value, layerSelect.value, headSelect.value));
  graphSelect.addEventListener("change", () => {
    fillLayers();
    draw();
  });
  for (const select of [layerSelect, headSelect]) select.addEventListener("change", draw);
  setChildren(section, h("div", { class: "toolbar" }, graphSelect, layerSelect, headSelect), holder);
  fillLayers();
  await draw();
}

function drawMap(holder, data) {
  const cell = cellSize(data.key_labels.length);
  const canvas = h("canvas", { "data-testid": "attention-canvas" });
  const nQ = data.query_labels.length,
    nK = data.key_labels.length;
  canvas.style.width = nK * cell + "px";
  canvas.style.height = nQ * cell + "px";
  const keyLabels = h(
    "div",
    { class: "attention-keys", "data-testid": "attention-keys" },
    data.key_labels.map((t) => {
      const label = h("span", { text: tokenLabel(t) });
      label.style.width = cell + "px";
      return label;
    })
  );
  const queryLabels = h(
    "div",
    { class: "attention-queries", "data-testid": "attention-queries" },
    data.query_labels.map((t) => {
      const label = h("div", { text: tokenLabel(t) });
      label.style.height = cell + "px";
      return label;
    })
  );
  setChildren(
    holder,
    h("div", {
      class: "muted",
      text: `graph ${data.graph_id}, layer ${data.layer}, head ${data.head}: rows are the graph's tokens (queries), columns the KV cells (keys) by position`,
    }),
    h("div", { class: "attention-grid" }, h("div"), keyLabels, queryLabels, canvas)
  );
  const { ctx } = setupCanvas(canvas);
  for (let q = 0; q < nQ; q++)
    for (let k = 0; k < nK; k++) {
      ctx.fillStyle = heat(Math.sqrt(data.weights[q][k]));
      ctx.fillRect(k * cell, q * cell, cell - 1, cell - 1);
    }
  canvas.onmousemove = (event) => {
    const rect = canvas.getBoundingClientRect();
    const k = Math.floor((event.clientX - rect.left) / cell),
      q = Math.floor((event.clientY - rect.top) / cell);
    if (q < 0 || q >= nQ || k < 0 || k >= nK) return tooltip.hide();
    tooltip.show(
      event.clientX,
      event.clientY,
      `${JSON.stringify(data.query_labels[q])} → ${JSON.stringify(data.key_labels[k])}`,
      [`weight ${data.weights[q][k].toFixed(4)}`]
    );
  };
  canvas.onmouseleave = () => tooltip.hide();
}
