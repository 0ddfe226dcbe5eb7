"""The GPU's node times on several devices, and what CUPTI could not keep: a node whose kernels
ran on two devices gets a row per device in gpu_node_times, and everything that reads a node's
GPU time sums them; records CUPTI dropped are said beside the GPU's figures (summary, viewer)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import ggml_viz
from ggml_viz.analysis.summary import summarize
from ggml_viz.capture.gpu.gpu_times import GpuTimes
from ggml_viz.capture.gpu.records import ACTIVITY_DTYPE, API_DTYPE, COMPUTE_DTYPE, KERNEL, NODE_CALL_DTYPE, GpuWindow
from ggml_viz.commands import main
from ggml_viz.runformat.schema import MANIFEST_FILE
from ggml_viz.ui.run_view import RunView

from ..gpu_runs import write_gpu_run

LOOP_SITE, THREAD, LAUNCH = 0x5000, 1, 211  # ggml-cuda's per-node call site; cudaLaunchKernel


def _kernel(start: int, end: int, correlation: int, device: int) -> tuple:
    return (start, end, 0, 0, correlation, 0, device, 7, 1, KERNEL, 0, (0, 0))


def _eager_window() -> GpuWindow:
    """One compute of three nodes, launched one by one; node 1 launches a kernel on device 0
    and one on device 1, which run side by side."""
    computes = np.zeros(1, COMPUTE_DTYPE)
    computes[0] = (1_000, 9_000, 9_500, 0, 0, THREAD, 3, 0, 0)
    reached = [(1_100, LOOP_SITE, 0, node, THREAD, 0) for node in range(3)]
    reached = [(ns + 250 * node, *rest) for node, (ns, *rest) in enumerate(reached)]  # at 1,100, 1,350, 1,600
    launches = [
        (1_150, 1_160, 1, LAUNCH, THREAD, 0),
        (1_400, 1_410, 2, LAUNCH, THREAD, 0),
        (1_450, 1_460, 3, LAUNCH, THREAD, 0),
        (1_650, 1_660, 4, LAUNCH, THREAD, 0),
    ]
    kernels = [
        _kernel(2_000, 3_000, 1, 0),
        _kernel(3_000, 4_000, 2, 0),
        _kernel(3_100, 3_600, 3, 1),
        _kernel(4_000, 4_500, 4, 0),
    ]
    return GpuWindow(
        computes,
        np.array(reached, NODE_CALL_DTYPE),
        np.array(launches, API_DTYPE),
        np.array(kernels, ACTIVITY_DTYPE),
        {1: "void k<float>(float*)"},
    )


def test_a_node_with_kernels_on_two_devices_has_a_row_per_device():
    # GIVEN the GPU timer, a graph written for the compute, and the window
    tables: dict[str, list] = {}
    times = GpuTimes(lambda table, columns: tables.setdefault(table, []).append(columns))
    times.graph_written(0, 7, 3, 1_000)
    times.add_window(_eager_window())
    times.finish()
    # THEN node 1 has a row on device 0 and one on device 1, each with its own kernel's time
    (rows,) = tables["gpu_node_times"]
    found = list(
        zip(
            *(rows[c].tolist() for c in ("node_index", "device", "gpu_ns", "start_ns", "end_ns", "kernels")),
            strict=True,
        )
    )
    assert found == [
        (0, 0, 1000, 2000, 3000, 1),
        (1, 0, 1000, 3000, 4000, 1),
        (1, 1, 500, 3100, 3600, 1),
        (2, 0, 500, 4000, 4500, 1),
    ]
    assert set(rows["graph_id"].tolist()) == {7}


@pytest.fixture(scope="module")
def run_path(tmp_path_factory):
    return write_gpu_run(tmp_path_factory.mktemp("gpu") / "gpu.ggmlviz", graphs=24, layers=2, gpu_every=8)


def _split_over_two_devices(run_path, folder, graph_id: int, node_index: int):
    """A copy of the run where one node's GPU time is in two rows, a part on device 1."""
    copy = folder / "two-devices.ggmlviz"
    shutil.copytree(run_path, copy)
    path = copy / "gpu_node_times.parquet"
    table = pq.read_table(path)
    times = table.to_pandas()
    at = times.index[(times["graph_id"] == graph_id) & (times["node_index"] == node_index)][0]
    second = times.loc[[at]].assign(device=1, gpu_ns=times.at[at, "gpu_ns"] // 4, kernels=1)
    second["start_ns"] += 100
    times.at[at, "gpu_ns"] -= int(second["gpu_ns"].iloc[0])
    times.at[at, "kernels"] -= 1
    times = pd.concat([times, second]).sort_values(["graph_id", "node_index", "device"], ignore_index=True)
    pq.write_table(pa.Table.from_pandas(times, schema=table.schema, preserve_index=False), path)
    return copy


def test_a_node_s_time_on_two_devices_is_read_as_one_node_s(run_path, tmp_path):
    # GIVEN node 3 of traced graph 8 on devices 0 and 1 (a MUL_MAT: two kernels)
    one = ggml_viz.open(run_path)
    before = one.raw("gpu_node_times").set_index(["graph_id", "node_index"]).loc[(8, 3)]
    copy = _split_over_two_devices(run_path, tmp_path, 8, 3)
    two = ggml_viz.open(copy)
    assert len(two.raw("gpu_node_times")) == len(one.raw("gpu_node_times")) + 1
    # THEN the node totals count the graph once and sum its time over the devices
    keys = ["phase", "structure_id", "node_index"]
    columns = ["timed", "time_ns", "est_ns", "group_end"]
    assert two.node_totals[keys + columns].equals(one.node_totals[keys + columns])
    assert two.graph_op_totals.sort_values(["graph_id", "op"], ignore_index=True).equals(
        one.graph_op_totals.sort_values(["graph_id", "op"], ignore_index=True)
    )
    # AND the viewer's node details and graph view give the node's time on both devices
    view = RunView("r0", copy)
    node = view.node(view.event_index(8, 3))["gpu"]
    assert node["device"] == "CUDA0, CUDA1" and node["gpu_ns"] == before["gpu_ns"] and node["kernels"] == 2
    assert node["start_ns"] == int(before["start_ns"]) - view.origin_ns
    assert view.gpu.graph_node_times(8)[3] == before["gpu_ns"]


def _with_dropped_records(run_path, folder, dropped: int):
    copy = folder / "dropped.ggmlviz"
    shutil.copytree(run_path, copy)
    manifest = json.loads((copy / MANIFEST_FILE).read_text())
    manifest["gpu"] = {**manifest["gpu"], "dropped_records": dropped, "invalid_records": 0}
    (copy / MANIFEST_FILE).write_text(json.dumps(manifest))
    return copy


DROPPED = "CUPTI dropped 1,234 records: node times of the traced graphs are incomplete"


def test_dropped_records_are_said_beside_the_gpu_s_figures(run_path, tmp_path, capsys):
    # GIVEN a run whose manifest says CUPTI dropped records in its windows
    copy = _with_dropped_records(run_path, tmp_path, 1234)
    # THEN the summary's GPU section says so, in its data, its text and its JSON
    assert summarize(ggml_viz.open(copy))["gpu"]["warnings"] == [DROPPED]
    assert main(["summary", str(copy)]) == 0
    assert DROPPED in " ".join(capsys.readouterr().out.split())
    assert main(["summary", str(copy), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["gpu"]["warnings"] == [DROPPED]
    # AND the viewer's GPU payload: where its node times come from, with the warning
    overview = RunView("r0", copy).overview
    assert overview["gpu"]["label"].endswith(DROPPED) and overview["summary"]["gpu"]["warnings"] == [DROPPED]
    # AND a run that dropped nothing says nothing
    assert summarize(ggml_viz.open(run_path))["gpu"]["warnings"] == []
