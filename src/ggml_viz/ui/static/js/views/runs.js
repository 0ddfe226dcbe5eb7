// The run list (a directory of runs: pick one, or tick two and compare them), and following
// a live run: each time it gains graphs, the shown tab drawn again.

import { getComparison, getOverview, liveUrl } from "../api.js";
import { h, setChildren } from "../dom.js";
import { fmtInt, fmtNs } from "../format.js";
import { OVERVIEW_VIEWS, showTab, state } from "../store.js";

// The run list in `section`; open(runId) opens one.
export function render(section, open) {
  const picked = new Set();
  const compareButton = h("button", {
    class: "btn",
    text: "compare the two ticked runs",
    disabled: true,
    "data-testid": "compare",
    onclick: () => renderComparison(section.querySelector("[data-testid=comparison]"), [...picked]),
  });
  setChildren(
    section,
    h("h2", { text: "Runs" }),
    h(
      "table",
      { class: "runs-table", "data-testid": "runs" },
      h(
        "tr",
        {},
        ["", "run", "status", "model", "graphs", "created"].map((c) => h("th", { text: c }))
      ),
      state.runs.map((run) => {
        const tick = h("input", {
          type: "checkbox",
          "data-run": run.run_id,
          onclick: (event) => event.stopPropagation(),
          onchange: () => {
            if (tick.checked) picked.add(run.run_id);
            else picked.delete(run.run_id);
            compareButton.disabled = picked.size !== 2;
          },
        });
        return h(
          "tr",
          {},
          h("td", {}, tick),
          ...[run.name, run.status || "?", run.model || "?", fmtInt(run.graphs), run.created || ""].map((text) =>
            h("td", { text, onclick: () => open(run.run_id) })
          )
        );
      })
    ),
    h("div", { class: "toolbar" }, compareButton),
    h("div", { "data-testid": "comparison" })
  );
}

// Tokens per second of two runs and B's ratio to A: [A, B, B/A] as text.
export function speedCells(v) {
  return [v.a ? v.a.toFixed(1) : "—", v.b ? v.b.toFixed(1) : "—", v.a && v.b ? (v.b / v.a).toFixed(2) : "—"];
}

// A change of time per graph, signed: "+1.0 ms", "−250 ns".
export const signedNs = (ns) => (ns < 0 ? "−" : "+") + fmtNs(Math.abs(ns));

async function renderComparison(holder, [a, b]) {
  const result = await getComparison(a, b);
  const name = (id) => (state.runs.find((r) => r.run_id === id) || {}).name || id;
  const table = (headers, rows) =>
    h(
      "div",
      { class: "table-wrap" },
      h(
        "table",
        {},
        h(
          "tr",
          {},
          headers.map((c) => h("th", { text: c }))
        ),
        ...rows.map((cells) =>
          h(
            "tr",
            {},
            cells.map((c) => h("td", { text: c }))
          )
        )
      )
    );
  setChildren(
    holder,
    h("h2", { text: `A: ${name(a)}  ·  B: ${name(b)}` }),
    h("h3", { text: "settings that differ" }),
    Object.keys(result.settings_that_differ).length
      ? table(
          ["setting", "A", "B"],
          Object.entries(result.settings_that_differ).map(([k, v]) => [k, String(v.a), String(v.b)])
        )
      : h("div", { class: "muted", text: "none" }),
    h("h3", { text: "tokens per second" }),
    table(
      ["phase", "A", "B", "B/A"],
      Object.entries(result.tokens_per_s).map(([phase, v]) => [phase, ...speedCells(v)])
    ),
    ...Object.entries(result.per_graph_time_by).flatMap(([key, rows]) => [
      h("h3", { text: `time per graph by ${key}: largest changes` }),
      table(
        ["phase", key, "A", "B", "B − A", "B/A"],
        rows.map((r) => [
          r.phase,
          String(r[key]),
          fmtNs(r.a_ns),
          fmtNs(r.b_ns),
          signedNs(r.delta_ns),
          r.ratio ? r.ratio.toFixed(2) : "—",
        ])
      ),
    ])
  );
}

let source = null;

// Follow the open run while it records: for each LiveUpdate that changes the graph count or
// the status, the shown tab drawn again. A view of the overview's summary or per-graph bars
// gets a new overview first; the others draw from the update (the run's span and ops), and
// the overview waits until one of those views is shown (its summary costs the server most).
export function followLive(runId) {
  if (source) source.close();
  source = new EventSource(liveUrl(runId));
  document.getElementById("live").hidden = false;
  let known = `${state.overview.summary.graphs}/${state.overview.summary.status}`;
  source.onmessage = async (message) => {
    const update = JSON.parse(message.data);
    if (`${update.graphs}/${update.status}` === known) return;
    known = `${update.graphs}/${update.status}`;
    const before = state.overview.duration_ns;
    if (OVERVIEW_VIEWS.includes(state.tab)) {
      state.overview = await getOverview(runId);
      state.overviewStale = false;
    } else {
      const summary = { ...state.overview.summary, graphs: update.graphs, status: update.status };
      state.overview = { ...state.overview, duration_ns: update.duration_ns, ops: update.ops, summary };
      state.overviewStale = true;
    }
    state.liveUpdates += 1;
    state.rendered = {}; // every view draws the grown run when next shown; the timeline keeps its zoom
    if (state.tab === "timeline" && state.timeline) {
      state.rendered.timeline = true;
      state.timeline.grew(before);
    } else showTab(state.tab);
    if (update.status !== "recording") document.getElementById("live").textContent = "● " + update.status;
  };
}
