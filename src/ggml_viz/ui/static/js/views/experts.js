// Experts: a mixture of experts' routing, one row per MoE layer and one column per expert,
// colored by the tokens routed to it, the bytes of its weights read, or its estimated share of
// the layer's expert time; a server's requests each apart. A node's details show the experts
// each token chose (details.js).

import { getExperts } from "../api.js";
import { heat } from "../colors.js";
import { h, setChildren } from "../dom.js";
import { fmtBytes, fmtInt } from "../format.js";
import { state } from "../store.js";
import { setupCanvas, tooltip } from "../widgets.js";

const NONE = "No mixture-of-experts routing in this run: the model is dense, or it was recorded with --routing off.";
const METRICS = {
  tokens: { label: "tokens routed", text: (v) => `${fmtInt(v)} (token, slot) rows` },
  bytes: { label: "bytes of weights read", text: (v) => fmtBytes(v) },
  time_share: {
    label: "share of the layer's expert time (estimate)",
    text: (v) => `${(v * 100).toFixed(1)}% (estimated from the rows it computed)`,
  },
};

// A cell's width in px: about 900 px for all experts, between 4 and 28.
export const expertCell = (nExpert) => Math.max(4, Math.min(28, Math.floor(900 / Math.max(1, nExpert))));

export async function render(section) {
  const data = await getExperts(state.runId);
  if (!data.layers.length) {
    setChildren(section, h("div", { class: "empty", "data-testid": "experts-empty", text: NONE }));
    return;
  }
  const metric = h(
    "select",
    { "data-testid": "experts-metric" },
    Object.entries(METRICS).map(([key, m]) => h("option", { value: key, text: m.label }))
  );
  const scope = h(
    "select",
    { "data-testid": "experts-scope" },
    h("option", { value: "", text: "the whole run" }),
    data.requests.map((r, i) => h("option", { value: i, text: r.label }))
  );
  const holder = h("div", { "data-testid": "experts-map" });
  const draw = () => {
    const key = metric.value;
    const request = scope.value === "" ? null : data.requests[Number(scope.value)];
    if (request && key !== "tokens") metric.value = "tokens";
    drawMap(holder, data, request ? request.tokens : data[metric.value], metric.value, request);
  };
  metric.addEventListener("change", draw);
  scope.addEventListener("change", draw);
  const note = `${data.layers.length} MoE layers × ${data.n_expert} experts, ${data.experts_per_token} per token`;
  setChildren(
    section,
    h(
      "div",
      { class: "toolbar" },
      metric,
      data.requests.length ? scope : null,
      h("span", { class: "muted", text: note })
    ),
    holder
  );
  draw();
}

function drawMap(holder, data, grid, key, request) {
  const cell = expertCell(data.n_expert),
    row = 14;
  const canvas = h("canvas", { "data-testid": "experts-canvas" });
  canvas.style.width = data.n_expert * cell + "px";
  canvas.style.height = data.layers.length * row + "px";
  const labels = h(
    "div",
    { class: "experts-layers" },
    data.layers.map((layer, i) => {
      const label = h("div", { text: `layer ${layer} · ${data.devices[i]}` });
      label.style.height = row + "px";
      return label;
    })
  );
  const title = request ? `tokens routed for ${request.label}` : METRICS[key].label;
  setChildren(
    holder,
    h("div", {
      class: "muted",
      text: `${title}: rows are MoE layers (with the device holding their experts), columns experts; each row scaled to its busiest expert`,
    }),
    h("div", { class: "experts-grid" }, labels, canvas)
  );
  const { ctx } = setupCanvas(canvas);
  grid.forEach((values, i) => {
    const most = Math.max(...values, 0);
    values.forEach((value, e) => {
      ctx.fillStyle = value > 0 ? heat(0.15 + (0.85 * value) / (most || 1)) : "#15171c";
      ctx.fillRect(e * cell, i * row, cell - 1, row - 1);
    });
  });
  canvas.onmousemove = (event) => {
    const rect = canvas.getBoundingClientRect();
    const e = Math.floor((event.clientX - rect.left) / cell),
      i = Math.floor((event.clientY - rect.top) / row);
    if (i < 0 || i >= data.layers.length || e < 0 || e >= data.n_expert) return tooltip.hide();
    const lines = [
      `tokens: ${fmtInt(data.tokens[i][e])}`,
      `bytes read: ${fmtBytes(data.bytes[i][e])}`,
      `time (estimate): ${(data.time_share[i][e] * 100).toFixed(1)}% of the layer's`,
    ];
    if (request) lines.unshift(`this request: ${fmtInt(request.tokens[i][e])} tokens`);
    tooltip.show(event.clientX, event.clientY, `layer ${data.layers[i]}, expert ${e}`, lines);
  };
  canvas.onmouseleave = () => tooltip.hide();
}
