"""A node's details (GET .../node): its description, times, sources, --values stats and GPU time."""

from __future__ import annotations

from typing import TypedDict

from .experts import NodeRouting


class NodeSource(TypedDict):
    slot: int
    name: str
    op: str
    type: str
    shape: str
    nbytes: int
    usage: str
    memory: str  # "disk" (the model file), "buffer", ...
    buffer: str | None
    file_offset: int | None
    buffer_offset: int | None


class NodeValues(TypedDict):
    """--values stats of a node's output."""

    n: int  # finite values
    nan: int
    inf: int
    min: float | None
    max: float | None
    mean: float | None
    std: float | None
    mean_abs: float | None


class NodeGpuTime(TypedDict):
    """A node's time on the GPU, in a traced graph."""

    device: str  # "CUDA0"; "CUDA0, CUDA1" where its kernels ran on several
    node_index: int  # the node whose kernels computed it: itself, or the first of its fused group
    group_end: int  # the last node those kernels computed
    start_ns: int  # the first kernel began ...
    end_ns: int  # ... and the last ended
    gpu_ns: int  # their share of the device's busy time (of each device's, summed)
    kernels: int


class NodeTensor(TypedDict):
    """A node's tensor, as its details describe it."""

    name: str
    op: str
    op_base: str
    type: str
    shape: str
    nbytes: int
    buffer: str | None
    buffer_offset: int | None


class NodePayload(NodeTensor):
    """GET /api/runs/{id}/node?graph=&index="""

    event: int
    graph_id: int
    node_index: int
    start_ns: int | None  # None: not timed
    end_ns: int | None
    tokens: str
    layer: int | None
    sources: list[NodeSource]
    values: NodeValues | None
    gpu: NodeGpuTime | None  # None: not on a traced GPU graph
    routing: NodeRouting | None  # a MUL_MAT_ID of a graph whose routing was recorded; else None
