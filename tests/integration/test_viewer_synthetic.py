"""The whole page in Chromium on a synthetic run (no model): every view draws without an
error, views hand a node to each other, and the offline report works from a file. The
model's own run is in test_viewer_browser.py."""

from __future__ import annotations

import pytest

from ggml_viz.runformat.synthetic import write_synthetic_run
from ggml_viz.ui.server import make_viewer

from ..browser import chromium, collect_errors

pytestmark = pytest.mark.browser

TABS = ["overview", "timeline", "graph", "memory", "stats", "events", "attention"]


@pytest.fixture(scope="module")
def browser():
    with chromium() as browser:
        yield browser


@pytest.fixture(scope="module")
def run_path(tmp_path_factory):
    return write_synthetic_run(tmp_path_factory.mktemp("synthetic") / "synthetic.ggmlviz", graphs=12, layers=3, seed=3)


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    errors = collect_errors(page)
    yield page
    context.close()
    assert not errors, errors


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


def test_the_report_inlines_the_modules_and_works_offline(browser, run_path, tmp_path):
    from ggml_viz.commands import main

    # GIVEN a synthetic run's report, opened from a file
    report = tmp_path / "report.html"
    assert main(["export", str(run_path), "-o", str(report)]) == 0
    assert "import " not in report.read_text().split('<script type="module">')[1]
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    errors = collect_errors(page)
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    page.goto(report.as_uri())
    page.wait_for_selector("body[data-ready='1']")
    # WHEN every tab is opened, THEN each draws from the report's own answers
    for tab in TABS:
        page.click(f"#tabs button[data-tab={tab}]")
        page.wait_for_timeout(200)
    page.click("#tabs button[data-tab=events]")
    page.wait_for_selector("#view-events [data-testid=event-table] .vrow")
    page.click("#tabs button[data-tab=memory]")
    page.wait_for_selector("[data-testid=occupancy-graph] option", state="attached")
    assert page.evaluate("() => window.ggmlViz.timeline.data.lanes[0].nodes.start.length") > 0
    page.close()
    assert requests == [report.as_uri()], requests  # the file itself, and nothing else
    assert not errors, errors
