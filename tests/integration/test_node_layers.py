"""Each node's layer on the real SmolLM2 model, inferred from its graph: nodes llama.cpp
leaves without a layer in their name (the last layer's `node_N` GET_ROWS) are in the layer
they lie in, layers follow one another in execution order, and the collapsed graph view is
a chain of layer boxes."""

from __future__ import annotations

import itertools
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest

import ggml_viz
from ggml_viz.analysis.breakdowns import time_by_layer
from ggml_viz.analysis.graph_view import graph_view_of
from ggml_viz.runformat.structure_layers import structure_layers
from ggml_viz.ui.run_view import EventFilter, RunView

pytestmark = pytest.mark.model

N_LAYERS = 30
PHASES = ("prompt", "decode")


def first_graph(run, phase: str) -> int:
    return int(run.graphs.loc[run.graphs["phase"] == phase, "graph_id"].iloc[0])


def graph_nodes(run, phase: str):
    nodes = run.nodes
    return nodes[nodes["graph_id"] == first_graph(run, phase)].sort_values("node_index", ignore_index=True)


@pytest.mark.parametrize("phase", PHASES)
def test_layers_follow_one_another_each_in_one_piece(recorded_run, phase):
    # GIVEN a graph's nodes in execution order
    layers = graph_nodes(recorded_run.run, phase)["layer"].fillna(-1).astype(int).tolist()
    # THEN its layers come one after the other, each a single run of nodes, between the
    # nodes before the first layer (the token embedding) and after the last (the output head)
    assert [layer for layer, _ in itertools.groupby(layers)] == [-1, *range(N_LAYERS), -1]


@pytest.mark.parametrize("phase", PHASES)
def test_nodes_whose_names_carry_no_layer_get_the_layer_they_lie_in(recorded_run, phase):
    nodes = graph_nodes(recorded_run.run, phase)
    named = np.flatnonzero(nodes["name_layer"].notna())
    inside = nodes.iloc[named.min() : named.max() + 1]
    # GIVEN nodes inside the layers whose names say no layer (the last layer's GET_ROWS of
    # the rows to output, named node_N)
    unnamed = inside[inside["name_layer"].isna()]
    assert len(unnamed) >= 2 and set(unnamed["op"]) == {"GET_ROWS"}
    # THEN each has the layer it lies in
    assert set(unnamed["layer"]) == {N_LAYERS - 1}
    assert inside["layer"].notna().all()


@pytest.mark.parametrize("phase", PHASES)
def test_the_embedding_and_the_output_head_are_outside_layers(recorded_run, phase):
    nodes = graph_nodes(recorded_run.run, phase)
    outside = nodes[nodes["layer"].isna()]
    assert outside["name"].tolist() == ["embd", "norm", "result_norm", "result_output"]
    assert outside["node_index"].tolist()[1:] == list(range(len(nodes) - 3, len(nodes)))


def test_names_are_only_hints(recorded_run):
    # GIVEN the run's structures with every node's name hint taken away (weights keep theirs)
    run = recorded_run.run
    tensors = run.raw("tensors")
    tensors.loc[tensors["op"] != "NONE", "layer"] = -1
    # WHEN the layers are inferred again
    layers = structure_layers(run.raw("structure_nodes"), run.raw("edges"), tensors, run.raw("buffers"))
    # THEN the graph alone gives the layers the recorder stored
    assert layers.tolist() == run.raw("structure_nodes")["layer"].tolist()


@pytest.mark.parametrize("phase", PHASES)
def test_the_collapsed_graph_view_is_a_chain_of_layer_boxes(recorded_run, phase):
    run = recorded_run.run
    graph_id = first_graph(run, phase)
    # WHEN the graph view draws the graph with its layers collapsed
    view = graph_view_of(run, graph_id, None)
    boxes = [item for item in view["items"] if item["kind"] == "layer"]
    # THEN it draws one box per layer, in order, holding all of the layer's nodes, which lie
    # in one piece
    assert [box["layer"] for box in boxes] == list(range(N_LAYERS))
    nodes = graph_nodes(run, phase)
    for box in boxes:
        members = nodes.loc[nodes["layer"] == box["layer"], "node_index"]
        assert box["n_nodes"] == len(members) == members.max() - members.min() + 1
    # AND each box feeds the next one only: a chain
    box_links = {(link["from"], link["to"]) for link in view["links"] if {link["from"][0], link["to"][0]} == {"L"}}
    assert box_links == {(f"L{layer}", f"L{layer + 1}") for layer in range(N_LAYERS - 1)}
    # AND the only loose nodes are the embedding, before the chain, and the output head after it
    loose = [item["name"] for item in view["items"] if item["kind"] == "node"]
    assert loose == ["embd", "norm", "result_norm", "result_output"]


def test_an_older_run_without_stored_layers_reads_the_same_layers(recorded_run, tmp_path):
    # GIVEN the run as an earlier ggml-viz wrote it: structure_nodes without a layer column
    path = shutil.copytree(recorded_run.path, tmp_path / "older.ggmlviz")
    table = pq.read_table(path / "structure_nodes.parquet")
    pq.write_table(table.drop_columns(["layer"]), path / "structure_nodes.parquet")
    # WHEN it is opened: THEN the reader infers the layers the recorder stores
    older = ggml_viz.open(path)
    stored = recorded_run.run.raw("structure_nodes")["layer"]
    assert older.raw("structure_nodes")["layer"].tolist() == stored.tolist()


def test_the_viewer_and_the_summary_count_a_node_in_its_inferred_layer(recorded_run):
    run = recorded_run.run
    last = run.nodes[run.nodes["layer"] == N_LAYERS - 1]
    # GIVEN the viewer's event log filtered to the last layer
    view = RunView("r", recorded_run.path)
    events = view.events(EventFilter(layer=N_LAYERS - 1), 0, 500)
    # THEN it lists the layer's unnamed nodes too, and as many events as the layer holds
    assert events["total"] == len(last)
    unnamed = view.events(EventFilter(layer=N_LAYERS - 1, name="node_"), 0, 10)["rows"]
    assert unnamed and {row["op"] for row in unnamed} == {"GET_ROWS"}
    assert {row["layer"] for row in unnamed} == {N_LAYERS - 1}
    by_layer = {row["layer"]: row["count"] for row in view.statistics["by_layer"]}
    assert by_layer[N_LAYERS - 1] == len(last)
    assert by_layer["none"] == int(run.nodes["layer"].isna().sum())
    # AND the summary's time by layer counts the timed nodes of each layer
    table = time_by_layer(run).set_index("layer")
    assert table.loc["none", "count"] == int((run.nodes["layer"].isna() & run.nodes["timed"]).sum())
    # AND a node's details give its layer
    assert view.node(unnamed[0]["event"])["layer"] == N_LAYERS - 1
