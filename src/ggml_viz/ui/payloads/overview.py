"""The overview's JSON (GET .../overview): the summary, a bar per graph and what the GPU timer recorded."""

from __future__ import annotations

from typing import Any, TypedDict

from ...analysis.summary import RunSummary


class GraphBars(TypedDict):
    """One entry per graph, in graph order; of a run of more graphs than the overview draws
    (views/overview.GRAPH_BARS), one per slice of them: its longest graph."""

    graph_id: list[int]
    duration_ns: list[int]
    phase: list[str]
    n_tokens: list[int]
    text: list[str]  # the graph's tokens
    graphs: int  # the run's graphs (more than the bars: each bar the longest of its slice)


class GpuStep(TypedDict):
    """The median traced graph of a phase on one device: the host's time for it (its start to
    its end) against the device's busy time."""

    device: str  # "CUDA0"
    phase: str
    graphs: int  # traced graphs of the phase
    host_ns: int  # median
    busy_ns: int  # median: the device busy with the graph (kernels, copies; overlap once)
    span_ns: int  # median: its first kernel's start to its last's end
    busy_share: float | None  # median of busy / host


class KernelTime(TypedDict):
    kernel: str  # the kernel's function (quantize_q8_1), or a copy's kind (HtoD)
    kind: str  # kernel | memcpy | memset
    count: int  # in the traced graphs
    time_ns: int  # its share of the device's busy time over the run, estimated from the traced graphs
    share: float  # of the device's busy time over the run (each traced structure weighted by how often it ran)
    mean_ns: float  # mean duration


class GpuOverview(TypedDict):
    """What the GPU timer recorded (CUDA, CUPTI's kernel records): absent without GPU times."""

    label: str  # where GPU node times come from, in words (how they are estimated, what CUPTI dropped)
    devices: list[str]
    source: str
    traced_graphs: int
    graphs: int  # graphs of the contexts traced (of which traced_graphs were)
    steps: list[GpuStep]  # the decode phase first
    top_kernels: list[KernelTime]
    kernels: int  # kernels in the traced graphs
    unattributed: int  # of them, not attributed to a node
    copies: int  # memcpy and memset


class OverviewPayload(TypedDict):
    """GET /api/runs/{id}/overview"""

    run_id: str
    name: str
    summary: RunSummary
    capture: dict[str, Any] | None  # the manifest's capture settings
    versions: dict[str, Any] | None
    duration_ns: int
    ops: list[str]  # every op of the run: timeline and graph bars index into it, colors follow it
    graph_bars: GraphBars
    gpu: GpuOverview | None  # None: the run has no GPU times
