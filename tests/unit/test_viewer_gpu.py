"""The viewer's GPU side (ui/gpu.py, ui/views/timeline_gpu.py) on synthetic GPU runs: the timeline's GPU lane draws
each kernel of a window at its GPU times with its node's op and event, sums them per pixel
column when there are many, and reads only the blocks of kernels a window meets; the
overview's steps and top kernels, the statistics' clocks, a node's GPU time and the graph
view's. A run without GPU tables answers as before."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from ggml_viz.runformat.synthetic import SyntheticRecording, write_synthetic_run
from ggml_viz.ui import gpu
from ggml_viz.ui.run_view import RunView
from ggml_viz.ui.views import timeline_gpu

from ..gpu_runs import write_gpu_run

TRACED = [0, 8, 16, 24, 32]  # gpu_every=8 of 40 graphs


@pytest.fixture(scope="module")
def run_path(tmp_path_factory):
    return write_gpu_run(tmp_path_factory.mktemp("gpu") / "gpu.ggmlviz", graphs=40, layers=4, gpu_every=8)


@pytest.fixture
def view(run_path):
    return RunView("r0", run_path)


def gpu_span(view: RunView, graph_id: int) -> tuple[int, int]:
    """A traced graph's span on the GPU, relative to the run's first graph."""
    row = view.run.gpu_graphs.set_index("graph_id").loc[graph_id]
    return int(row["start_ns"]) - view.origin_ns, int(row["end_ns"]) - view.origin_ns


def graph_window(view: RunView, graph_id: int) -> tuple[int, int]:
    """The host's span of a graph: the traced graph's copies and kernels all fall inside."""
    row = view.graphs.set_index("graph_id").loc[graph_id]
    return int(row["start_ns"]) - view.origin_ns, int(row["end_ns"]) - view.origin_ns


def test_a_zoomed_window_draws_each_kernel_at_its_gpu_times_with_its_node(view):
    # GIVEN the window of traced graph 8
    t0, t1 = graph_window(view, 8)
    # WHEN the timeline answers it
    lane = view.timeline(t0, t1, 1200)["lanes"][0]
    # THEN under the context's lane, one GPU lane for CUDA0, with every kernel of the graph as its own bar
    assert [(g["device"], g["device_name"]) for g in lane["gpu"]] == [(0, "CUDA0")]
    gpu_lane = lane["gpu"][0]
    assert "CUDA0" in gpu_lane["label"] and "CUPTI" in gpu_lane["label"]
    kernels = view.run.gpu_kernels
    kernels = kernels[kernels["graph_id"] == 8].sort_values("start_ns", kind="stable")
    bars = gpu_lane["bars"]
    assert bars["start"] == (kernels["start_ns"] - view.origin_ns).tolist()
    assert bars["end"] == (kernels["end_ns"] - view.origin_ns).tolist()
    assert bars["busy"] == kernels["busy_ns"].tolist()
    assert [gpu_lane["kernels"][i] for i in bars["kernel"]] == kernels["kernel"].tolist()
    assert gpu_lane["columns"]["px"] == []
    # each kernel carries its node's op and event; a copy, a memset and an unattributed kernel their own codes
    nodes = view.run.nodes_of(8).set_index("node_index")
    ops = view.timeline(t0, t1, 1200)["ops"]
    for op, event, node in zip(bars["op"], bars["event"], kernels["node_index"].tolist(), strict=True):
        if node >= 0:
            assert (ops[op], event) == (nodes.loc[node, "op"], view.event_index(8, node))
    others = [
        (op, event)
        for op, event, node in zip(bars["op"], bars["event"], kernels["node_index"], strict=True)
        if node < 0
    ]
    assert others == [(gpu.MEMCPY, -1), (gpu.MEMSET, -1), (gpu.UNATTRIBUTED, -1)]  # EXTRAS, in time order
    assert bars["bytes"][:3] == [4096, 512, 0]
    # AND the traced graphs met by the window are marked, the others not
    start, end = gpu_span(view, 8)
    assert gpu_lane["traced"] == {"start": [start], "end": [end], "graph_id": [8]}


def test_a_window_between_traced_graphs_has_an_empty_gpu_lane(view):
    t0, t1 = graph_window(view, 3)
    (gpu_lane,) = view.timeline(t0, t1, 800)["lanes"][0]["gpu"]
    assert gpu_lane["bars"]["start"] == [] and gpu_lane["columns"]["px"] == [] and gpu_lane["traced"]["graph_id"] == []


def busy_in(lane, t0: int, t1: int, width: int) -> float:
    """The busy time a GPU lane's answer holds: its bars' and its columns' (fill of each pixel)."""
    return sum(lane["bars"]["busy"]) + sum(lane["columns"]["fill"]) * (t1 - t0) / width


