"""The whole page in Chromium on a synthetic run (no model): every view draws without an
error, views hand a node to each other, and the offline report works from a file; a
synthetic run on a GPU draws its kernels in a GPU lane, where a click selects a kernel's
node. The model's own run is in test_viewer_browser.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import ggml_viz
from ggml_viz.analysis.findings import BUILTIN_FINDINGS, Finding
from ggml_viz.runformat.synthetic import write_synthetic_run
from ggml_viz.ui.server import make_viewer

from ..browser import checked_page, chromium, collect_errors, serving
from ..gpu_runs import write_gpu_run

pytestmark = pytest.mark.browser

TABS = ["overview", "timeline", "graph", "memory", "stats", "events", "requests", "attention"]


@pytest.fixture(scope="module")
def browser():
    with chromium() as browser:
        yield browser


@pytest.fixture(scope="module")
def run_path(tmp_path_factory):
    return write_synthetic_run(tmp_path_factory.mktemp("synthetic") / "synthetic.ggmlviz", graphs=12, layers=3, seed=3)


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory) -> Path:
    folder = Path(os.environ.get("GGML_VIZ_SCREENSHOTS") or tmp_path_factory.mktemp("screenshots"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def colored_pixels(page, selector: str) -> int:
    """Pixels of a canvas that are not the background: proof that something was drawn."""
    return page.eval_on_selector(
        selector,
        """canvas => { const d = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
           let n = 0;
           for (let i = 0; i < d.length; i += 4) if (d[i + 3] > 0) n++;
           return n; }""",
    )


@pytest.fixture
def page(browser):
    with checked_page(browser) as page:
        yield page


@pytest.fixture(scope="module")
def viewer(run_path):
    viewer = make_viewer(run_path, port=0)
    viewer.serve_in_background()
    yield viewer
    viewer.stop()


def test_every_view_draws_from_its_modules(page, viewer):
    # GIVEN the page of a synthetic run
    page.goto(viewer.url + "#overview")
    page.wait_for_selector("body[data-ready='1']")
    # WHEN each tab is opened, THEN it shows its content
    expected = {
        "overview": "[data-testid=time-by-op] .hbar",
        "timeline": "[data-testid=timeline-canvas][data-drawn]",
        "graph": "[data-testid=graph-svg] g[data-kind=layer]",
        "memory": "#view-memory [data-testid=event-table] .vrow",
        "stats": "[data-testid=stats-op] td",
        "events": "#view-events [data-testid=event-table] .vrow",
        "requests": "[data-testid=requests-table] [data-testid=requests-row]",
        "attention": "[data-testid=attention-empty]",
    }
    for tab in TABS:
        page.click(f"#tabs button[data-tab={tab}]")
        page.wait_for_selector(expected[tab])
        assert page.evaluate("() => window.ggmlViz.tab") == tab
    assert page.locator("[data-testid=graph-svg] g[data-kind=layer]").count() == 3
    assert page.locator("[data-testid=stats-layer] tr").count() == 5  # header, 3 layers, nodes outside
    assert page.evaluate("() => window.ggmlViz.timeline.data.lanes.length") == 1


def test_a_node_from_the_event_log_shows_in_the_timeline_and_in_the_graph(page, viewer):
    # GIVEN an event's details, opened from the event log
    page.goto(viewer.url + "#events")
    page.wait_for_selector("#view-events [data-testid=event-table] .vrow")
    page.fill("#view-events [data-testid=filter-name]", "attn_out-1")
    page.wait_for_function(
        "() => document.querySelector('#view-events [data-testid=event-count]').textContent === '12 events'"
    )
    page.click("#view-events .vrow >> nth=1")
    page.wait_for_selector("#view-events [data-testid=details-name]")
    assert page.inner_text("#view-events [data-testid=details-name]") == "attn_out-1"
    # WHEN it is shown in the timeline, THEN the timeline zooms onto it (its own 40 µs, not the whole run)
    page.click("#view-events >> text=show in timeline")
    page.wait_for_function("() => window.ggmlViz.tab === 'timeline' && window.ggmlViz.timeline.view")
    span = page.evaluate("() => window.ggmlViz.timeline.view.t1 - window.ggmlViz.timeline.view.t0")
    assert span < page.evaluate("() => window.ggmlViz.overview.duration_ns") / 10
    # WHEN it is shown in the graph, THEN its layer opens with it selected
    page.click("#tabs button[data-tab=events]")
    page.click("#view-events >> text=show in graph")
    page.wait_for_selector("[data-testid=graph-svg] g.item.selected")
    assert "attn_out-1" in page.inner_text("[data-testid=graph-details] [data-testid=details-name]")


def open_report(browser, run_path, report):
    """Export `run_path`'s report to `report` and open it from the file: the page, the errors
    it logs and every URL it requests."""
    from ggml_viz.commands import main

    assert main(["export", str(run_path), "-o", str(report)]) == 0
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    errors = collect_errors(page)
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    page.goto(report.as_uri())
    return page, errors, requests


def test_the_report_inlines_the_modules_and_works_offline(browser, run_path, tmp_path):
    # GIVEN a synthetic run's report, opened from a file
    report = tmp_path / "report.html"
    page, errors, requests = open_report(browser, run_path, report)
    assert "import " not in report.read_text().split('<script type="module">')[1]
    page.wait_for_selector("body[data-ready='1']")
    # WHEN every tab is opened, THEN each draws from the report's own answers
    for tab in TABS:
        page.click(f"#tabs button[data-tab={tab}]")
        page.wait_for_timeout(200)
    page.click("#tabs button[data-tab=events]")
    page.wait_for_selector("#view-events [data-testid=event-table] .vrow")
    page.click("#tabs button[data-tab=requests]")
    page.wait_for_selector("[data-testid=requests-row]")
    page.click("#tabs button[data-tab=memory]")
    page.wait_for_selector("[data-testid=occupancy-graph] option", state="attached")
    assert page.evaluate("() => window.ggmlViz.timeline.data.lanes[0].nodes.start.length") > 0
    page.close()
    assert requests == [report.as_uri()], requests  # the file itself, and nothing else
    assert not errors, errors


@pytest.fixture(scope="module")
def gpu_run_path(tmp_path_factory):
    """A run on a GPU: every 8th graph traced, its kernels, a copy, a memset and a kernel no node claims."""
    return write_gpu_run(tmp_path_factory.mktemp("gpu") / "gpu.ggmlviz", graphs=24, layers=3, gpu_every=8, seed=6)


def gpu_lane_pixels(page) -> int:
    """Pixels drawn in the first GPU lane's bar row that are neither background nor a traced span."""
    return page.evaluate(
        """() => { const t = window.ggmlViz.timeline, row = t.layout()[0].gpu[0], ratio = devicePixelRatio || 1;
           const d = t.canvas.getContext('2d').getImageData(0, row.y * ratio, t.canvas.width, 24 * ratio).data;
           let n = 0;
           for (let i = 0; i < d.length; i += 4) if (d[i] > 60 || d[i + 1] > 60 || d[i + 2] > 90) n++;
           return n; }"""
    )


