"""Where the bytes live: the memory columns the reader adds to a run's tables.

- buffers.kind: weights (usage WEIGHTS), kv_cache (an ANY buffer holding the KV cache
  tensors `cache_k_l*` / `cache_v_l*`, or one graphs copy into), compute (usage COMPUTE),
  output (a buffer named for outputs), other.
- buffers.first_seen_ns / last_seen_ns: the start of the first and the end of the last
  graph that used the buffer. Observed, not exact: ggml allocates buffers when a context
  is created and frees them with it, which the eval callback does not see.
- edges.memory: `disk` for a weight that the model file holds (file_offset/file_end: its
  bytes in the file; mmap: read straight from the file mapping, or from a copy loaded into
  a buffer), `buffer` for everything else (the source's buffer and buffer_offset).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

KV_CACHE_NAMES = r"^cache_[kv]_l\d+"


# The ops that write into a tensor that outlives the graph (their output is a view of it).
STATE_WRITES = ("CPY", "SET_ROWS")


def buffer_kinds(buffers: pd.DataFrame, tensors: pd.DataFrame) -> pd.Series:
    """The kind of each buffer (rows of `buffers`, which has buffer_id, name and usage). A
    buffer of usage ANY is the KV cache where it holds llama.cpp's caches (named) or where
    graphs write into it (a copy or a row store into a view of it: what a KV cache is, and how
    whisper.cpp fills its self- and cross-attention caches, which it does not name)."""
    named = tensors["name"].str.match(KV_CACHE_NAMES).fillna(False)
    written = tensors["op_base"].isin(STATE_WRITES)
    kv_buffers = set(tensors.loc[named | written, "buffer_id"])
    kinds = pd.Series("other", index=buffers.index, dtype="object")
    kinds[buffers["usage"] == "weights"] = "weights"
    kinds[buffers["usage"] == "compute"] = "compute"
    kinds[(buffers["usage"] == "any") & buffers["buffer_id"].isin(kv_buffers)] = "kv_cache"
    kinds[(kinds == "other") & buffers["name"].str.contains("output", case=False)] = "output"
    return kinds


def buffer_seen_times(
    graphs: pd.DataFrame, structure_nodes: pd.DataFrame, edges: pd.DataFrame, tensors: pd.DataFrame
) -> pd.DataFrame:
    """first_seen_ns / last_seen_ns per buffer_id, from the graphs whose nodes or sources use it."""
    tensor_buffers = tensors[["tensor_id", "buffer_id"]]
    used = (
        pd.concat(
            [
                structure_nodes[["structure_id", "tensor_id"]],
                edges[["structure_id", "src_tensor_id"]].rename(columns={"src_tensor_id": "tensor_id"}),
            ]
        )
        .merge(tensor_buffers, on="tensor_id")[["structure_id", "buffer_id"]]
        .drop_duplicates()
    )
    # each structure's span first (a few structures, millions of graphs), then each buffer's
    by_structure = graphs.groupby("structure_id")  # (plain min and max: named aggregations cost more)
    structure_spans = pd.DataFrame({"start_ns": by_structure["start_ns"].min(), "end_ns": by_structure["end_ns"].max()})
    spans = structure_spans.reset_index().merge(used, on="structure_id")
    by_buffer = spans.groupby("buffer_id")
    seen = pd.DataFrame({"first_seen_ns": by_buffer["start_ns"].min(), "last_seen_ns": by_buffer["end_ns"].max()})
    return seen.reset_index()


# Ops that do no work: their output is a view of their source's bytes, which they neither read nor write.
VIEW_OPS = ("NONE", "VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE")


def bytes_read(raw_edges: pd.DataFrame, structure_nodes: pd.DataFrame, tensors: pd.DataFrame) -> pd.Series:
    """The bytes of its source each edge really reads (per row of `raw_edges`): a source's
    whole bytes, except that a view reads nothing, and GET_ROWS reads of its table (source 0)
    only the rows it gathers: one per id, each the table's row size (a token embedding: the
    batch's tokens' rows, not the whole vocabulary); SET_ROWS reads its rows and ids, not the
    destination it writes them into (its source 2, the cache). A node reading experts by ids (MUL_MAT_ID,
    ADD_ID) counts every expert here: which ones a graph's tokens chose is its own, in the run's
    routing (experts.expert_reads has those bytes, graph by graph)."""
    description = tensors.set_index("tensor_id")
    node_tensor = structure_nodes.set_index(["structure_id", "node_index"])["tensor_id"]
    keys = pd.MultiIndex.from_frame(raw_edges[["structure_id", "node_index"]])
    node = description.reindex(node_tensor.reindex(keys).to_numpy())
    source = description.reindex(raw_edges["src_tensor_id"].to_numpy())
    whole = source["nbytes"].fillna(0).to_numpy(dtype="float64")
    op = node["op_base"].to_numpy(dtype=object)
    gathered = (op == "GET_ROWS") & (raw_edges["src_slot"].to_numpy() == 0)
    rows = (source["ne1"] * source["ne2"] * source["ne3"]).to_numpy(dtype="float64")
    ids = (node["ne1"] * node["ne2"] * node["ne3"]).to_numpy(dtype="float64")
    with_rows = gathered & (rows > 0)
    read = whole.copy()
    read[with_rows] = whole[with_rows] / rows[with_rows] * ids[with_rows]
    read[pd.Series(op).isin(VIEW_OPS).to_numpy()] = 0
    read[(op == "SET_ROWS") & (raw_edges["src_slot"].to_numpy() >= 2)] = 0  # its destination: written, not read
    return pd.Series(read.round().astype("int64"), index=raw_edges.index)


def edge_memory(edges: pd.DataFrame, memory_map: pd.DataFrame, model_paths: dict[int, Any]) -> pd.DataFrame:
    """Add memory, file_offset, file_end, mmap and buffer_offset to `edges` (already joined
    with the source's description: src_name, src_buffer, src_buffer_name, src_usage, ...)."""
    weights_in_file = memory_map.loc[memory_map["kind"] == "tensor", ["model_path", "name", "start", "end"]].rename(
        columns={"name": "src_name", "start": "file_offset", "end": "file_end"}
    )
    edges = edges.assign(model_path=edges["context_id"].map(model_paths).astype(object))
    weights_in_file["model_path"] = weights_in_file["model_path"].astype(object)
    edges = edges.merge(weights_in_file, on=["model_path", "src_name"], how="left")
    # a view of a weight (a reshape, a slice: ggml's view_src is the weight itself) reads the
    # weight's bytes from its offset in it
    roots = weights_in_file.rename(
        columns={"src_name": "src_view_src", "file_offset": "root_start", "file_end": "root_end"}
    )
    edges = edges.merge(roots, on=["model_path", "src_view_src"], how="left")
    view = edges["file_offset"].isna() & edges["root_start"].notna()
    start = edges["root_start"] + edges["src_view_offs"].fillna(0)
    edges.loc[view, "file_offset"] = start[view]
    edges.loc[view, "file_end"] = (start + edges["src_nbytes"]).clip(upper=edges["root_end"])[view]
    edges = edges.drop(columns=["root_start", "root_end"])
    on_disk = (edges["src_usage"] == "weights") & edges["file_offset"].notna()
    edges["memory"] = on_disk.map({True: "disk", False: "buffer"})
    edges["mmap"] = on_disk & edges["src_buffer_name"].fillna("").str.endswith("_Mapped")
    edges["file_offset"] = edges["file_offset"].where(on_disk).astype("Int64")
    edges["file_end"] = edges["file_end"].where(on_disk).astype("Int64")
    edges["buffer_offset"] = edges["src_buffer_offset"]
    return edges.drop(columns="model_path")
