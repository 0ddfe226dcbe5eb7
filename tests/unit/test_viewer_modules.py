"""The viewer's JavaScript modules, tested one function at a time in Chromium (no model, no
server, no Node.js): Playwright hands the browser the page's static files from the package,
each module is imported as the page imports it, and its pure functions are called with
made-up values. Formatters, colors, the disk strip's layout, the timeline's geometry and hit
tests (its GPU lanes too), the graph's boxes and links, sorting, tooltips, the GPU's words in
the overview, statistics and details, the offline report's answers, and the report's reading
of each module's exports."""

from __future__ import annotations

from urllib.parse import urlparse

import pytest

from ggml_viz.ui.inline import exports_of, module_order, read_module

from ..browser import chromium

pytestmark = pytest.mark.browser

ORIGIN = "http://viewer.test"
FORMAT, COLORS, DISK, TIMELINE, GRAPH = (
    "js/format.js",
    "js/colors.js",
    "js/views/disk.js",
    "js/views/timeline.js",
    "js/views/graph.js",
)


def serve_static(route) -> None:
    path = urlparse(route.request.url).path.lstrip("/")
    if path == "blank.html":
        route.fulfill(body="<!doctype html><title>modules</title>", content_type="text/html")
    elif path.endswith(".js"):
        route.fulfill(body=read_module(path), content_type="text/javascript")
    else:
        route.fulfill(status=404, body="not found")


@pytest.fixture(scope="module")
def page():
    with chromium() as browser:
        page = browser.new_page()
        page.route(f"{ORIGIN}/**", serve_static)
        page.goto(f"{ORIGIN}/blank.html")
        yield page


def calls(page, module: str, function: str, *arguments: tuple) -> list:
    """`function` of `module` called in the page once per tuple of arguments (typed arrays
    come back as lists)."""
    return page.evaluate(
        """async ([module, name, calls]) => {
             const m = await import('/' + module);
             const plain = (v) => (ArrayBuffer.isView(v) ? Array.from(v)
               : v && typeof v === 'object' && !Array.isArray(v)
               ? Object.fromEntries(Object.entries(v).map(([k, x]) => [k, plain(x)])) : v);
             return calls.map((args) => plain(m[name](...args))); }""",
        [module, function, [list(args) for args in arguments]],
    )


def call(page, module: str, function: str, *args):
    return calls(page, module, function, args)[0]


def test_durations_bytes_and_counts_read_as_people_write_them(page):
    durations = calls(page, FORMAT, "fmtNs", (None,), (-1,), (999,), (1500,), (2.5e6,), (2.5e8,), (1.5e9,))
    assert durations == ["—", "—", "999 ns", "1.5 µs", "2.50 ms", "250 ms", "1.500 s"]
    sizes = calls(page, FORMAT, "fmtBytes", (None,), (0,), (1023,), (1536,), (5 * 2**30,), (2**42,))
    assert sizes == ["—", "0 B", "1023 B", "1.5 KiB", "5.0 GiB", "4096.0 GiB"]
    assert calls(page, FORMAT, "fmtInt", (1234567,), (None,)) == ["1,234,567", "—"]
    assert calls(page, FORMAT, "fmtPct", (0.1234,), (None,)) == ["12.3 %", "—"]
    values = calls(page, FORMAT, "fmtNum", (0,), (0.5,), (12345,), (0.0001,), (-2,), (None,))
    assert values == ["0.0000", "0.5000", "1.235e+4", "1.000e-4", "-2.0000", "—"]
    assert calls(page, FORMAT, "truncate", ("abcdef", 4), ("abc", 4), (None, 4)) == ["abc…", "abc", ""]


def test_an_op_keeps_its_color_everywhere_and_heat_runs_blue_to_yellow(page):
    # GIVEN the run's ops in order: each op's hue is its place in the palette, round again after 24
    ops = [f"OP{i}" for i in range(26)]
    assert calls(page, COLORS, "opColor", ("ADD", ["ADD", "MUL_MAT"]), ("MUL_MAT", ["ADD", "MUL_MAT"])) == [
        "#4e79a7",
        "#f28e2b",
    ]
    assert call(page, COLORS, "opColor", "OP24", ops) == call(page, COLORS, "opColor", "OP0", ops)
    # an op missing from the list gets a palette hue from its name, the same each time
    unknown = calls(page, COLORS, "opColor", ("ROPE", ["ADD"]), ("ROPE", []))
    assert unknown[0] == unknown[1] and unknown[0].startswith("#") and unknown[0] not in ("#4e79a7",)
    heat = calls(page, COLORS, "heat", (0,), (1,), (0.5,), (0.125,), (-3,), (7,))
    assert heat == [
        "rgb(20,30,60)",
        "rgb(255,240,180)",
        "rgb(90,170,160)",
        "rgb(30,60,110)",
        "rgb(20,30,60)",
        "rgb(255,240,180)",
    ]