# Where the widest MUL_MAT kernel of the timeline's first GPU lane is on the page: [x, y, its node's event].
WIDEST_MUL_MAT_KERNEL = """() => {
  const t = window.ggmlViz.timeline, row = t.layout()[0].gpu[0], k = row.gpuLane.bars, ops = t.data.ops;
  const width = (i) => k.end[i] - k.start[i];
  let best = -1;
  for (let i = 0; i < k.start.length; i++)
    if (k.op[i] >= 0 && ops[k.op[i]] === 'MUL_MAT' && (best < 0 || width(i) > width(best))) best = i;
  const r = t.canvas.getBoundingClientRect(), scale = r.width / (t.view.t1 - t.view.t0);
  return [r.left + ((k.start[best] + k.end[best]) / 2 - t.view.t0) * scale, r.top + row.y + 12, k.event[best]]; }"""


def test_a_gpu_run_draws_its_kernels_and_a_click_on_one_selects_its_node(page, gpu_run_path):
    from ggml_viz.ui.run_view import RunView

    viewer = make_viewer(gpu_run_path, port=0)
    viewer.serve_in_background()
    try:
        # GIVEN a run recorded on a GPU: its overview sets a step's GPU busy time against the host's
        page.goto(viewer.url + "#overview")
        page.wait_for_selector("[data-testid=gpu-steps] [data-testid=gpu-step]")
        assert "decode step on CUDA0" in page.inner_text("[data-testid=gpu-steps]")
        assert "mul_mat_vec_q" in page.inner_text("[data-testid=top-kernels]")
        # WHEN its timeline opens, THEN a GPU lane lies under the context's lane, with its kernels drawn
        page.click("#tabs button[data-tab=timeline]")
        page.wait_for_function("() => window.ggmlViz.timeline && window.ggmlViz.timeline.data")
        assert page.evaluate("() => window.ggmlViz.timeline.data.lanes[0].gpu.map((g) => g.device_name)") == ["CUDA0"]
        assert page.locator("[data-testid=gpu-legend]").is_visible()
        # WHEN zoomed onto traced graph 8's kernels
        page.evaluate(
            """() => { const t = window.ggmlViz.timeline, traced = t.data.lanes[0].gpu[0].traced;
               const i = traced.graph_id.indexOf(8); t.focus(traced.start[i], traced.end[i]); }"""
        )
        page.wait_for_function(
            "() => { const g = window.ggmlViz.timeline.data.lanes[0].gpu[0];"
            " return g.traced.graph_id.length === 1 && g.bars.start.length > 50; }"
        )
        page.wait_for_timeout(200)
        assert gpu_lane_pixels(page) > 2000
        # AND the widest MUL_MAT kernel is hovered, then clicked
        x, y, event = page.evaluate(WIDEST_MUL_MAT_KERNEL)
        page.mouse.move(x, y)
        tooltip = page.locator("[data-testid=tooltip]")
        tooltip.wait_for(state="visible")
        page.wait_for_function("() => document.querySelector('[data-testid=tooltip]').textContent.includes('layer')")
        assert "mul_mat_vec_q" in tooltip.inner_text() and "busy" in tooltip.inner_text()
        page.mouse.click(x, y)
        # THEN its node is selected as a click on a node selects it: its details, and its kernels outlined
        page.wait_for_selector("[data-testid=details-name]")
        node = RunView("r0", gpu_run_path).event_row(event)
        assert page.inner_text("[data-testid=details-name]") == node["name"]
        assert page.evaluate("() => window.ggmlViz.selected") == {"graph_id": 8, "node_index": node["node_index"]}
        assert page.evaluate("() => window.ggmlViz.timeline.selectedEvent") == event
        details = page.inner_text("[data-testid=details]")
        assert "MUL_MAT" in details and "GPU time" in details and "CUDA0" in details
        page.click("#view-timeline >> text=show in graph")
        page.wait_for_selector("[data-testid=graph-svg] g.item.selected")
        # AND the statistics say their node times are the GPU's
        page.click("#tabs button[data-tab=stats]")
        page.wait_for_selector("[data-testid=time-sources]")
        sources = page.inner_text("[data-testid=time-sources]")
        assert "GPU time (CUDA0, CUPTI kernel records, 3 of 24 graphs traced)" in sources
    finally:
        page.goto("about:blank")
        viewer.stop()


