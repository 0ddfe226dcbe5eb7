// Requests: a server's requests, one row each on one time axis, its prompt (from its first decode
// call to the end of the call holding its last prompt token: its time to first token) and its
// generation (from there to its last token fed back) as bars; the figures, as llama-server's
// timings count them, in a table below. A click on a request shows its graphs in the timeline.

import { getRequests } from "../api.js";
import { PHASE_COLORS } from "../colors.js";
import { h, setChildren } from "../dom.js";
import { fmtInt, fmtNs, truncate } from "../format.js";
import { showInTimeline, state } from "../store.js";
import { setupCanvas, swatch, tooltip } from "../widgets.js";

const NONE = "No request in this run: its graphs hold no sequence's prompt or generated tokens.";
const ROW = 14; // px per request on the canvas
const SHOWN = 2000; // requests drawn and listed (the first ones; `ggml-viz query` has every one)
const ms = (value) => (value === null || value === undefined ? "—" : value.toFixed(1) + " ms");
// a time on the run's axis: a decode call can begin before the run's first graph (its origin)
const signedNs = (ns) => (ns < 0 ? "−" + fmtNs(-ns) : fmtNs(ns));

export async function render(section) {
  const data = await getRequests(state.runId);
  if (!data.requests.length) {
    setChildren(section, h("div", { class: "empty", "data-testid": "requests-empty", text: NONE }));
    return;
  }
  const shown = data.requests.slice(0, SHOWN);
  const canvas = h("canvas", { "data-testid": "requests-canvas" });
  canvas.style.width = "100%";
  canvas.style.height = shown.length * ROW + "px";
  setChildren(
    section,
    summaryCard(data.summary, data.requests.length - shown.length),
    h(
      "div",
      { class: "legend" },
      h("span", {}, swatch(PHASE_COLORS.prompt), "prompt (time to first token)"),
      h("span", {}, swatch(PHASE_COLORS.decode), "generation")
    ),
    h("div", { class: "requests-bars" }, canvas),
    h("h3", { text: "requests" }),
    requestTable(shown)
  );
  drawBars(canvas, shown);
}

// The run's requests in words: how many, their tokens, the percentiles of their times.
function summaryCard(summary, left) {
  const spread = (p) =>
    p.p50 === null ? "—" : `p50 ${ms(p.p50)} · p90 ${ms(p.p90)} · p99 ${ms(p.p99)} · max ${ms(p.max)}`;
  const lines = [
    `${fmtInt(summary.n_requests)} requests: ${fmtInt(summary.prompt_tokens)} prompt tokens computed, ` +
      `${fmtInt(summary.cached_tokens)} found cached, ${fmtInt(summary.predicted_tokens)} generated`,
    `time to first token: ${spread(summary.ttft_ms)}`,
    `time per output token: ${spread(summary.tpot_ms)}`,
    `prompt: ${spread(summary.prompt_ms)}`,
    `generation: ${spread(summary.predicted_ms)}`,
  ];
  if (summary.shared_batches !== null)
    lines.push(`${(100 * summary.shared_batches).toFixed(0)} % of their decode calls held other requests' tokens too`);
  if (left > 0) lines.push(`the first ${fmtInt(SHOWN)} are drawn below (${fmtInt(left)} more in \`ggml-viz query\`)`);
  return h(
    "div",
    { class: "card", "data-testid": "requests-summary" },
    h("h2", { text: "Requests" }),
    h(
      "ul",
      { class: "findings" },
      lines.map((text) => h("li", { text }))
    ),
    h("div", { class: "muted", text: `queue wait: ${summary.queue_wait}` })
  );
}

function drawBars(canvas, requests) {
  const t0 = Math.min(...requests.map((r) => r.start_ns)),
    t1 = Math.max(...requests.map((r) => r.end_ns));
  const draw = () => {
    const { ctx, width } = setupCanvas(canvas);
    const x = (t) => ((t - t0) / Math.max(1, t1 - t0)) * (width - 2) + 1;
    ctx.clearRect(0, 0, width, requests.length * ROW);
    requests.forEach((r, i) => {
      const y = i * ROW + 2;
      ctx.fillStyle = PHASE_COLORS.prompt;
      ctx.fillRect(x(r.start_ns), y, Math.max(1, x(r.prompt_end_ns) - x(r.start_ns)), ROW - 4);
      if (r.end_ns > r.prompt_end_ns) {
        ctx.fillStyle = PHASE_COLORS.decode;
        ctx.fillRect(x(r.prompt_end_ns), y, Math.max(1, x(r.end_ns) - x(r.prompt_end_ns)), ROW - 4);
      }
    });
    return x;
  };
  draw();
  const at = (event) => requests[Math.floor((event.clientY - canvas.getBoundingClientRect().top) / ROW)];
  canvas.onmousemove = (event) => {
    const r = at(event);
    if (!r) return tooltip.hide();
    tooltip.show(event.clientX, event.clientY, `request ${r.request} · sequence ${r.seq_id}`, [
      `prompt: ${fmtInt(r.prompt_n)} tokens (${fmtInt(r.cache_n)} cached), ${ms(r.prompt_ms)}`,
      `generation: ${fmtInt(r.predicted_n)} tokens, ${ms(r.predicted_ms)} (${ms(r.tpot_ms)} per token)`,
      `arrived at ${signedNs(r.start_ns)}; graphs ${r.first_graph_id}–${r.last_graph_id}`,
      `click: its graphs in the timeline`,
    ]);
  };
  canvas.onmouseleave = () => tooltip.hide();
  canvas.onclick = (event) => {
    const r = at(event);
    if (r) showRequest(r);
  };
  addEventListener("resize", () => {
    if (canvas.isConnected) draw();
  });
}

// The timeline, zoomed onto the request's span: from its first decode call to its last.
const showRequest = (r) => showInTimeline(r.start_ns, Math.max(r.end_ns, r.start_ns + 1));

const COLUMNS = [
  ["request", "request", fmtInt],
  ["seq_id", "sequence", fmtInt],
  ["start_ns", "arrival", signedNs],
  ["prompt_n", "prompt tokens", fmtInt],
  ["cache_n", "cached", fmtInt],
  ["predicted_n", "generated", fmtInt],
  ["ttft_ms", "time to first token", ms],
  ["predicted_ms", "generation", ms],
  ["tpot_ms", "per output token", ms],
  ["batches", "decode calls", fmtInt],
  ["shared_batches", "shared", fmtInt],
  ["share_ms", "its share of their time", ms],
];

function requestTable(requests) {
  const table = h(
    "table",
    { "data-testid": "requests-table" },
    h(
      "tr",
      {},
      COLUMNS.map(([, label]) => h("th", { class: "num", text: label })),
      h("th", { class: "num", text: "graphs" }),
      h("th", { text: "prompt" })
    ),
    requests.map((r) =>
      h(
        "tr",
        {
          class: "clickable",
          "data-testid": "requests-row",
          title: "its graphs in the timeline",
          onclick: () => showRequest(r),
        },
        COLUMNS.map(([key, , format]) => h("td", { class: "num", text: format(r[key]) })),
        h("td", { class: "num", text: `${r.first_graph_id}–${r.last_graph_id}` }),
        h("td", { text: truncate(r.prompt.replace(/\s+/g, " "), 60) })
      )
    )
  );
  return h("div", { class: "table-wrap" }, table);
}
