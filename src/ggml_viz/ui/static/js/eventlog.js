// The event log: every node event in a virtualized table (only the rows in sight exist,
// fetched a page at a time), filtered by op, name, layer, time range and file region. Used
// by the Events tab and, compact, beneath the memory view's disk track.

import { getEvents } from "./api.js";
import { showDetails } from "./details.js";
import { addChildren, h } from "./dom.js";
import { fmtInt, fmtNs } from "./format.js";
import { state } from "./store.js";

const ROW_HEIGHT = 22,
  HEAD_HEIGHT = 28,
  PAGE = 200;
const orDash = (v) => (v === null ? "—" : v);
// [field, heading, grid column width, format, numeric]
export const EVENT_COLUMNS = [
  ["graph_id", "graph", "70px", fmtInt, true],
  ["node_index", "node", "60px", fmtInt, true],
  ["start_ns", "start", "100px", fmtNs, true],
  ["duration_ns", "time", "90px", fmtNs, true],
  ["wait_ns", "waiting", "80px", (v) => (v === null ? "—" : fmtNs(v)), true],
  ["op", "op", "110px", (v) => v],
  ["name", "name", "minmax(200px, 2fr)", (v) => v],
  ["layer", "layer", "60px", orDash, true],
  ["type", "type", "60px", (v) => v],
  ["shape", "shape", "minmax(120px, 1fr)", (v) => v],
];

// The rows first..last-1 in sight when the table is scrolled to scrollTop, and the pages holding them.
export function visibleRows(scrollTop, clientHeight, total) {
  const top = Math.max(0, scrollTop - 30);
  const first = Math.floor(top / ROW_HEIGHT),
    last = Math.min(total, first + Math.ceil(clientHeight / ROW_HEIGHT) + 2);
  const pages = new Set();
  for (let i = first; i < last; i++) pages.add(Math.floor(i / PAGE));
  return { first, last, pages: [...pages] };
}

// The filter inputs' values as the events endpoint's query (times typed in ms, sent in ns).
export function filterQuery(extra, { op, name, layer, from, to }) {
  return {
    ...extra,
    op,
    name,
    layer,
    t0: from === "" ? "" : Math.round(Number(from) * 1e6),
    t1: to === "" ? "" : Math.round(Number(to) * 1e6),
  };
}

// An event log in `container`; returns {setFilter(extra)} to add filters (file_lo, file_hi).
export function eventLog(container, { compact = false } = {}) {
  let filter = {};
  const opSelect = h(
    "select",
    { "data-testid": "filter-op" },
    h("option", { value: "", text: "any op" }),
    state.overview.ops.map((op) => h("option", { value: op, text: op }))
  );
  const nameInput = h("input", { type: "search", placeholder: "name contains…", "data-testid": "filter-name" });
  const layerInput = h("input", { type: "number", placeholder: "layer", min: 0, "data-testid": "filter-layer" });
  layerInput.style.width = "80px";
  const fromInput = h("input", { type: "number", placeholder: "from ms", step: "any", "data-testid": "filter-from" });
  const toInput = h("input", { type: "number", placeholder: "to ms", step: "any", "data-testid": "filter-to" });
  fromInput.style.width = toInput.style.width = "90px";
  const count = h("span", { class: "muted", "data-testid": "event-count" });
  const clear = h("button", {
    class: "btn",
    text: "clear",
    onclick: () => {
      filter = {};
      opSelect.value = nameInput.value = layerInput.value = fromInput.value = toInput.value = "";
      reload();
    },
  });
  const grid = EVENT_COLUMNS.map((c) => c[2]).join(" ");
  const head = h(
    "div",
    { class: "vhead" },
    EVENT_COLUMNS.map(([, label, , , numeric]) => h("div", { class: "cell" + (numeric ? " num" : ""), text: label }))
  );
  head.style.gridTemplateColumns = grid;
  const spacer = h("div");
  const body = h("div", { class: "vtable", "data-testid": "event-table" }, head, spacer);
  const detailPanel = h(
    "div",
    { class: "side", "data-testid": "event-details" },
    h("div", { class: "muted", text: "Click an event for its details." })
  );
  addChildren(
    container,
    h(
      "div",
      { class: "toolbar" },
      compact ? h("strong", { text: "events" }) : null,
      opSelect,
      nameInput,
      layerInput,
      fromInput,
      toInput,
      clear,
      count
    ),
    h("div", { class: "split" }, body, compact ? null : detailPanel)
  );
  let total = 0,
    pages = new Map(),
    generation = 0,
    selectedEvent = null;
  const query = () =>
    filterQuery(filter, {
      op: opSelect.value,
      name: nameInput.value,
      layer: layerInput.value,
      from: fromInput.value,
      to: toInput.value,
    });
  async function fetchPage(index, gen) {
    if (pages.has(index)) return pages.get(index);
    const promise = getEvents(state.runId, { ...query(), offset: index * PAGE, limit: PAGE });
    pages.set(index, promise);
    const result = await promise;
    if (gen !== generation) return null;
    total = result.total;
    return result;
  }
  const rowsShown = new Map();
  function rowElement(row, i) {
    const el = h(
      "div",
      {
        class: "vrow" + (row.event === selectedEvent ? " selected" : ""),
        "data-event": row.event,
        onclick: () => {
          selectedEvent = row.event;
          for (const other of body.querySelectorAll(".vrow.selected")) other.classList.remove("selected");
          el.classList.add("selected");
          if (!compact) showDetails(detailPanel, row.graph_id, row.node_index);
        },
      },
      EVENT_COLUMNS.map(([name, , , format, numeric]) =>
        h("div", { class: "cell" + (numeric ? " num" : ""), text: format(row[name]) })
      )
    );
    el.style.gridTemplateColumns = grid;
    el.style.top = HEAD_HEIGHT + i * ROW_HEIGHT + "px";
    return el;
  }
  async function paint() {
    const gen = generation;
    const { first, last, pages: needed } = visibleRows(body.scrollTop, body.clientHeight, total);
    for (const [i, el] of rowsShown)
      if (i < first || i >= last) {
        el.remove();
        rowsShown.delete(i);
      }
    for (const pageIndex of needed) {
      const page = await fetchPage(pageIndex, gen);
      if (!page || gen !== generation) return;
      page.rows.forEach((row, k) => {
        const i = pageIndex * PAGE + k;
        if (i < first || i >= last || rowsShown.has(i)) return;
        const el = rowElement(row, i);
        addChildren(body, el);
        rowsShown.set(i, el);
      });
    }
  }
  async function reload() {
    generation++;
    pages = new Map();
    for (const el of rowsShown.values()) el.remove();
    rowsShown.clear();
    body.scrollTop = 0;
    const first = await fetchPage(0, generation);
    if (!first) return;
    spacer.style.height = HEAD_HEIGHT + total * ROW_HEIGHT + "px";
    count.textContent = `${fmtInt(total)} events`;
    paint();
  }
  let scrollFrame = false;
  body.addEventListener("scroll", () => {
    if (!scrollFrame) {
      scrollFrame = true;
      requestAnimationFrame(() => {
        scrollFrame = false;
        paint();
      });
    }
  });
  let typing;
  for (const input of [opSelect, nameInput, layerInput, fromInput, toInput])
    input.addEventListener("input", () => {
      clearTimeout(typing);
      typing = setTimeout(reload, 250);
    });
  reload();
  return {
    setFilter(extra) {
      filter = { ...filter, ...extra };
      reload();
    },
  };
}