def test_the_disk_strip_gives_every_region_five_pixels_and_shares_the_rest_by_size(page):
    # GIVEN regions of 10, 10 and 80 bytes on a 1000 px strip
    layout = call(page, DISK, "segmentLayout", [0, 10, 20], [10, 20, 100], 1000)
    # THEN each gets 5 px, and the other 985 px go 10 : 10 : 80
    assert layout == {"xs": [0, 103.5, 207, 1000], "canvasWidth": 1000}
    # GIVEN more regions than 5 px each fit: the canvas grows to fit them (and 50 px more)
    starts = [i * 100 for i in range(300)]
    ends = [start + (1_000_000 if i == 0 else 1) for i, start in enumerate(starts)]
    crowded = call(page, DISK, "segmentLayout", starts, ends, 1000)
    assert crowded["canvasWidth"] == 1550
    assert min(b - a for a, b in zip(crowded["xs"], crowded["xs"][1:], strict=False)) >= 5
    # a pixel finds its segment; beyond either end, the first or the last
    xs = [0, 103.5, 207, 1000]
    assert [call(page, DISK, "segmentAt", xs, x) for x in (-10, 0, 103.4, 103.5, 999, 5000)] == [0, 0, 0, 1, 2, 2]


REGIONS = {
    "kind": ["header", "tensor", "tensor", "padding", "tensor"],
    "name": ["", "blk.0.attn_q.weight", "token_embd.weight", "", "output.weight"],
    "start": [0, 4096, 69632, 135168, 135200],
    "end": [4096, 69632, 135168, 135200, 200736],
    "layer": [-1, 0, -1, -1, -1],
    "type": ["", "q4_0", "q8_0", "", "q6_K"],
    "category": ["", "attention", "embedding", "", "output"],
    "reads": [0, 40, 3, 0, 0],
    "read_ns": [0, 1_500_000, 6000, 0, 0],
    "rows_read": [-1, -1, 3, -1, -1],
    "row_bytes_read": [-1, -1, 1536, -1, -1],
}


def test_disk_regions_are_colored_described_and_grouped_by_layer(page):
    colors = [call(page, DISK, "regionColor", REGIONS, i, "read_ns", 1_500_000) for i in range(5)]
    lukewarm = 0.15 + 0.85 * (6000 / 1_500_000) ** 0.5
    hottest, warm = calls(page, COLORS, "heat", (1,), (lukewarm,))
    assert colors == ["#3a4152", hottest, warm, "#2a2e38", "#232733"]  # header, hottest, warm, padding, unread
    assert call(page, DISK, "regionTooltip", REGIONS, 2) == [
        "token_embd.weight",
        [
            "tensor · q8_0 · 64.0 KiB",
            "file bytes 69,632 – 135,168",
            "layer none · embedding",
            "3 reads · 6.0 µs of reading nodes",
            "looked up by row: 3 rows read (1.5 KiB, white ticks)",
        ],
    ]
    assert call(page, DISK, "regionTooltip", REGIONS, 0) == [
        "header",
        ["header · 4.0 KiB", "file bytes 0 – 4,096", "layer none", "", ""],
    ]
    assert call(page, DISK, "regionsByLayer", REGIONS) == [["layer 0", [1]], ["outside layers", [2, 4]]]
    assert calls(page, DISK, "regionRange", (REGIONS, 4, 1), (REGIONS, 1, 1)) == [[4096, 200736], [4096, 69632]]


def test_rows_a_lookup_read_land_at_their_bytes_inside_their_table(page):
    # GIVEN two 100-byte tables drawn at 0..50 and 50..150 px, and two rows read from the second
    regions = {"start": [0, 100], "end": [100, 200]}
    rows = {"start": [120, 190], "end": [130, 200], "reads": [1, 2]}
    # THEN each row is a tick at its bytes' place in the second table's 100 px
    assert call(page, DISK, "rowSpans", rows, regions, [0, 50, 150]) == [[70, 80], [140, 150]]
    assert call(page, DISK, "rowSpans", {"start": [], "end": []}, regions, [0, 50, 150]) == []


