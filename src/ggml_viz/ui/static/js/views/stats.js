// Statistics: the top bottlenecks in words (and the summary sections plugins add), the ops
// against this machine's measured limits (the roofline), --values stats per layer, and sortable tables by
// op, layer and tensor with share of time and of bytes written. Where node times come from
// the GPU (a run with GPU times), the clocks are named, and each row says its clock.

import { getStats } from "../api.js";
import { h, setChildren } from "../dom.js";
import { fmtBytes, fmtInt, fmtNs, fmtNum, fmtPct } from "../format.js";
import { state } from "../store.js";
import { setupCanvas, sizedCanvas, tooltip } from "../widgets.js";
import { rooflineCard } from "./roofline.js";

export async function render(section) {
  const stats = await getStats(state.runId);
  const onGpu = stats.time_sources.some((source) => source.clock === "gpu"); // else as the host timed it, nothing to say
  setChildren(
    section,
    h(
      "div",
      { class: "card", "data-testid": "findings" },
      h("h2", { text: "Where the time goes" }),
      onGpu
        ? h(
            "div",
            { class: "muted", "data-testid": "time-sources" },
            stats.time_sources.map((source) => h("div", { text: timeSourceText(source) }))
          )
        : null,
      h(
        "ul",
        { class: "findings" },
        stats.findings.map((text) => h("li", { text }))
      )
    ),
    ...stats.sections.map(foundSection),
    rooflineCard(state.overview.summary.roofline, state.overview.ops),
    stats.activation_by_layer.length ? activationChart(stats.activation_by_layer) : null,
    h("h3", { text: "by op" }),
    sortableTable(stats.by_op, "op", "stats-op", onGpu),
    h("h3", { text: "by layer" }),
    sortableTable(stats.by_layer, "layer", "stats-layer", onGpu),
    h("h3", { text: "by tensor (top 500)" }),
    sortableTable(stats.by_tensor, "tensor", "stats-tensor", onGpu)
  );
}

// A plugin's summary section (FoundSection): its title, where it comes from, its sentences.
const foundSection = (section) =>
  h(
    "div",
    { class: "card", "data-testid": "found-section" },
    h("h2", { text: section.title }),
    h("div", { class: "muted", text: `from ${section.source}` }),
    h(
      "ul",
      { class: "findings" },
      section.lines.map((text) => h("li", { text }))
    )
  );

// One clock the node times come from (TimeSource), in words.
export const timeSourceText = (source) =>
  `${source.label}: ${fmtInt(source.timed)} node events timed, ${fmtNs(source.time_ns)}`;

// Rows sorted by one field: numbers by value, anything else as text with numbers in it
// compared as numbers ("layer 10" after "layer 9"). A new array; descending unless ascending.
export function sortRows(rows, key, ascending) {
  return [...rows].sort((a, b) => {
    const x = a[key],
      y = b[key];
    const order =
      typeof x === "number" && typeof y === "number"
        ? x - y
        : String(x).localeCompare(String(y), undefined, { numeric: true });
    return ascending ? order : -order;
  });
}

// The sort after clicking column `name`: the same column flips; another sorts its key
// column ascending, its numbers descending.
export const nextSort = ({ key, ascending }, name, keyColumn) =>
  key === name ? { key, ascending: !ascending } : { key: name, ascending: name === keyColumn };

function sortableTable(rows, key, testid, withClock = false) {
  // "of it, waiting": the part of the time thread 0 waited at the barrier for the other
  // threads to finish these nodes (their stragglers), included in the time.
  const columns = [
    [key, key, (v) => v],
    ["count", "events", fmtInt],
    ["time_ns", "time", fmtNs],
    ["time_share", "share of time", fmtPct],
    ["wait_ns", "of it, waiting", fmtNs],
    ["mean_ns", "mean", fmtNs],
    ["bytes", "bytes written", fmtBytes],
    ["bytes_share", "share of bytes", fmtPct],
  ];
  if (withClock) columns.splice(4, 0, ["clock", "clock", (v) => v ?? "not timed"]);
  let sort = { key: "time_ns", ascending: false };
  const table = h("table", { "data-testid": testid });
  const render = () => {
    setChildren(
      table,
      h(
        "tr",
        {},
        columns.map(([name, label]) =>
          h("th", {
            class: (name === sort.key ? "sorted" + (sort.ascending ? " asc" : "") : "") + (name === key ? "" : " num"),
            text: label,
            onclick: () => {
              sort = nextSort(sort, name, key);
              render();
            },
          })
        )
      ),
      ...sortRows(rows, sort.key, sort.ascending).map((row) =>
        h(
          "tr",
          {},
          columns.map(([name, , format]) => h("td", { class: name === key ? "" : "num", text: format(row[name]) }))
        )
      )
    );
  };
  render();
  return h("div", { class: "table-wrap" }, table);
}

// --values stats: per layer, the range of its nodes' outputs (bar) and their mean |x| (dot).
function activationChart(rows) {
  const canvas = sizedCanvas("activation-chart", "100%", "200px");
  const card = h(
    "div",
    { class: "card" },
    h("h3", { text: "activation range by layer (min … max, dot: mean |x|)" }),
    canvas
  );
  requestAnimationFrame(() => {
    const { ctx, width, height } = setupCanvas(canvas);
    const top = Math.max(1e-9, ...rows.map((r) => Math.max(Math.abs(r.min ?? 0), Math.abs(r.max ?? 0))));
    const Y = (v) => height / 2 - (v / top) * (height / 2 - 12);
    const step = width / rows.length;
    ctx.strokeStyle = "#313646";
    ctx.beginPath();
    ctx.moveTo(0, Y(0));
    ctx.lineTo(width, Y(0));
    ctx.stroke();
    rows.forEach((r, i) => {
      const x = i * step + step / 2;
      ctx.fillStyle = r.nan || r.inf ? "#ff6b6b" : "#4e79a7";
      ctx.fillRect(
        x - Math.max(2, step * 0.3),
        Y(r.max ?? 0),
        Math.max(4, step * 0.6),
        Math.max(1, Y(r.min ?? 0) - Y(r.max ?? 0))
      );
      ctx.fillStyle = "#edc948";
      ctx.beginPath();
      ctx.arc(x, Y(r.mean_abs ?? 0), 3, 0, 7);
      ctx.fill();
    });
    canvas.onmousemove = (event) => {
      const rect = canvas.getBoundingClientRect();
      const r = rows[Math.min(rows.length - 1, Math.floor(((event.clientX - rect.left) / rect.width) * rows.length))];
      tooltip.show(event.clientX, event.clientY, r.layer === "none" ? "outside layers" : `layer ${r.layer}`, [
        `${fmtNum(r.min)} … ${fmtNum(r.max)}, mean |x| ${fmtNum(r.mean_abs)}`,
        `${fmtInt(r.nan)} NaN, ${fmtInt(r.inf)} Inf in ${fmtInt(r.nodes)} node outputs`,
      ]);
    };
    canvas.onmouseleave = () => tooltip.hide();
  });
  return card;
}
