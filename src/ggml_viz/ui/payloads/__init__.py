"""The JSON each endpoint of the viewer's API returns, declared once: this package, one module per view,
every name re-exported here."""

# One `TypedDict` per answer (and per record inside one), named after what it holds. The view
# modules (ui/views/) and the handlers in app.py that build them are annotated with these types,
# so mypy checks the keys they write; tests/unit/test_viewer_payloads.py fetches every endpoint of
# a synthetic run and checks the keys that come back against them, so neither side can drift. The
# page's side of the contract is static/js/api.js, whose JSDoc @typedefs mirror these, name for
# name. Columnar answers (GraphBars, TimelineGraphs, DiskRegions, ...) hold one list per field, all
# of the same length: the browser draws from arrays, and a million rows stay a few lists. Times are
# nanoseconds relative to the run's first graph unless named otherwise.

from __future__ import annotations

from .attention import (
    AttentionIndexPayload,
    AttentionPayload,
)
from .details import (
    NodeGpuTime,
    NodePayload,
    NodeSource,
    NodeValues,
)
from .events import (
    EventRow,
    EventsPayload,
    SearchPayload,
)
from .experts import (
    ExpertsPayload,
    NodeRouting,
    RequestRouting,
    TokenRouting,
)
from .graph import (
    GraphItem,
    GraphLink,
    GraphListEntry,
    GraphListPayload,
    GraphPayload,
)
from .memory import (
    BufferEntry,
    BufferTrack,
    DiskFile,
    DiskRegions,
    DiskTrack,
    KvFill,
    MemoryPayload,
    OccupancyPayload,
    OccupancyTensors,
    RowsRead,
)
from .overview import (
    GpuOverview,
    GpuStep,
    GraphBars,
    KernelTime,
    OverviewPayload,
)
from .runs import (
    ComparisonPayload,
    LiveUpdate,
    PhaseSpeeds,
    RunListEntry,
    RunsPayload,
    SettingPair,
    TimeDelta,
)
from .stats import (
    LayerActivation,
    LayerStats,
    OpStats,
    StatsPayload,
    TensorStats,
    TimeSource,
)
from .summary import (
    BufferKindRow,
    ComponentTime,
    ComputationRow,
    FoundSection,
    GpuDecodeStep,
    GpuKernelRow,
    GpuSideKernel,
    GpuTimerCost,
    GpuTimerSummary,
    KvSummary,
    LayerTime,
    NodeWaits,
    OpThroughput,
    OpTime,
    PhaseRow,
    RequestText,
    RunSummary,
    TensorTime,
    WeightReads,
)
from .timeline import (
    GpuLane,
    KernelBars,
    LaneBars,
    NodeBars,
    PixelColumns,
    TimelineGraphs,
    TimelineLane,
    TimelinePayload,
    TracedSpans,
)

__all__ = [
    "AttentionIndexPayload",
    "AttentionPayload",
    "BufferEntry",
    "BufferKindRow",
    "BufferTrack",
    "ComparisonPayload",
    "ComponentTime",
    "ComputationRow",
    "DiskFile",
    "DiskRegions",
    "DiskTrack",
    "EventRow",
    "EventsPayload",
    "ExpertsPayload",
    "FoundSection",
    "GpuDecodeStep",
    "GpuKernelRow",
    "GpuLane",
    "GpuOverview",
    "GpuSideKernel",
    "GpuStep",
    "GpuTimerCost",
    "GpuTimerSummary",
    "GraphBars",
    "GraphItem",
    "GraphLink",
    "GraphListEntry",
    "GraphListPayload",
    "GraphPayload",
    "KernelBars",
    "KernelTime",
    "KvFill",
    "KvSummary",
    "LaneBars",
    "LayerActivation",
    "LayerStats",
    "LayerTime",
    "LiveUpdate",
    "MemoryPayload",
    "NodeBars",
    "NodeGpuTime",
    "NodePayload",
    "NodeRouting",
    "NodeSource",
    "NodeValues",
    "NodeWaits",
    "OccupancyPayload",
    "OccupancyTensors",
    "OpStats",
    "OpThroughput",
    "OpTime",
    "OverviewPayload",
    "PhaseRow",
    "PhaseSpeeds",
    "PixelColumns",
    "RequestRouting",
    "RequestText",
    "RowsRead",
    "RunListEntry",
    "RunSummary",
    "RunsPayload",
    "SearchPayload",
    "SettingPair",
    "StatsPayload",
    "TensorStats",
    "TensorTime",
    "TimeDelta",
    "TimeSource",
    "TimelineGraphs",
    "TimelineLane",
    "TimelinePayload",
    "TokenRouting",
    "TracedSpans",
    "WeightReads",
]
