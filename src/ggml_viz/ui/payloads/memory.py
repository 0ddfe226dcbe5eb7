"""The memory and disk views' JSON (GET .../memory, .../occupancy/{id}): the model file, the buffers, a
compute buffer's occupancy."""

from __future__ import annotations

from typing import TypedDict


class DiskRegions(TypedDict):
    """The model file's regions by byte offset, in file order."""

    kind: list[str]  # "tensor", "header", "padding", ...
    name: list[str]
    start: list[int]
    end: list[int]
    layer: list[int]  # -1: none
    type: list[str]
    category: list[str]
    reads: list[int]  # node events reading the weight
    read_ns: list[int]  # their time
    rows_read: list[int]  # a table read by row lookups: rows read (-1: not one)
    row_bytes_read: list[int]


class RowsRead(TypedDict):
    """Each row a lookup read, by its file bytes."""

    start: list[int]
    end: list[int]
    reads: list[int]


class DiskFile(TypedDict):
    path: str
    size: int
    regions: DiskRegions
    rows: RowsRead


class DiskTrack(TypedDict):
    files: list[DiskFile]


class BufferEntry(TypedDict):
    buffer: int
    name: str
    kind: str  # "weights", "kv_cache", "compute", "output", ...
    usage: str
    size: int
    context_id: int


class _KvFillBase(TypedDict):
    layers: list[int]
    graph_id: list[int]
    used: list[list[int]]  # [graph][layer]: cells in use


class KvFill(_KvFillBase, total=False):
    capacity: int  # absent without a KV cache


class BufferTrack(TypedDict):
    buffers: list[BufferEntry]
    kv_cache: KvFill
    has_output_buffer: bool


class MemoryPayload(TypedDict):
    """GET /api/runs/{id}/memory"""

    disk: DiskTrack
    buffers: BufferTrack


class OccupancyTensors(TypedDict):
    name: list[str]
    op: list[str]
    start: list[int]  # byte offset in the compute buffer
    end: list[int]
    first_node: list[int]  # lives from this node index...
    last_node: list[int]  # ...to this one


class OccupancyPayload(TypedDict):
    """GET /api/runs/{id}/occupancy/{graph_id}"""

    graph_id: int
    n_nodes: int
    tensors: OccupancyTensors
    live_bytes: list[int]  # after each node
    peak_bytes: int