WINDOW = {
    "t0": 0,
    "t1": 1000,
    "width": 100,
    "ops": ["ADD", "MUL_MAT"],
    "lanes": [
        {
            "label": "context 0 · CPU",
            "graphs": {"start": [0], "end": [600], "graph_id": [3], "label": [" Paris"], "phase": ["decode"]},
            "nodes": {"start": [0, 100, 100], "end": [300, 200, 150], "op": [1, 0, 1], "event": [7, 8, 9]},
            "columns": {"px": [50], "op": [1], "fill": [0.75]},
        }
    ],
}


def test_the_timeline_lays_out_lanes_ticks_and_windows(page):
    # below the 24 px axis, 96 px a lane: label, graph bars, node bars
    lanes = call(page, TIMELINE, "laneLayout", [{}, {}])
    assert [[lane["labelY"], lane["graphY"], lane["nodeY"]] for lane in lanes] == [[36, 40, 64], [132, 136, 160]]
    # ticks every 1, 2 or 5 times a power of ten, about 110 px apart
    assert calls(page, TIMELINE, "axisStep", (0, 1e6, 1100), (0, 3e6, 1100), (0, 1.5e6, 1100)) == [1e5, 5e5, 2e5]
    # zooming keeps the time under the cursor in place, the span within 200 ns .. four runs
    window = {"t0": 0, "t1": 1000}
    zooms = calls(
        page,
        TIMELINE,
        "zoomedView",
        (window, 0.5, 250, 1000, 1e6),
        (window, 0.01, 250, 1000, 1e6),
        (window, 100, 250, 1000, 1000),
    )
    assert zooms == [{"t0": 125, "t1": 625}, {"t0": 200, "t1": 400}, {"t0": -750, "t1": 3250}]
    # a node shown with 15 % of context, and at least 40 µs
    assert calls(page, TIMELINE, "focusedView", (1000, 2000), (0, 1e6)) == [
        {"t0": -18500, "t1": 21500},
        {"t0": -75000, "t1": 1075000},
    ]


def test_a_message_between_hosts_runs_from_the_sender_s_lane_to_the_receiver_s(page):
    # GIVEN two lanes (node bars at 64 and 160 px, 30 px high) and 2 px per ns from t = 100
    rows = call(page, TIMELINE, "laneLayout", [{}, {}])
    wire = {
        "start": [150, 200],
        "end": [250, 220],
        "source": [0, 1],
        "target": [1, 5],
        "bytes": [70000, 16],
        "command": ["SET_TENSOR", "GET_TENSOR"],
        "total": 2,
    }
    # THEN a line from the middle of the sender's node lane when sent to the receiver's when received,
    # thicker for 64 KiB or more; one to a lane not shown is left out
    assert call(page, TIMELINE, "transferSegments", wire, rows, 100, 2) == [
        {"x0": 100, "y0": 79, "x1": 300, "y1": 175, "width": 2}
    ]


def test_the_timeline_finds_what_is_under_the_cursor(page):
    # GIVEN 1 ns per pixel: nested nodes 0..300 > 100..200 > 100..150, a summed column at 500..510
    def hit(x, y):
        return call(page, TIMELINE, "hitAt", WINDOW, {"t0": 0, "t1": 1000}, x, y, 1000)

    # THEN the narrowest node under the cursor wins, with its event and op; 3 px of slack
    assert hit(120, 70) == {"kind": "node", "i": 2, "start": 100, "end": 150, "op": "MUL_MAT", "event": 9}
    assert (hit(250, 70)["event"], hit(302, 70)["event"]) == (7, 7)
    # where no node is, the pixel column that sums the short ones; above the nodes, the graph
    assert hit(505, 70) == {"kind": "column", "op": "MUL_MAT", "fill": 0.75, "start": 500, "end": 510}
    graph = {"kind": "graph", "start": 0, "end": 600, "graph_id": 3, "label": " Paris", "phase": "decode"}
    assert hit(500, 45) == graph
    assert hit(500, 10) is None and hit(700, 70) is None


GPU_LANE = {
    "label": "CUDA0 · GPU (CUPTI kernel records)",
    "device": 0,
    "device_name": "CUDA0",
    "kernels": ["quantize_q8_1", "mul_mat_vec_q", "HtoD"],
    "names": ["void quantize_q8_1(float const*)", "void mul_mat_vec_q<2>(void const*)", ""],
    # a kernel of node 7 (MUL_MAT) quantizing its input, one multiplying; a copy no node claims
    "bars": {
        "start": [0, 100, 700],
        "end": [90, 400, 800],
        "busy": [90, 250, 100],
        "op": [1, 1, -2],
        "event": [7, 7, -1],
        "kernel": [0, 1, 2],
        "bytes": [0, 0, 4096],
    },
    "columns": {"px": [50], "op": [-1], "fill": [0.5]},
    "traced": {"start": [0], "end": [900], "graph_id": [3]},
}
GPU_WINDOW = {**WINDOW, "lanes": [{**WINDOW["lanes"][0], "gpu": [GPU_LANE]}, {**WINDOW["lanes"][0], "gpu": []}]}


