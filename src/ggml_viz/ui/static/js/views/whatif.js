// What-if: the recorded placement and the fastest others found, each predicted from this run
// (`ggml-viz advise`): its flags as llama.cpp spells them, its prompt and decode rates, a bar of
// where a decode step's time goes (each device's compute, the crossings between devices, the
// host's fixed time), and each device's memory. The recorded placement's prediction is held
// against the rate its own steps ran at; what the prediction leaves out is said below.

import { getWhatif } from "../api.js";
import { HUES } from "../colors.js";
import { h, setChildren } from "../dom.js";
import { fmtBytes, fmtNs, fmtRate } from "../format.js";
import { state } from "../store.js";

const PART_COLORS = { crossings: "#e15759", fixed: "#8a8f9c" };
const partColor = (name, devices) => PART_COLORS[name] || HUES[devices.indexOf(name) % HUES.length] || HUES[0];
const partLabel = (name) =>
  name === "crossings" ? "crossings between devices" : name === "fixed" ? "host (fixed)" : `${name} compute`;

export async function render(section) {
  const data = await getWhatif(state.runId);
  if (!data.rows.length) {
    setChildren(
      section,
      h("div", { class: "empty", "data-testid": "whatif-empty", text: data.reason || "nothing to predict" })
    );
    return;
  }
  const parts = [...data.devices, ...(data.devices.length > 1 ? ["crossings"] : []), "fixed"];
  const longest = Math.max(...data.rows.map((row) => Object.values(row.decode_parts).reduce((a, b) => a + b, 0)), 1);
  const legend = h(
    "div",
    { class: "whatif-legend", "data-testid": "whatif-legend" },
    parts.map((name) => {
      const swatch = h("span", { class: "swatch" });
      swatch.style.background = partColor(name, data.devices); // (a style attribute is refused by the page's policy)
      return h("span", {}, swatch, partLabel(name));
    })
  );
  const rows = data.rows.map((row) =>
    h(
      "tr",
      { class: row.recorded ? "recorded" : "", "data-testid": "whatif-row" },
      h("td", { class: "flags", text: (row.flags || "(as recorded)") + (row.recorded ? " (recorded)" : "") }),
      h("td", { class: "num", text: fmtRate(row.prompt_tokens_per_s) }),
      h("td", { class: "num", text: fmtRate(row.decode_tokens_per_s) }),
      h("td", {}, stepBar(row.decode_parts, longest, data.devices)),
      ...data.devices.map((device) => memoryCell(row.memory[device]))
    )
  );
  const check = Object.entries(data.check).map(
    ([phase, c]) =>
      `${phase}: ${fmtRate(c.predicted_tokens_per_s)} predicted, ${fmtRate(c.measured_tokens_per_s)} measured (${((c.ratio - 1) * 100).toFixed(1)} %)`
  );
  const promptTokens = `${data.prompt_tokens} token${data.prompt_tokens === 1 ? "" : "s"}`;
  const prompt = data.prompt_tokens ? `prompt rates for a prompt of ${promptTokens}; ` : "";
  setChildren(
    section,
    h(
      "div",
      { class: "card" },
      h("h2", { text: "What other flags would do, predicted from this run" }),
      h("div", {
        class: "muted",
        "data-testid": "whatif-check",
        text: `the recorded placement against its own steps: ${check.join("; ") || "—"}`,
      }),
      legend,
      h(
        "table",
        { "data-testid": "whatif-table" },
        h(
          "thead",
          {},
          h(
            "tr",
            {},
            h("th", { text: "flags" }),
            h("th", { text: "prompt tok/s" }),
            h("th", { text: "decode tok/s" }),
            h("th", { text: "a decode step, where it goes" }),
            ...data.devices.map((device) => h("th", { text: `${device} memory` }))
          )
        ),
        h("tbody", {}, rows)
      ),
      h("div", {
        class: "muted",
        text: `${prompt}the memory at the run's context (\`ggml-viz advise RUN --ctx N\` for another)`,
      }),
      data.limit_doubts.length
        ? h("div", {
            class: "muted",
            "data-testid": "whatif-doubts",
            text: `the run's limits are slower at more threads (${data.limit_doubts.join("; ")}): other thread counts are predicted from them`,
          })
        : null,
      h("div", { class: "muted", "data-testid": "whatif-left-out", text: `left out: ${data.left_out}` })
    )
  );
}

// A decode step's parts as one bar, its length the step's against the longest shown.
function stepBar(parts, longest, devices) {
  const total = Object.values(parts).reduce((a, b) => a + b, 0);
  const bar = h("div", {
    class: "whatif-bar",
    "data-testid": "whatif-bar",
    title: Object.entries(parts)
      .map(([name, ns]) => `${partLabel(name)}: ${fmtNs(ns)}`)
      .join("\n"),
  });
  bar.style.width = `${Math.max(2, (300 * total) / longest)}px`;
  for (const [name, ns] of Object.entries(parts)) {
    if (ns <= 0) continue;
    const piece = h("div", { class: "whatif-part", "data-part": name });
    piece.style.width = `${(100 * ns) / total}%`;
    piece.style.background = partColor(name, devices);
    bar.appendChild(piece);
  }
  return h("div", { class: "whatif-step" }, bar, h("span", { class: "muted", text: fmtNs(total) }));
}

// A device's memory: its total, and under it the parts, which wrap so that a memory column a
// device keeps the table inside its card.
function memoryCell(memory) {
  if (!memory || !memory.total) return h("td", { class: "num", text: "—" });
  const parts = `weights ${fmtBytes(memory.weights)}, KV ${fmtBytes(memory.kv_cache)}, compute ${fmtBytes(memory.compute)}`;
  return h(
    "td",
    { class: "num whatif-memory", "data-testid": "whatif-memory" },
    h("div", { text: fmtBytes(memory.total) }),
    h("div", { class: "muted", text: parts })
  );
}
