// The page's state, in one small store: the runs, the open run and its overview, the tab
// shown, and what one view hands to another (a node to show in the graph, a time span to
// show in the timeline, a file range to filter the event log by). Views read and write these
// fields and navigate through showTab and the two show-in functions; none reaches into
// another view. The entry module (app.js) provides the navigation.

export const state = {
  runs: [],
  live: false,
  runId: null,
  overview: null, // OverviewPayload of the open run
  overviewStale: false, // a live run grew since: its summary and per-graph bars are fetched when shown
  tab: "overview",
  selected: null, // {graph_id, node_index}: the node last shown in a details panel
  graphFocus: null, // {graph_id, node_index?, layer?}: where the graph view opens next
  timeFocus: null, // [t0, t1]: the span the timeline shows next
  fileRange: null, // [lo, hi) selected on the memory view's disk track
  rendered: {}, // tab -> drawn for the current overview
  liveUpdates: 0, // overviews received from a live run
  timeline: null, // the timeline view once drawn (the tests and the benchmark read it)
};

// The views that show the overview's summary or its per-graph bars (the others draw a grown
// live run from a LiveUpdate alone).
export const OVERVIEW_VIEWS = ["overview", "memory"];

let navigate = () => {};
export function onNavigate(handler) {
  navigate = handler;
}

export function showTab(tab) {
  navigate(tab);
}

// The graph view, opened at a graph (and at a node or a layer of it): focus {graph_id, node_index?, layer?}.
export function showInGraph(focus) {
  state.graphFocus = focus;
  state.rendered.graph = false;
  showTab("graph");
}

// The timeline, zoomed onto t0..t1 (t0 null: as it was).
export function showInTimeline(t0, t1) {
  if (t0 !== null && t0 !== undefined) state.timeFocus = [t0, t1];
  showTab("timeline");
}