def test_gpu_lanes_lie_under_their_context_s_lane_and_find_the_kernel_under_the_cursor(page):
    # GIVEN a context with one GPU lane, and one without: the GPU lane's label and bars below the node bars
    rows = call(page, TIMELINE, "laneLayout", GPU_WINDOW["lanes"])
    assert [[row["labelY"], row["graphY"], row["nodeY"]] for row in rows] == [[36, 40, 64], [174, 178, 202]]
    assert [[gpu["labelY"], gpu["y"]] for gpu in rows[0]["gpu"]] == [[108, 112]] and rows[1]["gpu"] == []

    def hit(x, y):
        return call(page, TIMELINE, "hitAt", GPU_WINDOW, {"t0": 0, "t1": 1000}, x, y, 1000)

    # THEN the narrowest kernel under the cursor, with its node's event and op and its names
    assert hit(50, 120) == {
        "kind": "kernel",
        "i": 0,
        "start": 0,
        "end": 90,
        "busy": 90,
        "code": 1,
        "op": "MUL_MAT",
        "event": 7,
        "kernel": "quantize_q8_1",
        "name": "void quantize_q8_1(float const*)",
        "bytes": 0,
        "device": "CUDA0",
    }
    assert hit(750, 120)["op"] == "memcpy" and hit(750, 120)["event"] == -1
    # a summed column of kernels no node claims; the node lane above is the host's
    assert hit(505, 120) == {
        "kind": "column",
        "op": "not attributed",
        "fill": 0.5,
        "start": 500,
        "end": 510,
        "gpu": True,
    }
    assert hit(120, 70)["kind"] == "node" and hit(600, 120) is None


def test_a_kernel_s_tooltip_names_it_its_node_and_its_busy_share(page):
    kernel = {
        "kind": "kernel",
        "start": 100,
        "end": 400,
        "busy": 250,
        "code": 1,
        "op": "MUL_MAT",
        "event": 7,
        "kernel": "mul_mat_vec_q",
        "name": "void mul_mat_vec_q<2>(void const*)",
        "bytes": 0,
        "device": "CUDA0",
    }
    row = {"name": "Qcur-0", "op": "MUL_MAT", "layer": 0, "graph_id": 3}
    copy = {**kernel, "code": -2, "op": "memcpy", "event": -1, "kernel": "HtoD", "name": "", "bytes": 4096}
    assert calls(page, TIMELINE, "kernelTooltip", (kernel,), (kernel, row), (copy,)) == [
        [
            "mul_mat_vec_q",
            [
                "a MUL_MAT node",
                "300 ns on CUDA0 · busy 250 ns (83.3 %, overlap counted once)",
                "void mul_mat_vec_q<2>(void const*)",
                "click for the node",
            ],
        ],
        [
            "mul_mat_vec_q",
            [
                "Qcur-0 · MUL_MAT · layer 0 · graph 3",
                "300 ns on CUDA0 · busy 250 ns (83.3 %, overlap counted once)",
                "void mul_mat_vec_q<2>(void const*)",
                "click for the node",
            ],
        ],
        ["HtoD", ["memcpy", "300 ns on CUDA0 · busy 250 ns (83.3 %, overlap counted once)", "4.0 KiB"]],
    ]
    assert call(page, TIMELINE, "hitTooltip", kernel) == call(page, TIMELINE, "kernelTooltip", kernel)
    column = {"kind": "column", "op": "memset", "fill": 0.5, "gpu": True}
    assert call(page, TIMELINE, "hitTooltip", column)[0] == "many short kernels, mostly memset"


def test_gpu_work_keeps_its_node_s_op_color_and_the_rest_their_own(page):
    ops = ["ADD", "MUL_MAT"]
    colors = calls(page, COLORS, "gpuColor", (1, ops), (-1, ops), (-2, ops), (-3, ops), (0, ["ADD"], ops))
    assert colors[0] == call(page, COLORS, "opColor", "MUL_MAT", ops) and colors[4] == "#4e79a7"
    assert len(set(colors[1:4])) == 3 and not set(colors[1:4]) & set(call(page, COLORS, "opColor", "ADD", ops))
    assert calls(page, COLORS, "gpuOpName", (1, ops), (-1, ops), (-2, ops), (-3, ops)) == [
        "MUL_MAT",
        "not attributed",
        "memcpy",
        "memset",
    ]


