"""A CUDA run as ggml-viz recorded it on an NVIDIA H200: the spool its preload library wrote for
llama-completion (-ngl 99, greedy, 128 tokens; GPU windows, CUPTI 13.0; tests/data/h200-q4_0),
collected here into a run, read, summarized and exported by the same code as any run."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

import ggml_viz
from ggml_viz.analysis.breakdowns import time_by_op
from ggml_viz.analysis.summary import summarize

# Collecting the spool loads ggml (llama-cpp-python's).
pytestmark = pytest.mark.llama_cpp

SPOOL = Path(__file__).parents[1] / "data" / "h200-q4_0" / "completion-windows.spool.gz"


@pytest.fixture(scope="module")
def h200_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("h200") / "completion.ggmlviz"
    (run_dir / "spool").mkdir(parents=True)
    (run_dir / "spool" / "2570.spool").write_bytes(gzip.decompress(SPOOL.read_bytes()))
    return ggml_viz.open(run_dir)  # collects the spool first


def test_the_gpu_timer_traced_the_first_graphs_of_each_structure(h200_run):
    run = h200_run
    assert run.status == "complete" and len(run.graphs) == 129
    gpu = run.manifest["gpu"]
    # CUPTI found beside the program's CUDA runtime, stamping records with the recorder's clock
    assert gpu["mode"] == "windows" and gpu["clock"] == "recorder" and gpu["problem"] is None
    assert gpu["cupti"].endswith("libcupti.so.13") and gpu["windows"] == 1
    # the window: the prompt (two graphs), then a decode graph eager, captured, replayed twice
    traced = run.gpu_graphs.merge(run.graphs[["graph_id", "decode_index"]], on="graph_id")
    assert traced["graph_id"].tolist() == [0, 1, 2, 3, 4, 5]
    assert Counter(traced["mapping"]) == {"eager": 3, "capture": 1, "replay": 2}
    kernels = run.gpu_kernels[run.gpu_kernels["kind"] == "kernel"]
    assert len(kernels) == 2905 and (kernels["node_index"] >= 0).all()


def test_gpu_times_are_on_the_recorders_clock(h200_run):
    # each traced graph's work ran on the GPU after its compute call began on the host, and
    # ended before its llama call returned (the host synchronized with it)
    graphs = h200_run.gpu_graphs
    assert (graphs["start_ns"] >= graphs["host_start_ns"]).all()
    assert (graphs["end_ns"] <= graphs["host_end_ns"]).all()
    assert (graphs["busy_ns"] <= graphs["end_ns"] - graphs["start_ns"]).all()


def test_node_time_comes_from_the_gpu(h200_run):
    totals = h200_run.node_totals
    assert set(totals.loc[totals["timed"] > 0, "clock"]) == {"gpu"}
    by_op = time_by_op(h200_run)
    matmul = by_op[by_op["op"].str.startswith("MUL_MAT")]
    assert by_op.iloc[0]["op"] == "MUL_MAT" and 0.6 < matmul["share"].sum() < 0.8
    # fused groups: a node's kernels compute it and the nodes ggml-cuda fused into it
    fused = totals[(totals["clock"] == "gpu") & (totals["group_end"] > totals["node_index"])]
    assert set(fused["op"]) >= {"RMS_NORM"}


def _weighted_shares(run, key: str, values):
    """Shares of the run by `key`, computed apart from the code under test: per traced graph
    the sum of `values`, weighted by how many graphs of its phase and structure ran per traced
    one (work outside any graph, once)."""
    graphs = run.raw("graphs")[["graph_id", "phase", "structure_id"]]
    ran = graphs.groupby(["phase", "structure_id"]).size().rename("ran")
    rows = values.merge(graphs, on="graph_id", how="left")
    traced = rows.groupby(["phase", "structure_id"])["graph_id"].nunique().rename("traced")
    rows = rows.join(ran, on=["phase", "structure_id"]).join(traced, on=["phase", "structure_id"])
    weighted = rows["value"] * (rows["ran"] / rows["traced"]).fillna(1.0)
    by_key = weighted.groupby(rows[key]).sum()
    return by_key / by_key.sum(), rows["value"].groupby(rows[key]).sum() / rows["value"].sum()


def test_gpu_shares_count_each_structure_as_often_as_it_ran(h200_run):
    # GIVEN the window: two prompt graphs (a structure each, each ran once) and four of the 127
    # decode steps (one structure) traced: raw sums make the prompt half of the run's GPU time
    run = h200_run
    times = run.raw("gpu_node_times").rename(columns={"gpu_ns": "value"})
    ops = run.raw("structure_nodes").merge(run.raw("tensors")[["tensor_id", "op"]], on="tensor_id")
    times = times.merge(run.raw("graphs")[["graph_id", "structure_id"]], on="graph_id")
    times = times.merge(ops[["structure_id", "node_index", "op"]], on=["structure_id", "node_index"])
    expected, raw = _weighted_shares(run, "op", times.drop(columns="structure_id"))
    phase, raw_phase = _weighted_shares(run, "phase", times.drop(columns="structure_id"))
    assert round(raw_phase["prompt"], 2) == 0.49 and round(phase["prompt"], 2) == 0.03
    assert round(raw["ADD"], 3) == 0.017 and round(raw["RMS_NORM"], 3) == 0.097
    assert round(expected["RMS_NORM"], 3) == 0.126 and round(expected["ADD"], 3) == 0.002
    # WHEN time by op is read (fused groups under their first op's name)
    by_op = time_by_op(run)
    shares = by_op.groupby(by_op["op"].str.split(" +", regex=False).str[0])["share"].sum()
    # THEN its shares are the weighted ones, not the sums over the traced graphs
    assert shares.to_dict() == pytest.approx(expected.to_dict(), abs=1e-6)
    # AND the measured sums stay as they were: per node, and per traced graph and op
    totals = run.node_totals
    assert totals["time_ns"].sum() == times["value"].sum()
    assert run.graph_op_totals["time_ns"].sum() == times["value"].sum()
    # AND the kernel table, by kernel function: the prompt's quantized matrix multiplication
    # (mul_mat_q, its stream-k fixup, its activation quantization) is not a quarter of the run
    kernels = run.gpu_kernels
    kernels = kernels.assign(function=kernels["kernel"].where(kernels["kind"] == "kernel", kernels["kind"]))
    by_function, raw_function = _weighted_shares(
        run, "function", kernels[["graph_id", "function", "busy_ns"]].rename(columns={"busy_ns": "value"})
    )
    mmq = ["mul_mat_q", "mul_mat_q_stream_k_fixup", "quantize_mmq_q8_1"]
    assert raw_function[mmq[:2]].sum() == pytest.approx(0.233, abs=0.002)
    assert by_function[mmq].sum() == pytest.approx(0.015, abs=0.001)
    summary = summarize(run, top=100)
    table = {row["function"]: row["share"] for row in summary["gpu"]["top_kernels"]}
    assert table == pytest.approx(by_function.to_dict(), abs=1e-6)
    # AND the summary says they are estimates, and from what
    assert summary["gpu"]["estimate"] == (
        "estimated from 6 traced graphs of 129, weighted by how often each graph structure ran"
    )


def test_time_by_op_names_the_fused_groups(h200_run):
    # GIVEN nodes whose kernels computed a group of nodes (group_end past the node)
    run = h200_run
    times = run.raw("gpu_node_times")
    assert (times["group_end"] > times["node_index"]).any()
    # WHEN time by op is read
    by_op = time_by_op(run).set_index("op")
    # THEN each group is named by its ops, the views inside it left out
    assert {"RMS_NORM +MUL", "MUL_MAT +ADD", "MUL_MAT +MUL_MAT +SWIGLU", "ROPE +SET_ROWS"} <= set(by_op.index)
    # AND a node fused into another's group has no row of its own (every MUL was fused)
    assert "MUL" not in by_op.index and (by_op["time_ns"] > 0).all()
    totals = run.node_totals
    group = totals[(totals["clock"] == "gpu") & (totals["op"] == "RMS_NORM")]
    assert by_op.loc["RMS_NORM +MUL", "time_ns"] == group["est_ns"].sum()
    assert by_op.loc["RMS_NORM +MUL", "count"] == group["timed"].sum()


def test_the_summary_speaks_of_the_gpu(h200_run):
    summary = summarize(h200_run)
    gpu = summary["gpu"]
    assert gpu["graphs_traced"] == 6 and gpu["attributed_kernels"] == gpu["kernels"] == 2905
    step = gpu["decode_step"]
    assert step["steps"] == 2 and step["host_of"] == "untraced steps" and 0 < step["busy_ns"] < step["span_ns"]
    assert gpu["top_kernels"][0]["function"] == "mul_mat_vec_q"
    assert any("quantize_q8_1 runs beside mul_mat_vec_q in MUL_MAT nodes" in f for f in summary["findings"])
    assert gpu["cost"]["attach_ns"] > 0 and gpu["cost"]["compared"] == 4  # decode graphs: untraced ones ran too
    json.dumps(summary)  # plain data


def test_the_chrome_trace_has_a_gpu_track(h200_run, tmp_path):
    from ggml_viz.export.base import ExportOptions
    from ggml_viz.export.registry import exporter_for

    path = tmp_path / "trace.json"
    exporter_for("chrome-json", path).export(h200_run, path, ExportOptions())
    events = json.loads(path.read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    names = {e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
    assert any("GPU" in name for name in names)
    slices = [e for e in events if e.get("ph") == "X" and e.get("name") == "mul_mat_vec_q"]
    assert len(slices) == int((h200_run.gpu_kernels["kernel"] == "mul_mat_vec_q").sum())
