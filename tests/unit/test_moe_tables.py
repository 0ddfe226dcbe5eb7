"""runformat/experts.py on a hand-made MoE layer: which nodes read experts by ids, the bytes a
graph's chosen experts cost, and the per-expert table (its time an estimate by rows), worked out
here by hand."""

from __future__ import annotations

import pandas as pd
import pytest

from ggml_viz.runformat.experts import expert_nodes, expert_reads, expert_table, routing_rows

# One structure: an ids tensor (20), a gate and a down MUL_MAT_ID over 4 experts' weights (10, 11)
# and an ADD_ID of the 4 experts' biases (12), all by those ids; node 0 makes the ids.
TENSORS = pd.DataFrame({
    "tensor_id": [10, 11, 12, 20, 30, 31, 32, 33, 34],
    "op_base": ["NONE", "NONE", "NONE", "VIEW", "VIEW", "MUL_MAT_ID", "MUL_MAT_ID", "ADD_ID", "NONE"],
    "ne1": [8, 16, 4, 2, 2, 8, 16, 16, 1],
    "ne2": [4, 4, 1, 3, 3, 2, 2, 2, 1],
    "nbytes": [400, 800, 40, 24, 24, 64, 128, 128, 4],
})  # fmt: skip
STRUCTURE_NODES = pd.DataFrame({"structure_id": 0, "node_index": [0, 1, 2, 3], "tensor_id": [30, 31, 32, 33],
                                "layer": 5})  # fmt: skip
EDGES = pd.DataFrame({
    "structure_id": 0,
    "node_index": [1, 1, 1, 2, 2, 2, 3, 3, 3],
    "src_slot": [0, 1, 2, 0, 1, 2, 0, 1, 2],
    "src_tensor_id": [10, 34, 20, 11, 34, 20, 32, 12, 20],
})  # fmt: skip
GRAPHS = pd.DataFrame({"graph_id": [0, 1], "structure_id": 0, "context_id": 0, "phase": ["prompt", "decode"]})
# graph 0: two tokens, experts (0, 1) and (1, 2); graph 1: one token, experts (3, 1)
ROUTING = pd.DataFrame({
    "graph_id": [0, 0, 0, 0, 1, 1], "node_index": 1, "row": [0, 0, 1, 1, 0, 0], "token_index": [0, 0, 1, 1, 0, 0],
    "slot": [0, 1, 0, 1, 0, 1], "expert": [0, 1, 1, 2, 3, 1], "weight": [0.75, 0.25, 0.5, 0.5, 0.9, 0.1],
    "n_expert": 4,
})  # fmt: skip
TOKENS = pd.DataFrame({"graph_id": [0, 0, 1], "pos": [0, 1, 2], "seq_id": 0})
NODE_TIMES = pd.DataFrame({"graph_id": [0, 0, 0, 1], "node_index": [1, 2, 3, 1], "start_ns": [0, 100, 300, 0],
                           "end_ns": [100, 300, 310, 40], "wait_ns": -1})  # fmt: skip


def test_the_nodes_reading_experts_and_one_expert_s_slice():
    nodes = expert_nodes(STRUCTURE_NODES, EDGES, TENSORS)
    # THEN both MUL_MAT_IDs and the ADD_ID, each with its weight, a quarter of it per expert (the
    # matrices' third dimension, the biases' second), all routed at the first MUL_MAT_ID
    assert nodes[["node_index", "op", "experts_tensor_id", "n_expert", "slice_bytes", "routed_at"]].values.tolist() == [
        [1, "MUL_MAT_ID", 10, 4, 100, 1],
        [2, "MUL_MAT_ID", 11, 4, 200, 1],
        [3, "ADD_ID", 12, 4, 10, 1],
    ]
    assert set(nodes["layer"]) == {5} and set(nodes["ids_tensor_id"]) == {20}


def test_a_graph_reads_the_union_of_its_tokens_experts():
    reads = expert_reads(ROUTING, GRAPHS, expert_nodes(STRUCTURE_NODES, EDGES, TENSORS))
    # graph 0 chose experts 0, 1, 2 (three slices of each weight); graph 1 chose 3 and 1 (two)
    by_node = reads.set_index(["graph_id", "node_index"])["bytes_read"].to_dict()
    assert by_node == {(0, 1): 300, (0, 2): 600, (0, 3): 30, (1, 1): 200, (1, 2): 400, (1, 3): 20}
    assert set(reads.loc[reads["graph_id"] == 0, "experts_read"]) == {3}


def test_the_expert_table_counts_tokens_bytes_and_splits_the_layer_s_time_by_rows():
    nodes = expert_nodes(STRUCTURE_NODES, EDGES, TENSORS)
    rows = routing_rows(ROUTING, GRAPHS, TOKENS, STRUCTURE_NODES)
    assert rows["position"].tolist() == [0, 0, 1, 1, 2, 2] and set(rows["layer"]) == {5}
    table = expert_table(rows, expert_reads(ROUTING, GRAPHS, nodes), nodes, GRAPHS, NODE_TIMES).set_index("expert")
    # every expert of the layer, the one never chosen in the prompt too
    assert table["tokens"].tolist() == [1, 3, 1, 1]
    assert table["prompt_tokens"].tolist() == [1, 2, 1, 0] and table["decode_tokens"].tolist() == [0, 1, 0, 1]
    assert table["weight_mass"].tolist() == pytest.approx([0.75, 0.85, 0.5, 0.9])
    # bytes: each graph that chose an expert read its three slices (100 + 200 + 10) once
    assert table["bytes_read"].tolist() == [310, 620, 310, 310] and table["graphs"].tolist() == [1, 2, 1, 1]
    # time: graph 0's MUL_MAT_IDs took 300 ns over 4 rows (expert 1 two of them), graph 1's 40 over
    # 2 rows; the ADD_ID is no MUL_MAT_ID and counts nothing
    assert table["est_time_ns"].tolist() == [75, 150 + 20, 75, 20]
    assert table["time_share"].sum() == pytest.approx(1.0)