def test_the_gpu_s_words_in_the_overview_statistics_and_details(page):
    step = {
        "device": "CUDA0",
        "phase": "decode",
        "graphs": 4,
        "host_ns": 310_000,
        "busy_ns": 140_000,
        "span_ns": 270_000,
        "busy_share": 0.4516,
    }
    assert call(page, "js/views/overview.js", "gpuStepText", step) == [
        "decode step on CUDA0 (median of 4 traced)",
        "host 310.0 µs · GPU busy 140.0 µs (45.2 %) · GPU idle 170.0 µs",
    ]
    assert call(page, "js/views/overview.js", "gpuStepText", {**step, "phase": "prompt", "graphs": 1})[0] == (
        "prompt graph on CUDA0 (median of 1 traced)"
    )
    source = {
        "clock": "gpu",
        "label": "GPU time (CUDA0, CUPTI kernel records, 5 of 40 graphs traced)",
        "timed": 390,
        "time_ns": 697_049,
    }
    assert call(page, "js/views/stats.js", "timeSourceText", source) == (
        "GPU time (CUDA0, CUPTI kernel records, 5 of 40 graphs traced): 390 node events timed, 697.0 µs"
    )
    gpu = {
        "device": "CUDA0",
        "node_index": 3,
        "group_end": 3,
        "start_ns": 20_400,
        "end_ns": 24_265,
        "gpu_ns": 2665,
        "kernels": 2,
    }
    node = {"start_ns": None, "end_ns": None, "gpu": gpu}
    assert call(page, "js/details.js", "gpuTimeLines", node) == [
        ["GPU time", "2.7 µs busy on CUDA0 (2 kernels)"],
        ["on the GPU", "20.4 µs – 24.3 µs"],
    ]
    fused = call(page, "js/details.js", "gpuTimeLines", {**node, "gpu": {**gpu, "node_index": 2, "kernels": 1}})
    assert fused[0][1].endswith("(1 kernel)")
    assert fused[2] == ["fused", "nodes 2–3 ran as one group: its time is node 2's"]
    assert call(page, "js/details.js", "gpuTimeLines", {"gpu": None}) == []
    # a node shows in the timeline at its host time, else its GPU time
    spans = calls(
        page,
        "js/details.js",
        "timeSpan",
        (node,),
        ({"start_ns": 5, "end_ns": 9, "gpu": gpu},),
        ({"start_ns": None, "end_ns": None, "gpu": None},),
    )
    assert spans == [[20_400, 24_265], [5, 9], [None, None]]


def test_timeline_tooltips_say_what_a_bar_is(page):
    graph = {"kind": "graph", "start": 0, "end": 600, "graph_id": 3, "label": " Paris", "phase": "decode"}
    column = {"kind": "column", "op": "MUL_MAT", "fill": 0.75, "start": 500, "end": 510}
    node = {"kind": "node", "start": 100, "end": 150, "op": "ADD"}
    assert calls(page, TIMELINE, "hitTooltip", (graph,), (column,), (node,)) == [
        ["graph 3 · decode", ["600 ns", 'tokens: " Paris"', "click to zoom in"]],
        ["many short nodes, mostly MUL_MAT", ["75.0 % busy in this pixel", "zoom in to see each"]],
        ["ADD", ["50 ns"]],
    ]
    row = {
        "name": "Qcur-0",
        "op": "MUL_MAT",
        "type": "f32",
        "shape": "576×1",
        "duration_ns": 2500,
        "wait_ns": 500,
        "layer": 0,
        "graph_id": 3,
    }
    assert calls(page, TIMELINE, "rowTooltip", (row,), ({**row, "wait_ns": None, "layer": None},)) == [
        ["Qcur-0", ["MUL_MAT · f32 576×1", "2.5 µs (500 ns waiting for other threads) · layer 0 · graph 3"]],
        ["Qcur-0", ["MUL_MAT · f32 576×1", "2.5 µs · layer none · graph 3"]],
    ]


def test_the_graph_places_boxes_and_draws_links_between_them(page):
    # a leaf left of the band's edge; a computation right of it, after a 24 px gap
    assert calls(page, GRAPH, "itemPosition", ({"x": 0, "y": 0, "band": 1},), ({"x": 1, "y": 2, "band": 1},)) == [
        {"x": 20, "y": 20},
        {"x": 234, "y": 144},
    ]
    # out of a leaf: its right side to the reader's left side; between computations: bottom to top
    assert call(page, GRAPH, "linkPath", {"x": 20, "y": 20}, {"x": 234, "y": 144}, True) == {
        "d": "M188,41 C218,41 204,165 234,165",
        "labelX": 214,
        "labelY": 103,
    }
    assert call(page, GRAPH, "linkPath", {"x": 234, "y": 20}, {"x": 234, "y": 144}, False) == {
        "d": "M318,62 C318,103 318,103 318,144",
        "labelX": 321,
        "labelY": 103,
    }


