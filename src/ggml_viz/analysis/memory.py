"""Where the bytes live, over time: pure functions over a run's tables.

- `occupancy(run, graph_id)`: each intermediate tensor of a graph in its compute buffer:
  byte range and live interval (from the node that writes it to the last node that reads
  it, directly or through a view).
- `kv_cache_fill(run)`: per graph and layer, KV cache positions in use against capacity.
- `peak_bytes(run)`: per buffer kind, the buffers' size and the most bytes in use at once.
"""

from __future__ import annotations

from typing import Any, TypedDict

import numpy as np
import pandas as pd
import pyarrow.compute as pc

from ..runformat.reader import Run


class KvCacheExtremes(TypedDict):
    """The KV cache's layers; of the last graph, its most cells used, largest capacity and fullest
    fill; and the fullest fill of any graph (kv_cache_extremes)."""

    layers: int
    used: int
    capacity: int
    fill: float
    fullest: float


def occupancy(run: Run, graph_id: int) -> pd.DataFrame:
    """Intermediate tensors of one graph in compute buffers: buffer, byte range, live interval.

    Views are left out (they share their source's bytes); a read through a view keeps the
    viewed tensor alive. `last_node` is the index of the last node that reads it (its own
    index if nothing does); the tensor occupies [start, end) from `first_node` through
    `last_node`.
    """
    nodes = run.nodes_of(graph_id, times=False)
    written = nodes[(nodes["buffer_kind"] == "compute") & nodes["view_src_id"].isna()]
    # Each node's storage owner: itself, or for views the tensor they view (followed to the end).
    owner = dict(zip(nodes["tensor_id"], nodes["tensor_id"], strict=True))
    view_of = dict(zip(nodes["tensor_id"], nodes["view_src_id"], strict=True))
    for tensor_id in owner:
        seen = 0
        while pd.notna(view_of.get(owner[tensor_id])) and seen < 16:
            owner[tensor_id] = int(view_of[owner[tensor_id]])
            seen += 1
    structure = run.graphs.loc[run.graphs["graph_id"] == graph_id, "structure_id"]
    edges = run.raw("edges")  # only which node reads which tensor: the structure's edges, undescribed
    edges = edges[edges["structure_id"].isin(structure)]
    reads = pd.DataFrame(
        {"tensor_id": edges["src_tensor_id"].map(lambda t: owner.get(t, t)), "reader": edges["node_index"]}
    )
    last_read = reads.groupby("tensor_id")["reader"].max()
    table = pd.DataFrame(
        {
            "tensor_id": written["tensor_id"].to_numpy(),
            "name": written["name"].to_numpy(),
            "op": written["op"].to_numpy(),
            "buffer": written["buffer"].to_numpy(),
            "start": written["buffer_offset"].to_numpy(dtype=np.int64),
            "end": (written["buffer_offset"] + written["nbytes"]).to_numpy(dtype=np.int64),
            "first_node": written["node_index"].to_numpy(),
        }
    )
    table["last_node"] = np.maximum(table["tensor_id"].map(last_read).fillna(-1).astype(np.int64), table["first_node"])
    return table.sort_values(["first_node"], ignore_index=True)


def live_bytes(table: pd.DataFrame) -> pd.Series:
    """Bytes in use after each node of a graph, from an occupancy table."""
    if table.empty:
        return pd.Series(dtype=np.int64)
    steps = int(table["last_node"].max()) + 1
    delta = np.zeros(steps + 1, dtype=np.int64)
    sizes = (table["end"] - table["start"]).to_numpy()
    np.add.at(delta, table["first_node"].to_numpy(), sizes)
    np.add.at(delta, table["last_node"].to_numpy() + 1, -sizes)
    return pd.Series(np.cumsum(delta)[:steps], name="bytes")


def _kv_cache_capacity(run: Run) -> pd.Series:
    """Per layer (sorted), the KV cache's capacity: its cache tensors' largest second dimension."""
    tensors = run.tensors
    cache = tensors[tensors["name"].str.match(r"^cache_[kv]_l\d+$") & (tensors["op"] == "NONE")]
    return cache.groupby("layer")["ne1"].max()


