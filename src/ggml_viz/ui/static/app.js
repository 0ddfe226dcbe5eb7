// ggml-viz viewer. No framework, no build step: the server does the heavy lifting (level of
// detail, filtering); the modules under js/ draw on canvases and small DOM trees, one per
// view (js/views/), over a few shared ones (api.js: the endpoints and their JSON; store.js:
// the page's state; dom, format, colors, widgets, details, eventlog). This entry module
// wires them: the access token, the tabs and navigation, opening a run.

import { api, configure, getOverview, getRuns, isOffline } from "./js/api.js";
import { h, setChildren } from "./js/dom.js";
import { OVERVIEW_VIEWS, onNavigate, state } from "./js/store.js";
import * as attention from "./js/views/attention.js";
import * as events from "./js/views/events.js";
import * as experts from "./js/views/experts.js";
import * as requests from "./js/views/requests.js";
import * as whatif from "./js/views/whatif.js";
import * as graph from "./js/views/graph.js";
import * as memory from "./js/views/memory.js";
import * as overview from "./js/views/overview.js";
import * as runs from "./js/views/runs.js";
import * as slots from "./js/views/slots.js";
import * as stats from "./js/views/stats.js";
import * as timeline from "./js/views/timeline.js";
import { lens, showMessage, tooltip } from "./js/widgets.js";

const VIEWS = { overview, timeline, graph, memory, stats, events, requests, experts, attention, whatif, slots };
const TABS = Object.keys(VIEWS);

// The token arrives in the URL once; it is kept for the tab's session and taken out of the address bar.
function readToken() {
  const params = new URLSearchParams(location.search);
  const token = params.get("token") || sessionStorage.getItem("ggml-viz-token") || "";
  if (params.get("token")) {
    sessionStorage.setItem("ggml-viz-token", token);
    history.replaceState(null, "", location.pathname + location.hash);
  }
  return token;
}

// A self-contained report (`ggml-viz export --format html`) carries its answers in the page.
function embeddedAnswers() {
  const element = document.getElementById("ggml-viz-data");
  return element ? JSON.parse(element.textContent) : null;
}

const section = (tab) => document.getElementById(`view-${tab}`);

function showTab(tab) {
  if (!TABS.includes(tab)) tab = "overview";
  tooltip.hide();
  lens().hidden = true;
  state.tab = tab;
  for (const button of document.querySelectorAll("#tabs button"))
    button.classList.toggle("active", button.dataset.tab === tab);
  for (const view of document.querySelectorAll(".view")) view.hidden = view.id !== `view-${tab}`;
  if (location.hash !== "#" + tab) history.replaceState(null, "", "#" + tab);
  if (!state.runId) return;
  if (!state.rendered[tab]) {
    state.rendered[tab] = true;
    const ready = state.overviewStale && OVERVIEW_VIEWS.includes(tab) ? freshOverview() : Promise.resolve();
    ready.then(() => VIEWS[tab].render(section(tab))).catch((error) => showMessage("could not load: " + error.message));
  } else if (VIEWS[tab].onShow) VIEWS[tab].onShow();
}

// The open live run's overview, fetched again (it grew since the last one).
async function freshOverview() {
  state.overview = await getOverview(state.runId);
  state.overviewStale = false;
}

async function openRun(runId) {
  document.getElementById("tabs").hidden = false;
  state.runId = runId;
  state.rendered = {};
  state.selected = null;
  const run = state.runs.find((r) => r.run_id === runId);
  document.getElementById("run-name").textContent = run ? run.name : runId;
  state.overview = await getOverview(runId);
  state.overviewStale = false;
  document.body.dataset.ready = "1";
  showTab((location.hash || "#overview").slice(1));
  if (!isOffline() && (state.live || state.overview.summary.status === "recording")) runs.followLive(runId);
}

async function start() {
  document.getElementById("tabs").hidden = true;
  const list = section("runs");
  let listing;
  try {
    listing = await getRuns();
  } catch (error) {
    list.hidden = false;
    setChildren(
      list,
      h("div", {
        class: "empty",
        text: "This viewer needs the URL that `ggml-viz view` printed (it carries the access token). " + error.message,
      })
    );
    return;
  }
  state.runs = listing.runs;
  state.live = listing.live;
  document.getElementById("live").hidden = !state.live;
  if (state.runs.length === 0) {
    list.hidden = false;
    setChildren(
      list,
      h("div", {
        class: "empty",
        "data-testid": "waiting",
        text: state.live ? "Waiting for the recording to start…" : "No run here.",
      })
    );
    if (state.live) setTimeout(start, 1000);
    return;
  }
  if (state.runs.length === 1) return openRun(state.runs[0].run_id);
  for (const view of document.querySelectorAll(".view")) view.hidden = view !== list;
  runs.render(list, openRun);
}

configure({ token: readToken(), embedded: embeddedAnswers() });
onNavigate(showTab);
window.ggmlViz = state; // for the tests and the curious
state.api = api; // the answers as the page gets them: the server's, or the report's own
for (const button of document.querySelectorAll("#tabs button"))
  button.addEventListener("click", () => showTab(button.dataset.tab));
addEventListener("hashchange", () => showTab(location.hash.slice(1)));
start();
