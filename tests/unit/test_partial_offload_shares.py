"""Shares of time over a partial offload's run: the CPU split's nodes are timed by the host in
every graph, the GPU's in the graphs its timer traced (one in eight here). The findings say
each phase's shares as the tables do: the GPU's traced graphs weighted by how many graphs of
their structure ran, recomputed here from the stored rows."""

from __future__ import annotations

import re

import pytest

import ggml_viz
from ggml_viz.analysis.findings import findings
from ggml_viz.runformat.synthetic import write_synthetic_run


@pytest.fixture(scope="module")
def offload(tmp_path_factory):
    path = tmp_path_factory.mktemp("offload") / "split.ggmlviz"
    return ggml_viz.open(write_synthetic_run(path, graphs=41, layers=4, gpu_every=8, cpu_layers=2))


def _decode_times(run, weighted: bool):
    """Decode time by node name from the stored rows: host node times of every graph; the GPU's
    node times of the traced graphs, each times the decode graphs per traced one where `weighted`."""
    graphs = run.graphs[run.graphs["phase"] == "decode"]
    nodes = run.nodes[run.nodes["graph_id"].isin(graphs["graph_id"])]
    timed = nodes[nodes["start_ns"].notna()]
    host = (timed["end_ns"] - timed["start_ns"]).groupby(timed["name"]).sum().astype(float)
    gpu = run.raw("gpu_node_times")
    gpu = gpu[gpu["graph_id"].isin(graphs["graph_id"])].merge(nodes[["graph_id", "node_index", "name"]])
    traced = gpu["graph_id"].nunique()
    scale = len(graphs) / traced if weighted else 1.0
    return host.add(gpu.groupby("name")["gpu_ns"].sum() * scale, fill_value=0), traced, len(graphs)


def test_the_run_is_a_partial_offload(offload):
    nodes = offload.nodes
    on_cpu = nodes["buffer_name"] == "CPU"
    assert on_cpu.any() and (~on_cpu).any()
    assert nodes.loc[on_cpu, "start_ns"].notna().all() and nodes.loc[~on_cpu, "start_ns"].isna().all()
    _, traced, ran = _decode_times(offload, weighted=True)
    assert traced < ran / 4


def test_the_findings_shares_weight_the_gpus_traced_graphs(offload):
    # GIVEN the output projection, computed on the GPU alone
    weighted, _, _ = _decode_times(offload, weighted=True)
    raw, _, _ = _decode_times(offload, weighted=False)
    output, raw_output = (times["result_output"] / times.sum() for times in (weighted, raw))
    # WHEN the findings give decode's shares by component
    said = [line for line in findings(offload) if line.startswith("By component (decode)")]
    assert len(said) == 1
    share = int(re.search(r"output (\d+)%", said[0]).group(1))
    # THEN the output's is its weighted share, not the raw sums' (which leave out the GPU's untraced graphs)
    assert share == round(output * 100) and round(raw_output * 100) != share