def test_graph_boxes_are_colored_and_captioned_by_kind(page):
    node = {"kind": "node", "name": "Qcur-0", "op": "MUL_MAT", "type": "f32", "shape": "576×1", "duration_ns": 100}
    fills = calls(
        page,
        GRAPH,
        "itemFill",
        ({"kind": "weight"}, "time", 100, []),
        ({"kind": "kv"}, "op", 100, []),
        (node, "op", 100, ["ADD", "MUL_MAT"]),
        (node, "time", 100, []),
        ({**node, "duration_ns": -1}, "time", 100, []),
    )
    assert fills == ["#3d4a63", "#5a3f6b", "#f28e2b", "rgb(255,240,180)", "#59607a"]
    layer = {"kind": "layer", "n_nodes": 19, "n_weights": 9, "reads_kv": True, "duration_ns": 1500}
    weight = {"kind": "weight", "op": "", "shape": "576×256", "duration_ns": -1}
    captions = calls(page, GRAPH, "itemCaption", (layer,), ({**node, "duration_ns": -1},), (weight,))
    assert captions == ["19 nodes · 9 weights · KV · 1.5 µs", "MUL_MAT 576×1", "weight 576×256"]
    assert call(page, GRAPH, "itemTooltip", {**node, "duration_ns": 2500}) == [
        "Qcur-0",
        ["MUL_MAT · f32 576×1", "2.5 µs"],
    ]


def test_statistics_sort_numbers_by_value_and_names_with_numbers_in_order(page):
    rows = [{"layer": 10, "time_ns": 5}, {"layer": "none", "time_ns": 50}, {"layer": 9, "time_ns": 7}]
    by_time = call(page, "js/views/stats.js", "sortRows", rows, "time_ns", False)
    assert [row["time_ns"] for row in by_time] == [50, 7, 5]
    by_layer = call(page, "js/views/stats.js", "sortRows", rows, "layer", True)
    assert [row["layer"] for row in by_layer] == [9, 10, "none"]
    names = [{"tensor": "blk.10.x"}, {"tensor": "blk.9.x"}, {"tensor": "blk.1.x"}]
    by_name = call(page, "js/views/stats.js", "sortRows", names, "tensor", True)
    assert [row["tensor"] for row in by_name] == ["blk.1.x", "blk.9.x", "blk.10.x"]
    # clicking a heading: the same column flips; the key column sorts ascending, a number column descending
    by_time_desc = {"key": "time_ns", "ascending": False}
    clicks = calls(
        page,
        "js/views/stats.js",
        "nextSort",
        (by_time_desc, "time_ns", "op"),
        (by_time_desc, "op", "op"),
        ({"key": "op", "ascending": True}, "bytes", "op"),
    )
    assert clicks == [
        {"key": "time_ns", "ascending": True},
        {"key": "op", "ascending": True},
        {"key": "bytes", "ascending": False},
    ]


def test_the_event_log_fetches_only_the_pages_in_sight(page):
    # 22 px rows, 200 a page: the rows in a 220 px window, and two more
    assert calls(page, "js/eventlog.js", "visibleRows", (0, 220, 1000), (22 * 195 + 30, 220, 1000), (0, 220, 5)) == [
        {"first": 0, "last": 12, "pages": [0]},
        {"first": 195, "last": 207, "pages": [0, 1]},
        {"first": 0, "last": 5, "pages": [0]},
    ]
    inputs = {"op": "ADD", "name": "", "layer": "3", "from": "1.5", "to": ""}  # times typed in ms
    assert call(page, "js/eventlog.js", "filterQuery", {"file_lo": 1, "file_hi": 9}, inputs) == {
        "file_lo": 1,
        "file_hi": 9,
        "op": "ADD",
        "name": "",
        "layer": "3",
        "t0": 1500000,
        "t1": "",
    }


