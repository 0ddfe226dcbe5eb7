"""The web viewer in Debian's Chromium, driven by Playwright, on a real SmolLM2 run:
every view shows real content, clicking and hovering work, the live view follows a
recording. Each view's screenshot is saved (into $GGML_VIZ_SCREENSHOTS when set)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import ggml_viz
from ggml_viz.ui.server import make_viewer

from ..browser import chromium, open_offline, serving
from .smollm2 import greedy, load_model

pytestmark = [pytest.mark.model, pytest.mark.browser]

VIEWS = ["overview", "timeline", "graph", "memory", "stats", "events"]


@pytest.fixture(scope="module")
def browser():
    with chromium() as launched:
        yield launched


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory) -> Path:
    folder = Path(os.environ.get("GGML_VIZ_SCREENSHOTS") or tmp_path_factory.mktemp("screenshots"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def served_run(tmp_path_factory, model_path):
    """A real 12-token SmolLM2 run, served by a viewer on a free port."""
    path = tmp_path_factory.mktemp("served") / "smollm2.ggmlviz"
    with ggml_viz.record(path, metadata={"prompt": "The capital of France is"}):
        greedy(load_model(model_path), n_predict=12)
    viewer = make_viewer(path, port=0)
    viewer.serve_in_background()
    yield viewer, ggml_viz.open(path)
    viewer.stop()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    yield page
    context.close()
    assert not errors, errors


def open_view(page, url: str, view: str):
    page.goto(f"{url}#{view}")
    page.wait_for_selector("body[data-ready='1']")


def colored_pixels(page, selector: str) -> int:
    """Pixels of a canvas that are not the background: proof that something was drawn."""
    return page.eval_on_selector(
        selector,
        """canvas => { const d = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
           let n = 0;
           for (let i = 0; i < d.length; i += 4) if (d[i + 3] > 0 && (d[i] > 40 || d[i + 1] > 40 || d[i + 2] > 70)) n++;
           return n; }""",
    )


def shown_nulls(page, selector: str) -> list[str]:
    """The tags of elements showing the text "null": a value left out (`cond ? h(...) : null`)
    that the DOM wrote as text."""
    return page.eval_on_selector(
        selector,
        """root => { const found = [], walk = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
           while (walk.nextNode())
             if (walk.currentNode.textContent.trim() === 'null') found.push(walk.currentNode.parentElement.tagName);
           return found; }""",
    )


def test_each_view_shows_the_run(page, served_run, screenshots):
    viewer, run = served_run
    open_view(page, viewer.url, "overview")
    page.wait_for_selector("[data-testid=model-card]")
    assert "llama" in page.inner_text("[data-testid=model-card]")
    assert "MUL_MAT" in page.inner_text("[data-testid=time-by-op]")
    assert "The capital of France is" in page.inner_text("[data-testid=prompt]")
    assert colored_pixels(page, "[data-testid=graph-bars]") > 500
    page.screenshot(path=str(screenshots / "overview.png"))

    page.click("#tabs button[data-tab=timeline]")
    page.wait_for_function("() => window.ggmlViz.timeline && window.ggmlViz.timeline.data")
    page.wait_for_timeout(300)
    assert colored_pixels(page, "[data-testid=timeline-canvas]") > 5000
    lanes = page.evaluate("() => window.ggmlViz.timeline.data.lanes.length")
    assert lanes == 1
    page.screenshot(path=str(screenshots / "timeline.png"))

    page.click("#tabs button[data-tab=graph]")
    page.wait_for_selector("[data-testid=graph-svg] g[data-kind=layer]")
    assert page.locator("[data-testid=graph-svg] g[data-kind=layer]").count() == 30
    page.click("[data-testid=graph-svg] g[data-id=L2]")
    page.wait_for_selector("[data-testid=graph-svg] g[data-kind=weight]")
    names = page.locator("[data-testid=graph-svg] g[data-kind=weight]").all_text_contents()
    assert any("blk.2.attn_q.weight" in name for name in names)
    page.screenshot(path=str(screenshots / "graph.png"))

    page.click("#tabs button[data-tab=memory]")
    page.wait_for_selector("[data-testid=disk-strip]")
    page.wait_for_timeout(300)
    assert colored_pixels(page, "[data-testid=disk-strip]") > 2000
    assert "kv_cache" in page.inner_text("[data-testid=buffer-list]")
    assert colored_pixels(page, "[data-testid=kv-heatmap]") > 100
    page.wait_for_function("() => document.querySelector('[data-testid=event-count]').textContent.includes('events')")
    page.screenshot(path=str(screenshots / "memory.png"))

    page.click("#tabs button[data-tab=stats]")
    page.wait_for_selector("[data-testid=findings] li")
    assert "MUL_MAT" in page.inner_text("[data-testid=findings]")
    assert page.locator("[data-testid=stats-layer] tr").count() == 32  # header, 30 layers, nodes outside
    assert shown_nulls(page, "#view-stats") == []  # no --values stats: no chart, and no "null" in its place
    page.screenshot(path=str(screenshots / "statistics.png"))

    page.click("#tabs button[data-tab=events]")
    page.wait_for_selector("#view-events [data-testid=event-table] .vrow")
    count = page.inner_text("#view-events [data-testid=event-count]")
    assert count.replace(",", "").startswith(str(len(run.nodes)))
    page.fill("#view-events [data-testid=filter-name]", "ffn_up-7")
    page.wait_for_function(
        "() => document.querySelector('#view-events [data-testid=event-count]').textContent === '12 events'"
    )
    page.screenshot(path=str(screenshots / "events.png"))


def test_clicking_a_node_shows_its_details_and_its_place_in_the_graph(page, served_run):
    viewer, _ = served_run
    open_view(page, viewer.url, "timeline")
    page.wait_for_function("() => window.ggmlViz.timeline && window.ggmlViz.timeline.data")
    # zoom onto the second graph
    target = page.evaluate(
        """() => { const t = window.ggmlViz.timeline, g = t.data.lanes[0].graphs;
           t.focus(g.start[1], g.end[1]); return [g.start[1], g.end[1]]; }"""
    )
    page.wait_for_function(
        f"() => window.ggmlViz.timeline.data.t0 > {target[0]} - 1e9"
        " && window.ggmlViz.timeline.data.lanes[0].nodes.start.length > 100"
    )
    # the last MUL_MAT of that graph: the output projection, which reads a weight from the model file
    # (the widest one is not always a weight's: on a busy machine a small one may be stretched)
    x, y = page.evaluate(
        """([g0, g1]) => { const t = window.ggmlViz.timeline, n = t.data.lanes[0].nodes, ops = t.data.ops;
           let best = -1;
           for (let i = 0; i < n.start.length; i++)
             if (ops[n.op[i]] === 'MUL_MAT' && n.start[i] >= g0 && n.end[i] <= g1
                 && (best < 0 || n.start[i] > n.start[best])) best = i;
           const r = t.canvas.getBoundingClientRect(), scale = r.width / (t.view.t1 - t.view.t0);
           const lane = t.layout()[0];
           return [r.left + ((n.start[best] + n.end[best]) / 2 - t.view.t0) * scale, r.top + lane.nodeY + 10]; }""",
        target,
    )
    page.mouse.click(x, y)
    page.wait_for_selector("[data-testid=details-name]")
    details = page.inner_text("[data-testid=details]")
    assert "MUL_MAT" in details and "shape" in details
    sources = page.locator("[data-testid=sources] tr")
    assert sources.count() >= 3  # header and two sources
    assert "file @" in page.inner_text("[data-testid=sources]")  # a weight, read from the model file
    assert shown_nulls(page, "body") == []  # no --values stats: nothing, not "null", where they would be
    page.click("text=show in graph")
    page.wait_for_selector("[data-testid=graph-svg] g.item.selected")


def test_hovering_a_heatmap_segment_shows_its_tooltip(page, served_run):
    viewer, _ = served_run
    open_view(page, viewer.url, "memory")
    page.wait_for_selector("[data-testid=disk-strip]")
    page.wait_for_timeout(300)
    box = page.locator("[data-testid=disk-strip]").bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + box["height"] / 2)
    tooltip = page.locator("[data-testid=tooltip]")
    tooltip.wait_for(state="visible")
    text = tooltip.inner_text()
    assert "blk." in text and "file bytes" in text and "layer" in text
    assert page.locator("[data-testid=lens]").is_visible()
    # the smallest tensors (norm weights, 2 KiB of 98 MB) are at least 5 px wide: findable
    page.click("[data-testid=disk-rows]")
    page.wait_for_selector("[data-testid=disk-row]")
    # dragging across the strip filters the event log beneath
    page.click("[data-testid=disk-rows]")
    page.wait_for_selector("[data-testid=disk-strip]")
    page.wait_for_timeout(200)
    box = page.locator("[data-testid=disk-strip]").bounding_box()
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * 0.40, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.45, y)
    page.mouse.up()
    page.wait_for_function(
        "() => document.querySelector('[data-testid=disk-selection]').textContent.startsWith('selected')"
    )
    page.wait_for_selector("#view-memory [data-testid=event-table] .vrow")
    shown = page.inner_text("#view-memory [data-testid=event-count]")
    assert 0 < int(shown.split()[0].replace(",", "")) < 12 * 1086  # only the nodes reading the selected weights


def test_the_live_view_gains_graphs_while_a_recording_runs(page, tmp_path, model_path):
    path = tmp_path / "live.ggmlviz"
    with serving(page, path, live=True) as viewer:
        recording = subprocess.Popen(
            [sys.executable, "-m", "ggml_viz", "record", "-n", "160", "-t", "2", "-o", str(path)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            follow_the_recording(page, viewer, recording, path)
        finally:
            if recording.poll() is None:
                recording.kill()


def follow_the_recording(page, viewer, recording, path):
    """The page gains graphs while the recording runs, and ends with all of them."""
    page.goto(viewer.url + "#overview")
    page.wait_for_selector("body[data-ready='1']", timeout=120_000)
    first = page.evaluate("() => window.ggmlViz.overview.summary.graphs")
    page.wait_for_function(f"() => window.ggmlViz.overview.summary.graphs > {first}", timeout=120_000)
    assert page.evaluate("() => window.ggmlViz.liveUpdates") >= 1
    assert page.locator("[data-testid=live]").is_visible()
    recording.wait(timeout=300)
    page.wait_for_function("() => window.ggmlViz.overview.summary.status === 'complete'", timeout=30_000)
    final = page.evaluate("() => window.ggmlViz.overview.summary.graphs")
    assert final == len(ggml_viz.open(path).graphs)


def test_the_html_report_works_offline_and_shows_the_top_ops(browser, served_run, tmp_path, screenshots):
    from ggml_viz.commands import main

    _, run = served_run
    report = tmp_path / "report.html"
    assert main(["export", str(run.path), "-o", str(report)]) == 0
    page, requests, errors = open_offline(browser, report)
    assert "MUL_MAT" in page.inner_text("[data-testid=time-by-op]")
    for view in ("timeline", "graph", "memory", "stats", "events"):
        page.click(f"#tabs button[data-tab={view}]")
        page.wait_for_timeout(300)
    page.wait_for_selector("#view-events [data-testid=event-table] .vrow")
    page.screenshot(path=str(screenshots / "report-events.png"))
    page.close()
    assert requests == [report.as_uri()], requests  # the file itself, and nothing else
    assert not errors, errors


def test_a_directory_of_runs_lists_them_and_compares_two(page, tmp_path):
    from ggml_viz.runformat.synthetic import write_synthetic_run

    write_synthetic_run(tmp_path / "runs" / "small.ggmlviz", graphs=8, layers=2, seed=1)
    write_synthetic_run(tmp_path / "runs" / "large.ggmlviz", graphs=8, layers=4, seed=2)
    with serving(page, tmp_path / "runs") as viewer:
        page.goto(viewer.url)
        page.wait_for_selector("[data-testid=runs] input[type=checkbox]")
        assert page.locator("[data-testid=runs] tr").count() == 3
        for box in page.locator("[data-testid=runs] input[type=checkbox]").all():
            box.check()
        page.click("[data-testid=compare]")
        page.wait_for_selector("[data-testid=comparison] table")
        assert "time per graph by op" in page.text_content("[data-testid=comparison]")


def test_captured_attention_renders_with_token_labels(page, tmp_path, model_path, screenshots):
    path = tmp_path / "attention.ggmlviz"
    with ggml_viz.record(path, capture="kq_soft_max-*", values="stats"):
        greedy(load_model(model_path), n_predict=2)
    with serving(page, path) as viewer:
        open_view(page, viewer.url, "attention")
        page.wait_for_selector("[data-testid=attention-canvas]")
        page.wait_for_timeout(200)
        keys = page.inner_text("[data-testid=attention-keys]")
        queries = page.inner_text("[data-testid=attention-queries]")
        assert "capital" in keys and "France" in queries
        assert colored_pixels(page, "[data-testid=attention-canvas]") > 500
        page.screenshot(path=str(screenshots / "attention.png"))
        page.click("#tabs button[data-tab=stats]")
        page.wait_for_selector("[data-testid=activation-chart]")
        page.wait_for_timeout(200)
        assert colored_pixels(page, "[data-testid=activation-chart]") > 200


def test_the_report_and_the_server_answer_the_same_event_queries(browser, served_run, tmp_path):
    from ggml_viz.commands import main
    from ggml_viz.ui.run_view import RunView
    from ggml_viz.ui.views.events import EventFilter

    # GIVEN a run's offline report, and the server's view of the same run
    _, run = served_run
    report = tmp_path / "side-by-side.html"
    assert main(["export", str(run.path), "-o", str(report)]) == 0
    view = RunView("r0", run.path)
    weights = run.memory_map[run.memory_map.kind == "tensor"].sort_values("start")
    middle = weights.iloc[len(weights) // 2]
    layer = int(view.structure.loc[view.structure["layer"] >= 0, "layer"].iloc[0])
    queries = [
        {"op": "MUL_MAT"},
        {"name": "ffn"},
        {"layer": layer},
        {"file_lo": int(middle.start), "file_hi": int(middle.end)},  # one weight's bytes
        {"file_lo": int(weights.start.iloc[0]), "file_hi": int(weights.end.iloc[len(weights) // 3])},
        {"op": "MUL_MAT", "file_lo": int(weights.start.iloc[0]), "file_hi": int(weights.end.iloc[-1])},
    ]
    page = browser.new_page()
    page.goto(report.as_uri())
    page.wait_for_selector("body[data-ready='1']")
    for query in queries:
        # WHEN both answer the same query
        served = view.events(EventFilter(**query), 0, 50)
        offline = page.evaluate("(q) => window.ggmlViz.api('runs/r0/events', {...q, offset: 0, limit: 50})", query)
        # THEN they give the same events
        assert offline["total"] == served["total"] > 0, query
        assert [row["event"] for row in offline["rows"]] == [row["event"] for row in served["rows"]], query
    page.close()


def test_a_live_timeline_follows_new_graphs_and_the_overview_catches_up_when_shown(page, tmp_path):
    from ggml_viz.runformat.synthetic import SyntheticRecording

    recording = SyntheticRecording(tmp_path / "growing.ggmlviz", layers=2, seed=4)
    recording.append_graphs(3)
    recording.writer.flush_graphs()
    try:
        with serving(page, recording.run_dir, live=True) as viewer:
            # GIVEN the timeline of a run being recorded, zoomed out to the whole run
            open_view(page, viewer.url, "timeline")
            page.wait_for_function("() => window.ggmlViz.timeline && window.ggmlViz.timeline.data", timeout=30_000)
            overviews = []
            page.on("request", lambda request: overviews.append(request.url) if "/overview" in request.url else None)
            # WHEN the recording gains graphs
            recording.append_graphs(5)
            # THEN the timeline's bars reach the new graphs, from the live updates alone
            page.wait_for_function(
                "() => window.ggmlViz.timeline.data.lanes[0].graphs.graph_id.includes(7)", timeout=30_000
            )
            assert page.evaluate("() => window.ggmlViz.liveUpdates") >= 1
            assert page.evaluate("() => window.ggmlViz.overview.summary.graphs") == 8
            assert overviews == []  # the summary is not computed for a view that does not show it
            # AND the overview, shown, is fetched again and counts every graph
            page.click("#tabs button[data-tab=overview]")
            page.wait_for_function("() => !window.ggmlViz.overviewStale", timeout=30_000)
            assert len(overviews) == 1
            assert page.evaluate("() => window.ggmlViz.overview.graph_bars.graph_id.length") == 8
    finally:
        recording.close()


def test_a_plain_view_of_a_run_still_recording_follows_it(page, tmp_path):
    from ggml_viz.runformat.synthetic import SyntheticRecording

    recording = SyntheticRecording(tmp_path / "server.ggmlviz", layers=2, seed=4)
    recording.append_graphs(3)
    recording.writer.flush_graphs()
    try:
        with serving(page, recording.run_dir) as viewer:  # (no --live)
            # GIVEN the overview of a run being recorded, opened as any run is
            open_view(page, viewer.url, "overview")
            page.wait_for_function("() => window.ggmlViz.overview.summary.graphs === 3", timeout=30_000)
            # WHEN the recording gains graphs
            recording.append_graphs(5)
            recording.writer.flush_graphs()
            # THEN the page follows it
            page.wait_for_function("() => window.ggmlViz.overview.summary.graphs === 8", timeout=30_000)
            assert page.evaluate("() => window.ggmlViz.liveUpdates") >= 1
    finally:
        recording.close()


def test_a_mixture_of_experts_shows_its_routing(page, tmp_path, screenshots):
    from .arch_models import generate, load
    from .moe_models import write_moe_model
    from .test_moe_routing import PROMPT

    model = write_moe_model(tmp_path / "qwen3moe.gguf", "qwen3moe")
    path = tmp_path / "moe.ggmlviz"
    with ggml_viz.record(path):
        generate(load(model), prompt=PROMPT, n_predict=3)
    run = ggml_viz.open(path)
    with serving(page, path) as viewer:
        # GIVEN the Experts tab: THEN a layer × expert heatmap, one row per MoE layer
        open_view(page, viewer.url, "experts")
        page.wait_for_selector("[data-testid=experts-canvas]")
        page.wait_for_timeout(200)
        assert colored_pixels(page, "[data-testid=experts-canvas]") > 200
        labels = page.inner_text("[data-testid=experts-map]")
        assert all(f"layer {layer} · CPU" in labels for layer in range(model.n_layers))
        # AND hovering a cell names its layer and expert, with the tokens the run routed to it
        box = page.locator("[data-testid=experts-canvas]").bounding_box()
        page.mouse.move(box["x"] + 3, box["y"] + 3)
        tooltip = page.inner_text("[data-testid=tooltip]")
        routed = int(run.moe_experts.query("layer == 0 and expert == 0")["tokens"].iloc[0])
        assert "layer 0, expert 0" in tooltip and f"tokens: {routed}" in tooltip
        # AND the bytes can be shown instead
        page.select_option("[data-testid=experts-metric]", "bytes")
        page.wait_for_timeout(100)
        assert "bytes of weights read" in page.inner_text("[data-testid=experts-map]")
        page.screenshot(path=str(screenshots / "experts.png"))
        # AND a MUL_MAT_ID's details list each token's experts and weights
        open_view(page, viewer.url, "events")
        page.select_option("[data-testid=filter-op]", "MUL_MAT_ID")
        page.wait_for_function(
            "() => { const rows = [...document.querySelectorAll('[data-testid=event-table] .vrow')];"
            " return rows.length > 0 && rows.every((row) => row.textContent.includes('MUL_MAT_ID')); }"
        )
        page.click("[data-testid=event-table] .vrow >> nth=0")
        page.wait_for_selector("[data-testid=details-name]")
        page.wait_for_selector("[data-testid=node-routing]")
        table = page.inner_text("[data-testid=node-routing]")
        first = run.moe_routing.sort_values(["graph_id", "node_index", "row", "slot"]).iloc[0]
        assert f"{int(first['expert'])} (" in table and "experts (weight)" in table
        assert shown_nulls(page, "body") == []


def test_the_what_if_view_shows_each_placement_s_step_and_memory(page, tmp_path, screenshots):
    from ..machine_limits import keep_in_run, twice_as_fast_at_two_threads
    from .arch_models import generate, load, write_model

    # GIVEN a Gemma 3 model recorded on the CPU, with limits at one and two threads kept in it
    model = write_model(tmp_path / "gemma3.gguf", "gemma3", n_layers=4, n_embd=256, n_ff=1024)
    path = tmp_path / "gemma3.ggmlviz"
    with ggml_viz.record(path):
        generate(load(model, n_threads=1, n_threads_batch=1), n_predict=8)
    keep_in_run(path, twice_as_fast_at_two_threads())
    with serving(page, path) as viewer:
        # WHEN the What-if tab is opened
        open_view(page, viewer.url, "whatif")
        page.wait_for_selector("[data-testid=whatif-table]")
        rows = page.locator("[data-testid=whatif-row]")
        # THEN the recorded placement comes first, then others, each with its decode step as a bar of parts
        assert rows.count() >= 2 and "(recorded)" in rows.nth(0).inner_text()
        assert "-t 2" in page.inner_text("[data-testid=whatif-table]")
        widths = page.eval_on_selector_all(
            "[data-testid=whatif-bar]", "bars => bars.map(b => b.getBoundingClientRect().width)"
        )
        assert len(widths) == rows.count() and min(widths) > 1
        parts = page.eval_on_selector_all(".whatif-part", "parts => parts.map(p => p.dataset.part)")
        assert "CPU" in parts and "fixed" in parts
        # AND the recorded placement's prediction is held against its own steps, and what is left out is said
        assert "measured" in page.inner_text("[data-testid=whatif-check]")
        assert "left out:" in page.inner_text("[data-testid=whatif-left-out]")
        assert shown_nulls(page, "#view-whatif") == []
        page.screenshot(path=str(screenshots / "whatif.png"))


def test_a_long_generated_text_without_spaces_stays_inside_its_box(page, tmp_path):
    from ggml_viz.runformat.manifest import load_manifest, write_manifest
    from ggml_viz.runformat.synthetic import write_synthetic_run

    # GIVEN a run whose generated text is one long word (a random-weight model's output)
    path = write_synthetic_run(tmp_path / "unbroken.ggmlviz", graphs=4, layers=2, seed=3)
    manifest = load_manifest(path)
    manifest["generation"] = {"prompt": "Hello", "generated_text": "ĠrandomĊtokens" * 200}
    write_manifest(path, manifest)
    with serving(page, path) as viewer:
        # WHEN the Overview shows it
        open_view(page, viewer.url, "overview")
        page.wait_for_selector("[data-testid=generated]")
        # THEN the text wraps within its box: nothing to scroll sideways, nothing past its card
        fits = page.eval_on_selector(
            "[data-testid=generated]",
            """text => { const card = text.closest('.card').getBoundingClientRect(),
               box = text.getBoundingClientRect();
               return { scroll: text.scrollWidth, client: text.clientWidth,
                        inside: box.left >= card.left - 1 && box.right <= card.right + 1 }; }""",
        )
        assert "randomĊtokens" in page.inner_text("[data-testid=generated]")
        assert fits["scroll"] <= fits["client"] + 1, fits
        assert fits["inside"], fits


def test_the_what_if_table_of_two_devices_stays_inside_its_card(page, tmp_path):
    from ggml_viz.runformat.synthetic import write_synthetic_run

    # GIVEN a partial offload (two devices: a memory column each) and a viewport a laptop has
    path = write_synthetic_run(tmp_path / "offload.ggmlviz", graphs=24, layers=6, gpu_every=8, cpu_layers=2)
    page.set_viewport_size({"width": 1280, "height": 800})
    with serving(page, path) as viewer:
        # WHEN the What-if tab shows its placements
        open_view(page, viewer.url, "whatif")
        page.wait_for_selector("[data-testid=whatif-table]")
        # THEN every column, each device's memory included, is inside the card: nothing cut off
        fits = page.eval_on_selector(
            "[data-testid=whatif-table]",
            """table => { const card = table.closest('.card').getBoundingClientRect();
               return [...table.querySelectorAll('th, td')].every(
                 cell => cell.getBoundingClientRect().right <= card.right + 1); }""",
        )
        assert fits
        memory = page.locator("[data-testid=whatif-memory]").first.inner_text()
        assert "weights" in memory and "compute" in memory
        assert page.locator("th", has_text="CUDA0 memory").count() == 1
        # AND the recorded placement is shown once, first
        flags = page.locator("[data-testid=whatif-row] td.flags").all_inner_texts()
        assert [i for i, text in enumerate(flags) if "(recorded)" in text] == [0], flags