def test_a_gpu_run_s_report_draws_its_gpu_lane_offline(browser, gpu_run_path, tmp_path):
    report = tmp_path / "gpu-report.html"
    page, errors, requests = open_report(browser, gpu_run_path, report)
    page.wait_for_selector("[data-testid=gpu-steps] [data-testid=gpu-step]")
    for tab in TABS:
        page.click(f"#tabs button[data-tab={tab}]")
        page.wait_for_timeout(200)
    page.click("#tabs button[data-tab=timeline]")
    page.wait_for_function("() => window.ggmlViz.timeline && window.ggmlViz.timeline.data")
    n_kernels = page.evaluate("() => window.ggmlViz.timeline.data.lanes[0].gpu[0].bars.start.length")
    assert n_kernels == len(ggml_viz.open(gpu_run_path).gpu_kernels)  # the whole run, each kernel its own bar
    page.wait_for_timeout(200)
    assert gpu_lane_pixels(page) > 100
    page.close()
    assert requests == [report.as_uri()], requests
    assert not errors, errors


def test_a_server_s_run_shows_each_request_apart(page, tmp_path):
    # GIVEN a run whose graphs take turns among three sequences, as a server's slots do
    path = write_synthetic_run(tmp_path / "server.ggmlviz", graphs=12, layers=1, sequences=3)
    with serving(page, path) as viewer:
        # WHEN its overview opens
        page.goto(viewer.url + "#overview")
        page.wait_for_selector("[data-testid=requests] [data-testid=request]")
        # THEN each request has its own prompt and generated text, not one run-wide box
        requests = page.locator("[data-testid=request]")
        assert requests.count() == 3
        assert "sequence 1" in requests.nth(1).inner_text() and "t4 t7 t10" in requests.nth(1).inner_text()
        assert page.locator("[data-testid=generated]").count() == 0
        assert page.inner_text("[data-testid=phase-legend]").split() == ["prompt", "decode"]