def test_many_kernels_are_summed_per_pixel_column_and_keep_the_device_busy_time(view, monkeypatch):
    total = int(view.run.gpu_kernels["busy_ns"].sum())
    whole = (0, view.duration_ns)
    # every kernel of the run, drawn one by one in a whole-run window
    (each,) = view.timeline(*whole, 1000)["lanes"][0]["gpu"]
    assert len(each["bars"]["start"]) == len(view.run.gpu_kernels) and busy_in(each, *whole, 1000) == total
    # WHEN there are more kernels than a window draws singly: the widest as bars, the rest in columns
    monkeypatch.setattr(timeline_gpu, "DETAIL_LIMIT", 50)
    t0, t1 = graph_window(view, 16)
    (detail,) = view.timeline(t0, t1, 1000)["lanes"][0]["gpu"]
    assert 0 < len(detail["bars"]["start"]) <= 50 and detail["columns"]["px"]
    widths = np.subtract(detail["bars"]["end"], detail["bars"]["start"])
    assert widths.min() >= 2 * (t1 - t0) / 1000  # each bar at least 2 px wide
    in_graph = int(view.run.gpu_kernels.query("graph_id == 16")["busy_ns"].sum())
    assert busy_in(detail, t0, t1, 1000) == pytest.approx(in_graph, abs=1000)
    # WHEN a window holds more kernels than a request reads: from the pieces, none read
    monkeypatch.setattr(timeline_gpu, "WINDOW_KERNEL_LIMIT", 100)
    read = []
    monkeypatch.setattr(gpu.GpuRun, "_block", lambda self, index: read.append(index))
    (wide,) = view.timeline(*whole, 1000)["lanes"][0]["gpu"]
    assert wide["bars"]["start"] == [] and read == []
    assert busy_in(wide, *whole, 1000) == pytest.approx(total, rel=1e-3)  # the whole run: its time bins
    t0, t1 = gpu_span(view, 0)[0], gpu_span(view, 8)[1]  # spread pieces: narrower than the bins
    (spread,) = view.timeline(t0, t1, 1000)["lanes"][0]["gpu"]
    in_window = int(view.run.gpu_kernels.query("graph_id in [0, 8]")["busy_ns"].sum())
    assert busy_in(spread, t0, t1, 1000) == pytest.approx(in_window, rel=0.02)
    ops = view.timeline(t0, t1, 1000)["ops"]
    assert ops[max(set(spread["columns"]["op"]), key=spread["columns"]["op"].count)] == "MUL_MAT"


