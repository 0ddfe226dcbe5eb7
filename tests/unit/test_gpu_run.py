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
    decode = time_by_op(h200_run)
    assert decode.iloc[0]["op"] == "MUL_MAT" and 0.6 < decode.iloc[0]["share"] < 0.8
    # fused groups: a node's kernels compute it and the nodes ggml-cuda fused into it
    fused = totals[(totals["clock"] == "gpu") & (totals["group_end"] > totals["node_index"])]
    assert set(fused["op"]) >= {"RMS_NORM"}


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