def test_tooltips_stay_in_the_window(page):
    window = (1000, 800)
    placed = calls(
        page,
        "js/widgets.js",
        "tooltipPlace",
        (100, 100, 200, 50, *window),
        (900, 100, 200, 50, *window),
        (100, 780, 200, 50, *window),
        (100, 100, 200, 50, *window, True),
        (0, 0, 10, 10, *window, True),
    )
    # beside the cursor; pulled left at the right edge; above it at the bottom; under it, with an arrow
    assert placed == [
        {"left": 114, "top": 114},
        {"left": 796, "top": 114},
        {"left": 114, "top": 720},
        {"left": 82, "top": 114},
        {"left": 4, "top": 14},
    ]


def test_small_pieces_of_text(page):
    places = calls(
        page,
        "js/details.js",
        "sourcePlace",
        ({"memory": "disk", "file_offset": 4096},),
        ({"memory": "buffer", "buffer": "CPU", "buffer_offset": 1024},),
        ({"memory": "buffer", "buffer": None, "buffer_offset": None},),
    )
    assert places == ["file @ 4,096", "CPU @ 1,024", "?"]
    assert calls(page, "js/views/runs.js", "speedCells", ({"a": 10, "b": 15},), ({"a": 10},)) == [
        ["10.0", "15.0", "1.50"],
        ["10.0", "—", "—"],
    ]
    assert calls(page, "js/views/runs.js", "signedNs", (-250,), (1500,)) == ["−250 ns", "+1.5 µs"]
    assert calls(page, "js/views/attention.js", "cellSize", (10,), (100,), (1000,)) == [28, 9, 6]
    assert call(page, "js/views/attention.js", "tokenLabel", 'a\n"b"') == 'a\\n\\"b\\"'
    assert calls(page, "js/api.js", "queryString", ({"a": 1, "b": "", "c": None, "e": 0},), ({},)) == ["?a=1&e=0", ""]


def test_charts_find_the_bar_or_cell_under_the_cursor_and_scale_their_axes(page):
    assert calls(page, "js/views/overview.js", "barAt", (50, 100, 10), (-1, 100, 10), (100, 100, 10)) == [5, -1, -1]
    assert calls(page, "js/views/memory.js", "kvCellAt", (50, 10, 100, 44, 4, 2), (99, 43, 100, 44, 4, 2)) == [
        {"g": 2, "l": 0},
        {"g": 3, "l": 1},
    ]
    # the occupancy axis ends above 95 % of the tensors' ends: one far-out tensor does not
    # squash the rest; or above the peak of live bytes
    ends = [*range(100, 2001, 100), 1_000_000]
    assert calls(page, "js/views/memory.js", "occupancyTop", (ends, 0), (ends, 10000), ([], 0)) == [2300, 10500, 1.15]


REPORT = {
    "runs": {"runs": [{"run_id": "r0", "name": "a.ggmlviz", "status": "complete", "graphs": 2}], "live": False},
    "overview": {"duration_ns": 1000},
    "graph/1/": {"layer": None},
    "graph/1/0": {"layer": 0},
    "events": {
        "graph_id": [0, 0, 1, 1],
        "node_index": [0, 1, 0, 1],
        "start_ns": [0, 100, 500, None],
        "duration_ns": [100, 50, 200, None],
        "wait_ns": [None, None, 10, None],
        "op": ["GET_ROWS", "MUL_MAT", "GET_ROWS", "MUL_MAT"],
        "name": ["embd", "Qcur-0", "embd", "Qcur-0"],
        "layer": [None, 0, None, 0],
        "type": ["f32"] * 4,
        "shape": ["576"] * 4,
        "weights": [[0], [1], [0], [1]],  # the weights each event's node reads
    },
    "weight_ranges": {"start": [1000, 5000], "end": [5000, 9000]},
}


