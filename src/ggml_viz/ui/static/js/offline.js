// A self-contained report (`ggml-viz export --format html`) carries its answers in the page:
// this answers the API's requests from them, as the server would, for what a report holds
// (see export/report.py). A pure function of the embedded answers, a path and a query.

const NOT_IN_REPORT = "not in this report: open the run with `ggml-viz view` for everything";
const WHOLE_ANSWERS = [
  "overview",
  "stats",
  "graphs",
  "memory",
  "timeline",
  "attention-index",
  "experts",
  "requests",
  "whatif",
  "slots",
];

const given = (value) => value !== undefined && value !== null && value !== "";

export function offlineAnswer(answers, path, query = {}) {
  if (path === "runs") return answers.runs;
  const part = path.replace(/^runs\/[^/]+\//, "");
  const missing = () => {
    throw new Error(NOT_IN_REPORT);
  };
  if (WHOLE_ANSWERS.includes(part)) return answers[part];
  let match;
  if ((match = part.match(/^graph\/(\d+)$/))) return answers[`graph/${match[1]}/${query.layer ?? ""}`] || missing();
  if ((match = part.match(/^occupancy\/(\d+)$/))) return answers[`occupancy/${match[1]}`] || missing();
  const events = answers.events,
    n = events.graph_id.length;
  const row = eventRowMaker(events);
  if ((match = part.match(/^event\/(\d+)$/))) return Number(match[1]) < n ? row(Number(match[1])) : missing();
  if (part === "node") {
    for (let i = 0; i < n; i++)
      if (events.graph_id[i] === Number(query.graph) && events.node_index[i] === Number(query.index)) {
        const r = row(i); // a report keeps no sources: the details show what the row has
        return {
          ...r,
          end_ns: r.start_ns === null ? null : r.start_ns + r.duration_ns,
          tokens: "",
          nbytes: null,
          buffer: null,
          sources: [],
          gpu: null,
          routing: null,
        };
      }
    return missing();
  }
  if (part === "search" || part === "events") {
    const hits = matchingEvents(answers, query, part === "search");
    if (part === "search") return { hits: hits.slice(0, 200).map(row) };
    const offset = Number(query.offset || 0),
      limit = Number(query.limit || 100);
    return { total: hits.length, offset, rows: hits.slice(offset, offset + limit).map(row) };
  }
  return missing();
}

// The report's event columns (one list per field) -> a function giving row i as an EventRow.
function eventRowMaker(events) {
  const columns = Object.keys(events).filter((key) => key !== "weights"); // weights: the filter's, not a row's
  return (i) => Object.fromEntries(columns.map((key) => [key, events[key][i]]).concat([["event", i]]));
}

// The events a query selects, in order, by the server's rules (ui/views/events.py EventLog._filtered):
// op, name (a search also matches the op), layer, time window, and file region.
export function matchingEvents(answers, query, isSearch = false) {
  const events = answers.events,
    n = events.graph_id.length;
  const name = String(query.name || query.q || "").toLowerCase(),
    layer = given(query.layer) ? Number(query.layer) : null;
  const t0 = given(query.t0) ? Number(query.t0) : null,
    t1 = given(query.t1) ? Number(query.t1) : null;
  // the file-region filter: nodes reading a weight whose file bytes meet [lo, hi)
  const lo = given(query.file_lo) ? Number(query.file_lo) : null,
    hi = Number(query.file_hi);
  const ranges = answers.weight_ranges || { start: [], end: [] };
  const readsRange = (i) => (events.weights?.[i] || []).some((w) => ranges.end[w] > lo && ranges.start[w] < hi);
  const hits = [];
  for (let i = 0; i < n; i++) {
    if (query.op && events.op[i] !== query.op) continue;
    if (
      name &&
      !events.name[i].toLowerCase().includes(name) &&
      !(isSearch && events.op[i].toLowerCase().includes(name))
    )
      continue;
    if (layer !== null && events.layer[i] !== layer) continue;
    if (t0 !== null && (events.start_ns[i] === null || events.start_ns[i] + events.duration_ns[i] <= t0)) continue;
    if (t1 !== null && (events.start_ns[i] === null || events.start_ns[i] >= t1)) continue;
    if (lo !== null && !readsRange(i)) continue;
    hits.push(i);
  }
  return hits;
}
