"""The JSON each endpoint of the viewer's API returns, declared once: this package, one module per view,
every name re-exported here."""

# One `TypedDict` per answer (and per record inside one), named after what it holds. The view
# modules (ui/views/) and the handlers in app.py that build them are annotated with these types,
# so mypy checks the keys they write; tests/unit/test_viewer_payloads.py fetches every endpoint of
# a synthetic run and checks the keys that come back against them, so neither side can drift. The
# page's side of the contract is static/js/api.js, whose JSDoc @typedefs mirror these, name for
# name and field for field (checked by the same test file). Columnar answers (GraphBars,
# TimelineGraphs, DiskRegions, ...) hold one list per field, all of the same length: the browser
# draws from arrays, and a million rows stay a few lists. Times are nanoseconds relative to the
# run's first graph unless named otherwise.
#
# The run's summary (RunSummary, in the overview's answer) and every record inside it are the
# analysis' results: declared in analysis/ beside the functions that make them and re-exported
# here, so the summary's producer, this API and the terminal renderer read one declaration.

from __future__ import annotations

from ...analysis.breakdowns import NodeWaits, RequestText, WeightReads
from ...analysis.compare import (
    LayerDelta,
    OpDelta,
    PhaseSpeeds,
    RunComparison,
    SettingPair,
    TensorDelta,
    TimeDeltas,
)
from ...analysis.devices import DeviceSummary, PlacementAdvice
from ...analysis.devices.prediction import PlacementCheck
from ...analysis.devices.steps import DevicePhase, DeviceTime
from ...analysis.gpu import GpuDecodeStep, GpuKernelRow, GpuSideKernel, GpuTimerCost, GpuTimerSummary
from ...analysis.graph_view import GraphItem, GraphLayout, GraphLink
from ...analysis.kv import KvEvent, KvUse
from ...analysis.moe import MoeLayerBalance, MoeSummary
from ...analysis.requests import Percentiles, RequestsSummary
from ...analysis.roofline import (
    DecodeFloor,
    FurthestOp,
    LimitMeasurement,
    PromptFloor,
    RooflineLayer,
    RooflineLimits,
    RooflineOp,
    RooflinePhase,
    RooflineSummary,
)
from ...analysis.speculative import SpeculativeRequest, SpeculativeSummary
from ...analysis.summary import (
    BufferKindRow,
    ComponentTime,
    ComputationRow,
    FoundSection,
    KvSummary,
    LayerTime,
    OpThroughput,
    OpTime,
    PhaseRow,
    RunSummary,
    TensorTime,
)
from .attention import (
    AttentionIndexPayload,
    AttentionPayload,
)
from .details import (
    NodeGpuTime,
    NodePayload,
    NodeSource,
    NodeTensor,
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
    GraphListEntry,
    GraphListPayload,
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
from .requests import (
    RequestBar,
    RequestsPayload,
)
from .runs import (
    LiveUpdate,
    RunListEntry,
    RunsPayload,
)
from .slots import (
    SlotReads,
    SlotsPayload,
)
from .stats import (
    LayerActivation,
    LayerStats,
    OpStats,
    StatsPayload,
    TensorStats,
    TimeSource,
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
    TimelineTransfers,
    TracedSpans,
)
from .whatif import (
    WhatifMemory,
    WhatifPayload,
    WhatifRow,
)

__all__ = [
    "AttentionIndexPayload",
    "AttentionPayload",
    "BufferEntry",
    "BufferKindRow",
    "BufferTrack",
    "ComponentTime",
    "ComputationRow",
    "DiskFile",
    "DiskRegions",
    "DiskTrack",
    "EventRow",
    "EventsPayload",
    "ExpertsPayload",
    "KvEvent",
    "KvUse",
    "SlotReads",
    "SlotsPayload",
    "Percentiles",
    "RequestBar",
    "RequestsSummary",
    "RequestsPayload",
    "FoundSection",
    "DevicePhase",
    "DeviceSummary",
    "PlacementAdvice",
    "PlacementCheck",
    "DeviceTime",
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
    "GraphLayout",
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
    "MoeLayerBalance",
    "MoeSummary",
    "NodeBars",
    "NodeGpuTime",
    "NodePayload",
    "NodeTensor",
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
    "SpeculativeRequest",
    "SpeculativeSummary",
    "SettingPair",
    "StatsPayload",
    "TensorStats",
    "TensorTime",
    "TimeDeltas",
    "TensorDelta",
    "OpDelta",
    "LayerDelta",
    "RunComparison",
    "TimeSource",
    "TimelineGraphs",
    "TimelineLane",
    "TimelineTransfers",
    "TimelinePayload",
    "TokenRouting",
    "TracedSpans",
    "WeightReads",
    "DecodeFloor",
    "FurthestOp",
    "LimitMeasurement",
    "PromptFloor",
    "RooflineLayer",
    "RooflineLimits",
    "RooflineOp",
    "RooflinePhase",
    "RooflineSummary",
    "WhatifMemory",
    "WhatifPayload",
    "WhatifRow",
]