def test_a_window_reads_only_the_blocks_of_kernels_it_meets(run_path, tmp_path, monkeypatch):
    # GIVEN the run's kernels stored in row groups of 50 rows (a long run's are 131,072)
    import shutil

    copy = tmp_path / "blocks.ggmlviz"
    shutil.copytree(run_path, copy)
    table = pq.read_table(copy / "gpu_kernels.parquet")
    pq.write_table(table, copy / "gpu_kernels.parquet", row_group_size=50)
    view = RunView("r0", copy)
    n_blocks = len(view.gpu._source[2])
    assert n_blocks == -(-len(table) // 50)
    read: list[int] = []
    original = gpu.GpuRun._read_block
    monkeypatch.setattr(gpu.GpuRun, "_read_block", lambda self, index: read.append(index) or original(self, index))
    # WHEN the timeline answers a window of one traced graph
    t0, t1 = graph_window(view, 16)
    first = view.timeline(t0, t1, 1000)["lanes"][0]["gpu"][0]
    # THEN it read the blocks holding that graph's kernels, no other
    spans = view.gpu._source[2]
    assert read and all(spans[i][1] >= t0 and spans[i][0] <= t1 for i in read) and len(read) <= 4
    assert "_scan" not in vars(view.gpu)  # nor the pass over every block that wide windows and the overview need
    # AND the same window again, panned a little, reads nothing more
    before = list(read)
    again = view.timeline(t0 + 1000, t1 + 1000, 1000)["lanes"][0]["gpu"][0]
    assert read == before and len(again["bars"]["start"]) == len(first["bars"]["start"])


def test_the_overview_shows_a_step_s_gpu_busy_time_against_the_host_s_and_the_top_kernels(view):
    overview = view.overview["gpu"]
    assert overview["label"] == (
        "GPU time (CUDA0, CUPTI kernel records, 5 of 40 graphs traced), times over the run estimated from 5 traced "
        "graphs of 40, weighted by how often each graph structure ran"
    )
    assert (overview["devices"], overview["traced_graphs"], overview["graphs"]) == (["CUDA0"], 5, 40)
    graphs = view.run.gpu_graphs
    decode = graphs[graphs["phase"] == "decode"]
    step = overview["steps"][0]  # the decode step first
    assert (step["phase"], step["device"], step["graphs"]) == ("decode", "CUDA0", 4)
    assert step["host_ns"] == int(decode["host_ns"].median()) and step["busy_ns"] == int(decode["busy_ns"].median())
    assert step["busy_share"] == pytest.approx((decode["busy_ns"] / decode["host_ns"]).median())
    # the top kernels over the run: the prompt graph (1 of 1 traced) once, each traced decode step
    # for the 39 / 4 decode steps it stands for
    kernels = view.run.gpu_kernels
    weight = kernels["phase"].map({"prompt": 1.0, "decode": 39 / 4})
    by_kernel = (kernels["busy_ns"] * weight).groupby(kernels["kernel"]).sum().sort_values(ascending=False)
    top = overview["top_kernels"]
    assert [k["kernel"] for k in top[:2]] == by_kernel.index[:2].tolist() == ["mul_mat_vec_q", "quantize_q8_1"]
    assert top[0]["time_ns"] == int(by_kernel.iloc[0])
    assert top[0]["share"] == pytest.approx(by_kernel.iloc[0] / by_kernel.sum())
    first = kernels[kernels["kernel"] == "mul_mat_vec_q"]  # count and mean: as traced
    durations = first["end_ns"] - first["start_ns"]
    assert top[0]["count"] == len(first) and top[0]["mean_ns"] == pytest.approx(durations.mean())
    assert {k["kernel"]: k["kind"] for k in top}["HtoD"] == "memcpy"
    n_traced = len(TRACED)
    assert overview["unattributed"] == n_traced and overview["copies"] == 2 * n_traced
    assert overview["kernels"] == int((kernels["kind"] == "kernel").sum())


def test_the_statistics_say_where_node_times_come_from(view):
    stats = view.statistics
    timed = int(view.run.node_totals["timed"].sum())
    assert stats["time_sources"] == [
        {"clock": "gpu", "label": view.gpu.label, "timed": timed, "time_ns": stats["total_time_ns"]}
    ]
    assert {row["clock"] for table in ("by_op", "by_layer", "by_tensor") for row in stats[table]} == {"gpu"}


def test_a_node_s_details_carry_its_gpu_time_and_the_graph_view_its_nodes(view):
    times = view.run.raw("gpu_node_times").set_index(["graph_id", "node_index"])
    node = view.node(view.event_index(8, 3))
    row = times.loc[(8, 3)]
    assert node["start_ns"] is None  # no host time on a GPU
    start, end = int(row["start_ns"]) - view.origin_ns, int(row["end_ns"]) - view.origin_ns
    assert node["gpu"] == {
        "device": "CUDA0",
        "node_index": 3,
        "group_end": 3,
        "start_ns": start,
        "end_ns": end,
        "gpu_ns": int(row["gpu_ns"]),
        "kernels": 2,
    }
    assert view.node(view.event_index(9, 3))["gpu"] is None  # a graph the GPU timer did not trace
    # the graph view times a traced graph's nodes by the GPU, an untraced one's not at all
    opened = {item["node_index"]: item["duration_ns"] for item in view.graph(8, 0)["items"] if item["kind"] == "node"}
    assert opened and all(duration == int(times.loc[(8, node), "gpu_ns"]) for node, duration in opened.items())
    assert {item["duration_ns"] for item in view.graph(9, 0)["items"] if item["kind"] == "node"} == {-1}


def test_a_fused_group_s_time_is_its_first_node_s(view, monkeypatch):
    # GIVEN node 4 computed by node 3's kernels (ggml-cuda fused them: group_end 4, no row of its own)
    times = view.run.raw("gpu_node_times")
    times.loc[(times["graph_id"] == 8) & (times["node_index"] == 3), "group_end"] = 4
    times = times[(times["graph_id"] != 8) | (times["node_index"] != 4)]
    fused = ds.dataset(pa.Table.from_pandas(times, preserve_index=False))
    monkeypatch.setattr(view.run, "dataset", lambda table: fused)
    # THEN node 4's details give the group's time, carried by node 3
    node = view.node(view.event_index(8, 4))["gpu"]
    carried = int(times.set_index(["graph_id", "node_index"]).loc[(8, 3), "gpu_ns"])
    assert (node["node_index"], node["group_end"], node["gpu_ns"]) == (3, 4, carried)


def test_a_run_without_gpu_tables_answers_as_before(tmp_path):
    view = RunView("r0", write_synthetic_run(tmp_path / "cpu.ggmlviz", graphs=6, layers=2))
    assert view.gpu is None and view.overview["gpu"] is None
    assert all(lane["gpu"] == [] for lane in view.timeline(0, view.duration_ns, 500)["lanes"])
    assert view.node(5)["gpu"] is None
    stats = view.statistics
    assert [source["clock"] for source in stats["time_sources"]] == ["host"]
    assert stats["time_sources"][0]["label"] == "timing inline (host clock, each graph run whole)"
    assert {row["clock"] for row in stats["by_op"]} == {"host"}


def test_a_gpu_run_being_recorded_is_read_in_slices(tmp_path, monkeypatch):
    # GIVEN a GPU run still recording (its kernels in a stream, not Parquet), read in blocks of 100
    monkeypatch.setattr(gpu, "BLOCK_ROWS", 100)
    recording = SyntheticRecording(tmp_path / "live.ggmlviz", layers=2, seed=5, gpu_every=4)
    try:
        recording.append_graphs(20)
        recording.writer.flush_graphs()
        view = RunView("r0", recording.run_dir)
        # THEN its GPU lane draws every kernel of the traced graphs written so far
        assert len(view.gpu._source[2]) == 3
        (lane,) = view.timeline(0, view.duration_ns, 500)["lanes"][0]["gpu"]
        assert len(lane["bars"]["start"]) == len(view.run.gpu_kernels) > 0
        assert view.overview["gpu"]["traced_graphs"] == 5
    finally:
        recording.close()


def test_pixel_columns_take_the_busiest_op_and_sum_the_column():
    # two ops in column 3 (op 2 the busier), a memcpy alone in column 7, nothing busy in column 9
    columns = timeline_gpu.pixel_columns(
        np.array([3, 3, 3, 7, 9]),
        np.array([1, 2, 2, gpu.MEMCPY, 0]),
        np.array([10.0, 8.0, 8.0, 50.0, 0.0]),
        ns_per_px=100,
    )
    assert columns == {"px": [3, 7], "op": [2, gpu.MEMCPY], "fill": [0.26, 0.5]}
    # a span spread over the columns it covers, the part of its time inside the window
    starts, ends, busy = np.array([50, 500]), np.array([250, 2000]), np.array([200, 1500])
    column, index, busy = timeline_gpu.spread(starts, ends, busy, 0, 1000, 100, 10)
    assert column.tolist() == [0, 1, 2, 5, 6, 7, 8, 9] and index.tolist() == [0, 0, 0, 1, 1, 1, 1, 1]
    assert busy.sum() == pytest.approx(200 + 500)
