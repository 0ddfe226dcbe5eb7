"""The timeline's JSON (GET .../timeline): per context lane, graph bars, node bars, pixel columns and GPU
lanes."""

from __future__ import annotations

from typing import TypedDict


class TimelineGraphs(TypedDict):
    start: list[int]
    end: list[int]
    graph_id: list[int]
    label: list[str]  # the graph's tokens
    phase: list[str]


class NodeBars(TypedDict):
    start: list[int]
    end: list[int]
    op: list[int]  # index into TimelinePayload.ops
    event: list[int]  # for GET .../event/{event}


class PixelColumns(TypedDict):
    """Nodes narrower than the window's pixels, summed per pixel column."""

    px: list[int]  # column, 0..width-1, of the window t0..t1
    op: list[int]  # the op taking most of the column's time
    fill: list[float]  # 0..1: the part of the column's time that nodes run


class LaneBars(TypedDict):
    nodes: NodeBars
    columns: PixelColumns


class KernelBars(TypedDict):
    """What a GPU ran, one bar each, at its GPU times."""

    start: list[int]
    end: list[int]
    busy: list[int]  # its share of the device's busy time (overlap counted once)
    # its node's op, index into TimelinePayload.ops; -1: a kernel not attributed to a node, -2: memcpy, -3: memset
    op: list[int]
    event: list[int]  # its node's event (-1: none), as NodeBars.event
    kernel: list[int]  # index into GpuLane.kernels and GpuLane.names
    bytes: list[int]  # copies and memsets


class TracedSpans(TypedDict):
    """The traced graphs on a device: where the GPU was watched."""

    start: list[int]
    end: list[int]
    graph_id: list[int]


class GpuLane(TypedDict):
    label: str  # the device and where its times come from
    device: int
    device_name: str  # "CUDA0"
    kernels: list[str]  # kernel functions (quantize_q8_1, or a copy's kind)
    names: list[str]  # the same kernels' whole names
    bars: KernelBars
    columns: PixelColumns  # op: as KernelBars.op
    traced: TracedSpans


class TimelineLane(LaneBars):
    label: str  # the context and its backends
    graphs: TimelineGraphs
    gpu: list[GpuLane]  # a lane per device that ran the context's traced graphs (none without GPU times)


class TimelineTransfers(TypedDict):
    """Columnar: the messages between hosts during the window (a joined distributed run's wire),
    each from its sender's lane to its receiver's; the largest `shown` of `total` where more."""

    start: list[int]  # sent
    end: list[int]  # received (on the head's clock)
    source: list[int]  # lane indices
    target: list[int]
    bytes: list[int]
    command: list[str]
    total: int


class TimelinePayload(TypedDict):
    """GET /api/runs/{id}/timeline?t0=&t1=&width="""

    t0: int
    t1: int
    width: int
    ops: list[str]
    lanes: list[TimelineLane]  # one per context
    transfers: TimelineTransfers  # between lanes (a joined run's; empty otherwise)