def test_the_offline_report_answers_event_queries_as_the_server_does(page):
    def ask(path, query=None):
        return call(page, "js/offline.js", "offlineAnswer", REPORT, path, query or {})

    def events(query):
        return [row["event"] for row in ask("runs/r0/events", query)["rows"]]

    assert ask("runs") == REPORT["runs"] and ask("runs/r0/overview") == {"duration_ns": 1000}
    assert ask("runs/r0/graph/1", {"layer": ""}) == {"layer": None}
    assert ask("runs/r0/graph/1", {"layer": 0}) == {"layer": 0}
    assert events({"op": "MUL_MAT"}) == [1, 3]
    assert events({"name": "QCUR"}) == [1, 3]  # names match whatever their case
    assert events({"layer": "0"}) == [1, 3] and events({"layer": ""}) == [0, 1, 2, 3]
    assert events({"t0": 120, "t1": 600}) == [1, 2]  # meeting the window; an untimed node never does
    assert events({"file_lo": 5000, "file_hi": 5001}) == [1, 3]  # reading the second weight's bytes
    assert events({"file_lo": 0, "file_hi": 1000}) == []
    second_page = ask("runs/r0/events", {"offset": 1, "limit": 2})
    assert (second_page["total"], second_page["offset"]) == (4, 1)
    assert second_page["rows"] == [
        {
            "graph_id": 0,
            "node_index": 1,
            "start_ns": 100,
            "duration_ns": 50,
            "wait_ns": None,
            "op": "MUL_MAT",
            "name": "Qcur-0",
            "layer": 0,
            "type": "f32",
            "shape": "576",
            "event": 1,
        },
        {
            "graph_id": 1,
            "node_index": 0,
            "start_ns": 500,
            "duration_ns": 200,
            "wait_ns": 10,
            "op": "GET_ROWS",
            "name": "embd",
            "layer": None,
            "type": "f32",
            "shape": "576",
            "event": 2,
        },
    ]
    # a search also matches the op; a node's details are what its row holds
    assert [hit["event"] for hit in ask("runs/r0/search", {"q": "get_rows"})["hits"]] == [0, 2]
    node = ask("runs/r0/node", {"graph": 1, "index": 0})
    assert (node["event"], node["end_ns"], node["sources"]) == (2, 700, [])
    assert ask("runs/r0/event/3")["name"] == "Qcur-0"


def test_the_offline_report_says_what_it_does_not_hold(page):
    missing = [
        ("runs/r0/event/9", {}),
        ("runs/r0/graph/2", {"layer": ""}),
        ("runs/r0/occupancy/1", {}),
        ("runs/r0/attention", {}),
        ("runs/r0/node", {"graph": 5, "index": 0}),
    ]
    messages = page.evaluate(
        """async ([report, missing]) => {
             const m = await import('/js/offline.js');
             return missing.map(([path, query]) => { try { m.offlineAnswer(report, path, query); return null; }
                                                     catch (error) { return error.message; } }); }""",
        [REPORT, missing],
    )
    assert all(message and message.startswith("not in this report") for message in messages), messages


@pytest.mark.parametrize("module", module_order()[:-1])  # all but the entry, app.js, which starts the page
def test_the_report_reads_each_module_s_exports_as_the_browser_does(page, module):
    # GIVEN the names the report's inlining reads as the module's exports
    inlined = exports_of(read_module(module))
    # THEN they are the names the browser's own import of the module gives
    assert page.evaluate("async (module) => Object.keys(await import('/' + module)).sort()", module) == sorted(inlined)


ROOFLINE = "js/views/roofline.js"


def test_the_roofline_draws_the_roofs_of_the_device_and_threads_the_run_is_judged_at(page):
    def row(device, threads, what, kind, gb=None, gflop=None):
        return {"device": device, "threads": threads, "what": what, "type": kind, "gb_per_s": gb, "gflop_per_s": gflop}

    measurements = [
        row("CPU", 1, "memory_read", "F32", gb=15),
        row("CPU", 2, "memory_read", "F32", gb=30),
        row("CPU", 2, "matmul", "F32", gflop=110),
        row("CPU", 2, "matmul", "Q4_1", gflop=55),
        row("CPU", 2, "matmul", "Q6_K", gflop=135),
        row("CPU", 1, "matmul", "F32", gflop=60),
        row("CUDA0", None, "memory_read", "F32", gb=4000),
        row("CUDA0", None, "matmul", "F32", gflop=50000),
    ]
    cpu = {"measurements": measurements, "judged_at": [2], "weight_types": ["F32", "Q4_1"], "device": "CPU"}
    gpu = {**cpu, "judged_at": [], "device": "CUDA0"}
    unsaid = {"measurements": measurements, "judged_at": [1]}  # (an older summary: every type, the CPU)
    on_cpu, on_gpu, older = calls(page, ROOFLINE, "rooflineRoofs", (cpu,), (gpu,), (unsaid,))
    # the judged threads' bandwidth and the peaks of the types judging nodes, highest first
    peaks = [{"type": "F32", "gflop_per_s": 110}, {"type": "Q4_1", "gflop_per_s": 55}]
    assert on_cpu == {"device": "CPU", "threads": 2, "bandwidth": 30, "compute": peaks}
    # a GPU's roofs: no thread count
    assert on_gpu == {
        "device": "CUDA0",
        "threads": None,
        "bandwidth": 4000,
        "compute": [{"type": "F32", "gflop_per_s": 50000}],
    }
    assert older == {"device": "CPU", "threads": 1, "bandwidth": 15, "compute": [{"type": "F32", "gflop_per_s": 60}]}
