"""Where the bytes live: the memory columns the reader adds to a run's tables.

- buffers.kind: weights (usage WEIGHTS), kv_cache (an ANY buffer holding the KV cache
  tensors `cache_k_l*` / `cache_v_l*`), compute (usage COMPUTE), output (a buffer named for
  outputs), other.
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


def buffer_kinds(buffers: pd.DataFrame, tensors: pd.DataFrame) -> pd.Series:
    """The kind of each buffer (rows of `buffers`, which has buffer_id, name and usage)."""
    kv_buffers = set(tensors.loc[tensors["name"].str.match(KV_CACHE_NAMES), "buffer_id"])
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
    spans = graphs[["structure_id", "start_ns", "end_ns"]].merge(used, on="structure_id")
    return (
        spans.groupby("buffer_id").agg(first_seen_ns=("start_ns", "min"), last_seen_ns=("end_ns", "max")).reset_index()
    )


def edge_memory(edges: pd.DataFrame, memory_map: pd.DataFrame, model_paths: dict[int, Any]) -> pd.DataFrame:
    """Add memory, file_offset, file_end, mmap and buffer_offset to `edges` (already joined
    with the source's description: src_name, src_buffer, src_buffer_name, src_usage, ...)."""
    weights_in_file = memory_map.loc[memory_map["kind"] == "tensor", ["model_path", "name", "start", "end"]].rename(
        columns={"name": "src_name", "start": "file_offset", "end": "file_end"}
    )
    edges = edges.assign(model_path=edges["context_id"].map(model_paths).astype(object))
    weights_in_file["model_path"] = weights_in_file["model_path"].astype(object)
    edges = edges.merge(weights_in_file, on=["model_path", "src_name"], how="left")
    on_disk = (edges["src_usage"] == "weights") & edges["file_offset"].notna()
    edges["memory"] = on_disk.map({True: "disk", False: "buffer"})
    edges["mmap"] = on_disk & edges["src_buffer_name"].fillna("").str.endswith("_Mapped")
    edges["file_offset"] = edges["file_offset"].where(on_disk).astype("Int64")
    edges["file_end"] = edges["file_end"].where(on_disk).astype("Int64")
    edges["buffer_offset"] = edges["src_buffer_offset"]
    return edges.drop(columns="model_path")
