"""Mixture-of-experts models: what a run's routing says, per token, per expert, and in bytes.

A MoE layer computes its experts with MUL_MAT_ID nodes (gate, up, down), which share one I32
source: the ids of the experts each token chose. The recorder reads those ids, and the weights
the router gave them, once per layer and graph, right after the layer's first MUL_MAT_ID (the
`moe_routing` table; its node_index is that node). Everything here is found by that structure,
not by tensor names, so any program's MoE graph reads the same way.

- `expert_nodes`: each node of each structure that reads experts by those ids (MUL_MAT_ID their
  matrices; ADD_ID, gpt-oss's, their biases), the weight it reads, the bytes of one expert's
  slice of it, its ids, and the node the routing of those ids is recorded at.
- `expert_reads`: per graph and such node, the experts its batch selected (the union over its
  tokens) and the bytes that reads of its weight: that many slices. Exact, where the graph's
  routing was recorded; where it was not, such a node is charged every expert (edges' bytes).
- `routing_rows`: moe_routing with each row's phase, layer, position and sequence.
- `expert_table`: per layer and expert, tokens routed, weight mass, bytes read, and an estimate of
  its share of the layer's MUL_MAT_ID time (the layer's time split by the rows each expert
  computed: one MUL_MAT_ID computes all of them, so no clock sees one expert alone).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

# The ops that read only the chosen experts' part of a weight: (the weight's source slot, its
# dimension of experts). MUL_MAT_ID(experts, input, ids) multiplies by the chosen experts'
# matrices; ADD_ID(input, biases, ids) adds the chosen experts' biases (gpt-oss).
BY_IDS = {"MUL_MAT_ID": (0, "ne2"), "ADD_ID": (1, "ne1")}
EXPERT_MATMUL = "MUL_MAT_ID"
_IDS_SLOT = 2


def expert_nodes(structure_nodes: pd.DataFrame, edges: pd.DataFrame, tensors: pd.DataFrame) -> pd.DataFrame:
    """Per node of each structure that reads experts by ids (BY_IDS): structure_id, node_index,
    op, layer, experts_tensor_id (the weight it reads the chosen experts' part of), n_expert,
    slice_bytes (one expert's bytes of it), ids_tensor_id, routed_at (the first MUL_MAT_ID of
    those ids, where the routing is recorded). `tensors` is the stored table (tensor_id, op_base,
    ne1, ne2, nbytes, ...)."""
    columns = [
        "structure_id",
        "node_index",
        "op",
        "layer",
        "experts_tensor_id",
        "n_expert",
        "slice_bytes",
        "ids_tensor_id",
        "routed_at",
    ]
    described = tensors.set_index("tensor_id")
    nodes = structure_nodes.assign(op=structure_nodes["tensor_id"].map(described["op_base"]))
    nodes = nodes[nodes["op"].isin(list(BY_IDS))]
    if nodes.empty:
        return pd.DataFrame({c: pd.Series(dtype="object" if c == "op" else "int64") for c in columns})
    keys = ["structure_id", "node_index"]
    found = nodes[[*keys, "op", "layer"]].merge(edges[[*keys, "src_slot", "src_tensor_id"]], on=keys)
    weight_slot = found["op"].map({op: slot for op, (slot, _) in BY_IDS.items()})
    weights = found[found["src_slot"] == weight_slot].rename(columns={"src_tensor_id": "experts_tensor_id"})
    ids = found[found["src_slot"] == _IDS_SLOT][[*keys, "src_tensor_id"]]
    ids = ids.rename(columns={"src_tensor_id": "ids_tensor_id"})
    found = weights.drop(columns="src_slot").merge(ids, on=keys)
    weight = described.reindex(found["experts_tensor_id"])
    dimension = found["op"].map({op: ne for op, (_, ne) in BY_IDS.items()}).to_numpy()
    found["n_expert"] = np.where(dimension == "ne2", weight["ne2"], weight["ne1"]).astype("int64")
    found["slice_bytes"] = (weight["nbytes"].to_numpy(dtype="float64") / np.maximum(found["n_expert"], 1)).round()
    found["slice_bytes"] = found["slice_bytes"].astype("int64")
    first = found[found["op"] == EXPERT_MATMUL].groupby(["structure_id", "ids_tensor_id"])["node_index"].min()
    found["routed_at"] = first.reindex(pd.MultiIndex.from_frame(found[["structure_id", "ids_tensor_id"]])).to_numpy()
    found = found.dropna(subset=["routed_at"]).astype({"routed_at": "int64"})
    return found[columns].sort_values(keys, ignore_index=True)


def expert_reads(routing: pd.DataFrame, graphs: pd.DataFrame, by_ids: pd.DataFrame) -> pd.DataFrame:
    """Per graph with routing and node reading experts by ids: graph_id, structure_id, node_index,
    experts_read (the distinct experts its batch chose) and bytes_read (that many slices of its
    weight). `routing` is the stored moe_routing table; `graphs` has graph_id and structure_id."""
    chosen = routing[["graph_id", "node_index", "expert"]].drop_duplicates()
    per_layer = chosen.groupby(["graph_id", "node_index"]).size().rename("experts_read").reset_index()
    per_layer = per_layer.rename(columns={"node_index": "routed_at"})
    per_layer = per_layer.merge(graphs[["graph_id", "structure_id"]], on="graph_id")
    reads = per_layer.merge(
        by_ids[["structure_id", "routed_at", "node_index", "slice_bytes"]], on=["structure_id", "routed_at"]
    )
    reads["bytes_read"] = reads["experts_read"].astype("int64") * reads["slice_bytes"]
    return reads[["graph_id", "structure_id", "node_index", "experts_read", "bytes_read"]].sort_values(
        ["graph_id", "node_index"], ignore_index=True
    )


def routing_rows(
    routing: pd.DataFrame, graphs: pd.DataFrame, tokens: pd.DataFrame, structure_nodes: pd.DataFrame
) -> pd.DataFrame:
    """moe_routing with, per row, its graph's phase and context, the layer of its node, and the
    token's position and sequence (`tokens`: graph_id, pos, seq_id, as the reader's tokens table,
    in batch order: a row's token_index is the token's place in its graph's batch)."""
    rows = routing.merge(graphs[["graph_id", "context_id", "structure_id", "phase"]], on="graph_id", how="left")
    layers = structure_nodes[["structure_id", "node_index", "layer"]]
    rows = rows.merge(layers, on=["structure_id", "node_index"], how="left")
    rows["layer"] = rows["layer"].where(rows["layer"] >= 0).astype("Int32")
    places = tokens[["graph_id", "pos", "seq_id"]].rename(columns={"pos": "position", "seq_id": "sequence"})
    places = places.assign(token_index=places.groupby("graph_id").cumcount().astype("int32"))
    rows = rows.merge(places, on=["graph_id", "token_index"], how="left")
    columns = [
        "graph_id",
        "context_id",
        "phase",
        "layer",
        "node_index",
        "row",
        "token_index",
        "position",
        "sequence",
        "slot",
        "expert",
        "weight",
        "n_expert",
    ]
    return rows[columns].sort_values(["graph_id", "node_index", "row", "slot"], ignore_index=True)


# expert_table's columns, in order (weight_mass and time_share are floats, the others whole numbers).
EXPERT_COLUMNS = ["layer", "expert", "n_expert", "tokens", "prompt_tokens", "decode_tokens", "weight_mass", "graphs",
                  "bytes_read", "est_time_ns", "time_share"]  # fmt: skip


def expert_table(
    rows: pd.DataFrame, reads: pd.DataFrame, by_ids: pd.DataFrame, graphs: pd.DataFrame, node_times: pd.DataFrame
) -> pd.DataFrame:
    """Per layer and expert (every expert of the layer, the never chosen too): tokens routed
    (in all, in prompts, in decode steps), weight mass, graphs that read it, bytes read, and
    est_time_ns: the layer's MUL_MAT_ID time in each timed graph split by the (token, slot)
    rows each expert computed. `rows` as routing_rows gives them; `node_times` the stored table."""
    columns = EXPERT_COLUMNS
    if rows.empty:
        return pd.DataFrame(
            {c: pd.Series(dtype="float64" if c in ("weight_mass", "time_share") else "int64") for c in columns}
        )
    rows = rows.assign(layer=rows["layer"].fillna(-1).astype("int64"))
    counts = (
        rows.groupby(["graph_id", "node_index", "layer", "expert"])
        .agg(
            tokens=("slot", "size"),
            weight_mass=("weight", "sum"),
            phase=("phase", "first"),
            n_expert=("n_expert", "first"),
        )
        .reset_index()
    )
    # bytes: each graph reads an expert's slices once (the union over its tokens), of every
    # MUL_MAT_ID of the layer
    structure = graphs.set_index("graph_id")["structure_id"]
    layer_slices = by_ids.groupby(["structure_id", "routed_at"])["slice_bytes"].sum()
    keys = pd.MultiIndex.from_arrays([counts["graph_id"].map(structure), counts["node_index"]])
    counts["bytes_read"] = layer_slices.reindex(keys).fillna(0).to_numpy(dtype="int64")
    # time: the layer's MUL_MAT_ID nodes' time in each graph, shared by rows
    timed = node_times.dropna(subset=["start_ns", "end_ns"])
    layer_nodes = by_ids.loc[by_ids["op"] == EXPERT_MATMUL, ["structure_id", "node_index", "routed_at"]]
    per_node = timed.assign(structure_id=timed["graph_id"].map(structure)).merge(
        layer_nodes, on=["structure_id", "node_index"]
    )
    per_node["time_ns"] = (per_node["end_ns"] - per_node["start_ns"]).astype("int64")
    layer_time = per_node.groupby(["graph_id", "routed_at"])["time_ns"].sum()
    rows_in_layer = counts.groupby(["graph_id", "node_index"])["tokens"].transform("sum")
    time_keys = pd.MultiIndex.from_frame(counts[["graph_id", "node_index"]])
    spent = layer_time.reindex(time_keys).to_numpy(dtype="float64")
    counts["est_time_ns"] = np.where(np.isnan(spent), 0.0, spent * counts["tokens"] / rows_in_layer)
    counts["prompt_tokens"] = counts["tokens"].where(counts["phase"] == "prompt", 0)
    counts["decode_tokens"] = counts["tokens"].where(counts["phase"] == "decode", 0)
    table = counts.groupby(["layer", "expert"]).agg(
        n_expert=("n_expert", "max"),
        tokens=("tokens", "sum"),
        prompt_tokens=("prompt_tokens", "sum"),
        decode_tokens=("decode_tokens", "sum"),
        weight_mass=("weight_mass", "sum"),
        graphs=("graph_id", "nunique"),
        bytes_read=("bytes_read", "sum"),
        est_time_ns=("est_time_ns", "sum"),
    )
    # every expert of each layer, the ones never chosen with zeros
    every = [
        (layer, expert)
        for layer, n in table.groupby(level="layer")["n_expert"].max().items()
        for expert in range(int(n))
    ]
    table = table.reindex(pd.MultiIndex.from_tuples(every, names=["layer", "expert"]))
    table["n_expert"] = table.groupby(level="layer")["n_expert"].transform("max")
    table = table.fillna(0).reset_index()
    layer_total = table.groupby("layer")["est_time_ns"].transform("sum")
    table["time_share"] = (table["est_time_ns"] / layer_total).where(layer_total > 0, 0.0)
    table["est_time_ns"] = table["est_time_ns"].round()
    return table.astype({c: "int64" for c in columns if c not in ("weight_mass", "time_share")})[columns]
