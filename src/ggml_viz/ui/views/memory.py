"""The memory and disk views (GET .../memory, .../occupancy/{id}): the model file by byte offset and how
the run read it, the runtime buffers and the KV cache's fill, and a graph's compute-buffer occupancy."""

from __future__ import annotations

import numpy as np

from ...analysis.memory import gathered_rows, kv_cache_fill, live_bytes, occupancy, weight_reads_by_name
from ..context import RunContext
from ..payloads import BufferTrack, DiskFile, DiskTrack, KvFill, OccupancyPayload


def disk_track(context: RunContext) -> DiskTrack:
    """The model file by byte offset: every region, and per weight how often and how
    long the run's nodes read it."""
    memory_map = context.run.memory_map
    if memory_map.empty:
        return {"files": []}
    reads = weight_reads_by_name(context.run)
    rows = gathered_rows(context.run)  # the exact rows lookups read, and the experts' slices chosen
    rows_per_table = rows.groupby("name").agg(rows=("row", "size"), row_bytes=("end", "sum"))
    rows_per_table["row_bytes"] -= rows.groupby("name")["start"].sum()
    files: list[DiskFile] = []
    for model_path, regions in memory_map.groupby("model_path", sort=False):
        regions = regions.sort_values("start")
        per_name = reads.reindex(regions["name"]).fillna(0)
        gathered = rows_per_table.reindex(regions["name"].where(regions["kind"] == "tensor")).fillna(-1)
        file_rows = rows[rows["name"].isin(regions["name"])].sort_values("start")
        files.append(
            {
                "path": model_path,
                "size": int(regions["end"].max()),
                "regions": {
                    "kind": regions["kind"].tolist(),
                    "name": regions["name"].tolist(),
                    "start": regions["start"].tolist(),
                    "end": regions["end"].tolist(),
                    "layer": regions["layer"].tolist(),
                    "type": regions["type"].tolist(),
                    "category": regions["category"].tolist(),
                    "reads": per_name["reads"].astype(np.int64).tolist(),
                    "read_ns": per_name["read_ns"].astype(np.int64).tolist(),
                    # a table read by row lookups: how many of its rows, and their bytes (-1: not one)
                    "rows_read": gathered["rows"].astype(np.int64).tolist(),
                    "row_bytes_read": gathered["row_bytes"].astype(np.int64).tolist(),
                },
                # each row a lookup read, by its exact file bytes
                "rows": {
                    "start": file_rows["start"].astype(np.int64).tolist(),
                    "end": file_rows["end"].astype(np.int64).tolist(),
                    "reads": file_rows["reads"].astype(np.int64).tolist(),
                },
            }
        )
    return {"files": files}


def buffer_track(context: RunContext) -> BufferTrack:
    """Runtime buffers: each buffer, the KV cache's fill per layer over the graphs."""
    buffers = context.run.buffers
    fill = kv_cache_fill(context.run)
    kv: KvFill = {"layers": [], "graph_id": [], "used": []}
    if not fill.empty:
        pivot = fill.pivot_table(index="graph_id", columns="layer", values="used", aggfunc="max")
        kv = {
            "layers": [int(layer) for layer in pivot.columns],
            "capacity": int(fill["capacity"].max()),
            "graph_id": [int(g) for g in pivot.index],
            "used": pivot.to_numpy().astype(int).tolist(),
        }
    return {
        "buffers": [
            {
                "buffer": int(row.buffer),
                "name": row.name,
                "kind": row.kind,
                "usage": row.usage,
                "size": int(row.size),
                "context_id": int(row.context_id),
            }
            for row in buffers.itertuples()
        ],
        "kv_cache": kv,
        "has_output_buffer": bool((buffers["kind"] == "output").any()),
    }


def compute_occupancy(context: RunContext, graph_id: int) -> OccupancyPayload:
    """One graph's compute buffer: each intermediate's byte range and live node interval."""
    table = occupancy(context.run, graph_id)
    live = live_bytes(table)
    return {
        "graph_id": graph_id,
        "n_nodes": int(context.graphs.loc[context.graphs["graph_id"] == graph_id, "n_nodes"].iloc[0]),
        "tensors": {
            "name": table["name"].tolist(),
            "op": table["op"].tolist(),
            "start": table["start"].tolist(),
            "end": table["end"].tolist(),
            "first_node": table["first_node"].tolist(),
            "last_node": table["last_node"].tolist(),
        },
        "live_bytes": live.tolist(),
        "peak_bytes": int(live.max()) if len(live) else 0,
    }


# -- statistics ------------------------------------------------------------------