def kv_cache_extremes(run: Run) -> KvCacheExtremes | None:
    """What the summary says of kv_cache_fill(run), from each graph's last position (Arrow,
    numpy) rather than a row per graph and layer: the layers, and of the last graph (the largest
    graph_id) the most cells used, the largest capacity and the fullest fill over its layers, and
    the fullest fill of any graph; None where kv_cache_fill is empty."""
    capacity = _kv_cache_capacity(run)
    if capacity.empty:
        return None
    graphs = run.arrow("graphs").select(["graph_id", "context_id", "token_positions"])
    graphs = graphs.filter(pc.is_valid(graphs.column("context_id")))
    lists = graphs.column("token_positions").combine_chunks()
    lengths = pc.list_value_length(lists).fill_null(0).to_numpy()
    with_tokens = lengths > 0
    if not with_tokens.any():
        return None
    positions = pc.list_flatten(lists).to_numpy(zero_copy_only=False).astype(np.int64)
    last_pos = np.maximum.reduceat(positions, (np.cumsum(lengths) - lengths)[with_tokens])
    graph_ids = graphs.column("graph_id").to_numpy()[with_tokens].astype(np.int64)
    contexts = graphs.column("context_id").to_numpy()[with_tokens].astype(np.int64)
    last = graph_ids.max()
    # cells in use: the positions seen so far in the graph's context (the last graph's: all of them)
    used_last = last_pos[contexts == contexts[graph_ids == last][0]].max() + 1
    cells = capacity.to_numpy()

    def fills(used: int) -> np.ndarray:
        return np.minimum(used, cells) / cells

    return {
        "layers": len(cells),
        "used": int(np.minimum(used_last, cells).max()),
        "capacity": int(cells.max()),
        "fill": float(fills(used_last).max()),
        "fullest": float(fills(last_pos.max() + 1).max()),
    }


def kv_cache_fill(run: Run) -> pd.DataFrame:
    """Per graph and layer: KV cache cells in use (positions seen so far in the context)
    against the cache's capacity (its tensors' second dimension)."""
    capacity = _kv_cache_capacity(run)
    if capacity.empty:
        return pd.DataFrame(columns=["graph_id", "layer", "used", "capacity", "fill"])
    tokens = run.tokens.merge(run.graphs[["graph_id", "context_id"]], on="graph_id")
    per_graph = tokens.groupby(["context_id", "graph_id"])["pos"].max().reset_index()
    per_graph["used"] = per_graph.groupby("context_id")["pos"].cummax() + 1
    rows = per_graph[["graph_id", "used"]].merge(
        pd.DataFrame({"layer": capacity.index.astype(int), "capacity": capacity.to_numpy()}), how="cross"
    )
    rows["used"] = np.minimum(rows["used"], rows["capacity"])
    rows["fill"] = rows["used"] / rows["capacity"]
    return rows.sort_values(["graph_id", "layer"], ignore_index=True)


def peak_bytes(run: Run) -> pd.DataFrame:
    """Per buffer kind: total buffer size, and the most bytes in use at once (compute: live
    intermediates of the busiest graph; KV cache: the fullest fill; weights: the buffer)."""
    buffers = run.buffers
    sizes = buffers.groupby("kind")["size"].sum()
    peaks: dict[str, Any] = {"weights": sizes.get("weights", 0)}
    compute_peak = 0
    for structure_graph in run.graphs.groupby("structure_id")["graph_id"].first():
        live = live_bytes(occupancy(run, int(structure_graph)))
        compute_peak = max(compute_peak, int(live.max()) if len(live) else 0)
    peaks["compute"] = compute_peak
    kv = kv_cache_extremes(run) if "kv_cache" in sizes else None
    if kv is not None:
        peaks["kv_cache"] = int(sizes["kv_cache"] * kv["fullest"])
    rows = [
        {"kind": kind, "buffer_bytes": int(size), "peak_bytes": int(peaks.get(kind, size))}
        for kind, size in sizes.items()
    ]
    table = pd.DataFrame(rows, columns=["kind", "buffer_bytes", "peak_bytes"])
    return table.sort_values("buffer_bytes", ascending=False, ignore_index=True)