def test_a_server_s_requests_show_as_phases_on_one_axis_and_open_their_graphs(page, tmp_path, screenshots):
    # GIVEN a run whose graphs take turns among three sequences, as a server's slots do
    path = write_synthetic_run(tmp_path / "server.ggmlviz", graphs=12, layers=1, sequences=3)
    with serving(page, path) as viewer:
        # WHEN the Requests tab opens
        page.goto(viewer.url + "#requests")
        page.wait_for_selector("[data-testid=requests-row]")
        # THEN the summary in words, a bar per request's phases, and a row per request with its figures
        summary = page.inner_text("[data-testid=requests-summary]")
        assert "3 requests: 3 prompt tokens computed, 0 found cached, 12 generated" in summary
        assert "time to first token: p50" in summary and "queue wait: not seen" in summary
        assert page.locator("[data-testid=requests-row]").count() == 3
        assert colored_pixels(page, "[data-testid=requests-canvas]") > 300
        first = page.inner_text("[data-testid=requests-row] >> nth=1").split("\t")
        assert first[:6] == ["1", "1", "580.5 µs", "1", "0", "4"]  # request, sequence, arrival, tokens
        page.screenshot(path=str(screenshots / "requests.png"))
        # AND hovering a bar names its request
        box = page.locator("[data-testid=requests-canvas]").bounding_box()
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + 14 + 7)
        assert "request 1 · sequence 1" in page.inner_text("[data-testid=tooltip]")
        # WHEN a request is clicked, THEN the timeline opens on its span: its first call to its last
        page.click("[data-testid=requests-row] >> nth=1")
        page.wait_for_function("() => window.ggmlViz.tab === 'timeline' && window.ggmlViz.timeline.view")
        view = page.evaluate("() => [window.ggmlViz.timeline.view.t0, window.ggmlViz.timeline.view.t1]")
        request = page.evaluate("() => window.ggmlViz.api('runs/r0/requests')")
        assert request["requests"][1]["start_ns"] == 580_450
        assert view[0] <= 580_450 and view[1] >= request["requests"][1]["end_ns"]
        assert view[1] - view[0] < page.evaluate("() => window.ggmlViz.overview.duration_ns")


class LayerCount(Finding):
    """A finding with a title: a summary section of its own, as a plugin may add."""

    name = "layer-count"
    title = "Layers, as a plugin sees them"

    def find(self, run, context):
        return [f"{run.manifest['model']['layers']} layers in {len(run.graphs)} graphs."]


def test_a_summary_section_is_shown_under_the_findings(page, tmp_path, monkeypatch):
    # GIVEN a run whose findings include a titled one (a plugin's summary section)
    monkeypatch.setattr("ggml_viz.analysis.findings.BUILTIN_FINDINGS", [*BUILTIN_FINDINGS, LayerCount()])
    path = write_synthetic_run(tmp_path / "sectioned.ggmlviz", graphs=4, layers=2, seed=5)
    with serving(page, path) as viewer:
        # WHEN the statistics are opened
        page.goto(viewer.url + "#stats")
        page.wait_for_selector("[data-testid=found-section]")
        # THEN the section shows its title, where it comes from and its sentences, apart from the findings
        section = page.locator("[data-testid=found-section]")
        assert section.locator("h2").inner_text() == "Layers, as a plugin sees them"
        assert "from built-in" in section.inner_text()
        assert section.locator("li").all_inner_texts() == ["2 layers in 4 graphs."]
        assert "2 layers in 4 graphs." not in page.locator("[data-testid=findings]").inner_text()