def bytes_in_use(run: Run) -> pd.DataFrame:
    """Per graph and buffer kind, bytes in use while it ran: weights (their buffers), the KV
    cache (its buffers' share of cells in use) and compute (the peak of live intermediates of
    the graph's structure). Columns: graph_id, start_ns, kind, bytes."""
    graphs = run.graphs[["graph_id", "structure_id", "start_ns"]]
    sizes = run.buffers.groupby("kind")["size"].sum()
    rows = []
    if "weights" in sizes:
        rows.append(graphs.assign(kind="weights", bytes=int(sizes["weights"])))
    fill = kv_cache_fill(run)
    if not fill.empty and "kv_cache" in sizes:
        per_graph = fill.groupby("graph_id")["fill"].max()
        kv = graphs.assign(kind="kv_cache", bytes=(graphs["graph_id"].map(per_graph).fillna(0) * sizes["kv_cache"]))
        rows.append(kv.astype({"bytes": np.int64}))
    peaks = {}
    for structure_id, graph_id in run.graphs.groupby("structure_id")["graph_id"].first().items():
        live = live_bytes(occupancy(run, int(graph_id)))
        peaks[structure_id] = int(live.max()) if len(live) else 0
    rows.append(graphs.assign(kind="compute", bytes=graphs["structure_id"].map(peaks).fillna(0).astype(np.int64)))
    table = (
        pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=["graph_id", "start_ns", "kind", "bytes"])
    )
    return table[["graph_id", "start_ns", "kind", "bytes"]].sort_values(["start_ns", "kind"], ignore_index=True)


def weight_reads_by_name(run: Run) -> pd.DataFrame:
    """Per weight, by name: how many node reads of it the run made (`reads`) and the time of
    the timed nodes that read it (`read_ns`), from the node totals (not the events)."""
    tensors = run.raw("tensors")
    weights = tensors.loc[tensors["op"] == "NONE"].set_index("tensor_id")["name"]
    edges = run.raw("edges")
    edges = edges[edges["src_tensor_id"].isin(weights.index)]
    totals = run.node_totals.groupby(["structure_id", "node_index"])[["graphs", "time_ns"]].sum()
    per_edge = edges.join(totals, on=["structure_id", "node_index"]).rename(
        columns={"graphs": "reads", "time_ns": "read_ns"}
    )
    per_edge = per_edge.fillna({"reads": 0, "read_ns": 0}).assign(
        name=weights.reindex(edges["src_tensor_id"]).to_numpy()
    )
    return per_edge.groupby("name")[["reads", "read_ns"]].sum()


_INPUT_FLAG = 1  # GGML_TENSOR_FLAG_INPUT: the program sets it before each compute


def gathered_rows(run: Run) -> pd.DataFrame:
    """The rows of model-file tables read in part, one row per (table, row) with how many times
    it was read, its file bytes [start, end) and the table's name: the rows GET_ROWS nodes
    gathered (token_rows), and the experts' slices of a mixture's weights that the tokens chose
    (expert_slices: a slice is a row of the experts' weight)."""
    rows = [token_rows(run), expert_slices(run)]
    rows = [frame for frame in rows if len(frame)]
    return pd.concat(rows, ignore_index=True) if rows else token_rows(run)


def expert_slices(run: Run) -> pd.DataFrame:
    """Of each weight read by experts' ids (MUL_MAT_ID, ADD_ID), the slices of the experts the
    graphs' tokens chose: per (weight, expert), how many node reads of it, and its file bytes."""
    columns = ["name", "row", "start", "end", "reads"]
    by_ids = run.expert_nodes
    routing = run.raw("moe_routing")
    memory_map = run.memory_map
    in_file = memory_map[memory_map["kind"] == "tensor"].drop_duplicates("name").set_index("name")
    if by_ids.empty or routing.empty or in_file.empty:
        return pd.DataFrame(columns=columns)
    chosen = routing[["graph_id", "node_index", "expert"]].drop_duplicates().rename(columns={"node_index": "routed_at"})
    chosen = chosen.merge(run.graphs[["graph_id", "structure_id"]], on="graph_id")
    names = run.raw("tensors").set_index("tensor_id")["name"]
    nodes = by_ids.assign(name=names.reindex(by_ids["experts_tensor_id"]).to_numpy())
    reads = chosen.merge(
        nodes[["structure_id", "routed_at", "name", "slice_bytes", "n_expert"]], on=["structure_id", "routed_at"]
    )
    reads = reads[reads["name"].isin(in_file.index) & (reads["expert"] >= 0) & (reads["expert"] < reads["n_expert"])]
    slices = reads.groupby(["name", "expert", "slice_bytes"]).size().rename("reads").reset_index()
    start = in_file["start"].reindex(slices["name"]).to_numpy() + slices["expert"].to_numpy() * slices["slice_bytes"]
    slices = slices.assign(
        row=slices["expert"], start=start.astype(np.int64), end=(start + slices["slice_bytes"]).astype(np.int64)
    )
    return slices[columns]


def token_rows(run: Run) -> pd.DataFrame:
    """The rows of model-file tables that GET_ROWS nodes gathered, one row per (table, row)
    with how many times it was gathered, its file bytes [start, end) and the table's name.

    Only where the rows are known: a GET_ROWS whose ids are a graph input holding one id per
    token of the graph's batch (how llama.cpp looks up token embeddings, in every model it
    builds) gathers the batch's token ids. Other lookups (ids computed in the graph, a
    program without tokens) are left out: which rows they read is not recorded."""
    columns = ["name", "row", "start", "end", "reads"]
    tensors = run.raw("tensors").set_index("tensor_id")
    memory_map = run.memory_map
    in_file = memory_map[memory_map["kind"] == "tensor"].drop_duplicates("name").set_index("name")
    edges = run.raw("edges")
    nodes = run.raw("structure_nodes")[["structure_id", "node_index", "tensor_id"]]
    lookups = nodes[tensors["op_base"].reindex(nodes["tensor_id"]).to_numpy() == "GET_ROWS"]
    if lookups.empty or in_file.empty:
        return pd.DataFrame(columns=columns)
    sources = edges.pivot_table(
        index=["structure_id", "node_index"], columns="src_slot", values="src_tensor_id", aggfunc="first"
    )
    lookups = lookups.join(sources, on=["structure_id", "node_index"])
    if 0 not in lookups or 1 not in lookups:
        return pd.DataFrame(columns=columns)
    table = tensors.reindex(lookups[0].to_numpy())
    ids = tensors.reindex(lookups[1].to_numpy())
    n_ids = (ids["ne0"] * ids["ne1"] * ids["ne2"] * ids["ne3"]).to_numpy()
    known = (
        table["name"].isin(in_file.index).to_numpy()
        & ((ids["flags"].fillna(0).astype(int) & _INPUT_FLAG) != 0).to_numpy()
        & (ids["type"] == "i32").to_numpy()
    )
    lookups = lookups.assign(table=table["name"].to_numpy(), n_ids=n_ids)[known]
    graphs = run.graphs[["graph_id", "structure_id", "n_tokens"]]
    graphs = graphs.merge(lookups[["structure_id", "table", "n_ids"]], on="structure_id")
    graphs = graphs[graphs["n_tokens"] == graphs["n_ids"]]  # one id per token of the batch
    tokens = run.tokens[["graph_id", "token_id"]].merge(graphs[["graph_id", "table"]], on="graph_id")
    if tokens.empty:
        return pd.DataFrame(columns=columns)
    rows = tokens.groupby(["table", "token_id"]).size().rename("reads").reset_index()
    rows = rows.rename(columns={"table": "name", "token_id": "row"})
    described = tensors.drop_duplicates("name").set_index("name").reindex(rows["name"])
    n_rows = (described["ne1"] * described["ne2"] * described["ne3"]).to_numpy()
    row_bytes = described["nbytes"].to_numpy() // np.maximum(n_rows, 1)
    start = in_file["start"].reindex(rows["name"]).to_numpy() + rows["row"].to_numpy() * row_bytes
    rows = rows.assign(start=start.astype(np.int64), end=(start + row_bytes).astype(np.int64))
    inside = (rows["row"] >= 0) & (rows["row"] < n_rows)  # an id past the table would be no row of it
    return rows.loc[inside, columns].reset_index(drop=True)
