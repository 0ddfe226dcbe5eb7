"""The JSON each endpoint of the viewer's API returns, declared once.

One `TypedDict` per answer (and per record inside one), named after what it holds. The
methods of `data.RunView` and the handlers in `app.py` that build them are annotated with
these types, so mypy checks the keys they write; `tests/unit/test_viewer_payloads.py`
fetches every endpoint of a synthetic run and checks the keys that come back against them,
so neither side can drift. The page's side of the contract is `static/js/api.js`, whose
JSDoc `@typedef`s mirror these, name for name.

Columnar answers (`GraphBars`, `TimelineGraphs`, `DiskRegions`, ...) hold one list per
field, all of the same length: the browser draws from arrays, and a million rows stay a
few lists. Times are nanoseconds relative to the run's first graph unless named otherwise.
"""

from __future__ import annotations

from typing import Any, TypedDict

# -- the run list, live updates and comparison ---------------------------------------------


class RunListEntry(TypedDict):
    run_id: str
    name: str  # the run directory's name
    status: str | None  # "recording", "complete", "incomplete"
    created: str | None
    model: str | None
    graphs: int | None


class RunsPayload(TypedDict):
    """GET /api/runs"""

    runs: list[RunListEntry]
    live: bool  # the viewer follows runs being recorded


class LiveUpdate(TypedDict):
    """Each message of GET /api/runs/{id}/live (server-sent events): what a view other than
    the overview needs to draw the grown run (the overview's summary is fetched when shown)."""

    graphs: int
    status: str
    duration_ns: int
    ops: list[str]


class SettingPair(TypedDict):
    a: Any
    b: Any


class PhaseSpeeds(TypedDict, total=False):
    a: float  # tokens per second; a side without that phase has no entry
    b: float


class _TimeDeltaBase(TypedDict):
    phase: str
    a_ns: float  # per graph
    b_ns: float
    delta_ns: float
    ratio: float | None


class TimeDelta(_TimeDeltaBase, total=False):
    op: str  # the key the rows are grouped by: one of these three
    layer: str
    name: str


class ComparisonPayload(TypedDict):
    """GET /api/compare?a=&b="""

    a: str  # paths
    b: str
    settings_that_differ: dict[str, SettingPair]
    tokens_per_s: dict[str, PhaseSpeeds]  # by phase
    per_graph_time_by: dict[str, list[TimeDelta]]  # by "op", "layer", "name": the largest changes


# -- overview ------------------------------------------------------------------------------


class NodeWaits(TypedDict):
    seen: int
    not_seen: int
    wait_ns: int
    time_ns: int


class PhaseRow(TypedDict):
    phase: str
    graphs: int
    tokens: int
    time_ns: int
    tokens_per_s: float | None


class _TimeRow(TypedDict):
    count: int
    time_ns: int
    mean_ns: float | None
    wait_ns: int
    share: float


class OpTime(_TimeRow):
    op: str


class LayerTime(_TimeRow):
    layer: int | str  # "none": nodes outside layers


class TensorTime(_TimeRow):
    name: str


class ComponentTime(_TimeRow):
    component: str


class BufferKindRow(TypedDict):
    kind: str
    buffers: int
    bytes: int
    names: str
    peak_bytes: int


class WeightReads(TypedDict):
    weight_bytes_per_graph: int
    weight_bytes_per_decode_step: int
    all_experts_counted: bool
    weights_read: int
    weights_from_mmap: bool
    weight_edges_resolved_to_file: float | None


class _KvSummaryBase(TypedDict):
    layers: int


class KvSummary(_KvSummaryBase, total=False):
    used: int  # in the last graph; absent without a KV cache
    capacity: int
    fill: float


class OpThroughput(TypedDict):
    op: str
    time_ns: int
    flops: float
    bytes: float
    gflop_per_s: float | None
    gb_per_s: float | None
    flops_per_byte: float | None


class RequestText(TypedDict):
    """One request a run served, in one sequence (analysis.summary.requests)."""

    seq_id: int
    start_ns: int  # from the run's first graph
    prompt: str
    prompt_tokens: int
    generated: str  # the tokens fed back while decoding (all but the last generated)
    generated_tokens: int


class ComputationRow(TypedDict):
    """Graphs of one kind (analysis.summary.graphs_by_computation)."""

    label: str  # what they compute, from the weights they read ("" none)
    phase: str
    graphs: int
    time_ns: int


class FoundSection(TypedDict):
    """A titled finding's sentences (analysis.findings.FoundSection): a plugin's section."""

    title: str
    lines: list[str]
    source: str  # "built-in", or the plugin's package and version


class RunSummary(TypedDict):
    """What `ggml-viz summary` shows (analysis.summary.summarize)."""

    run: str
    experiment_id: str
    status: str
    incomplete_reason: str | None
    created: str | None
    model: dict[str, Any] | None  # the manifest's own sections, as recorded
    contexts: list[dict[str, Any]] | None
    prompt: str | None
    generated_text: str | None
    requests: list[RequestText]  # the first LISTED_REQUESTS
    n_requests: int
    backends: list[str]
    graphs: int
    node_events: int
    timed_node_events: int
    dropped_graphs: int
    dropped_events: int
    untimed_graphs: int
    timing: str
    timing_label: str  # what the timing measures, in words
    node_waits: NodeWaits
    phases: list[PhaseRow]
    computations: list[ComputationRow]  # the top ones, by time
    time_by_op: list[OpTime]
    top_layers: list[LayerTime]
    top_tensors: list[TensorTime]
    time_by_component: list[ComponentTime]
    memory_by_buffer: list[BufferKindRow]
    weight_reads: WeightReads
    kv_cache: KvSummary
    throughput_by_op: list[OpThroughput]
    findings: list[str]
    sections: list[FoundSection]  # titled findings, each shown apart
    clocks: dict[str, int]  # timed node events by their clock: host, gpu
    gpu: GpuTimerSummary | None  # the GPU timer's account (None: no GPU the timer saw)


class GpuDecodeStep(TypedDict):
    """The median traced decode step from the GPU's side (analysis.gpu.decode_step)."""

    steps: int
    busy_ns: float
    span_ns: float
    host_ns: float
    host_of: str  # whose host time: untraced steps, or the traced ones
    busy_share: float


class GpuKernelRow(TypedDict):
    function: str
    count: int
    busy_ns: int
    share: float
    mean_ns: float


class GpuSideKernel(TypedDict):
    op: str
    function: str
    main: str
    busy_ns: int
    share: float


class GpuTimerCost(TypedDict):
    attach_ns: float
    traced_extra_ns: float
    compared: int
    graph_ns: float
    share: float


class GpuTimerSummary(TypedDict):
    """analysis.gpu.gpu_summary."""

    mode: str | None
    cupti: str | None
    clock: str | None
    problem: str | None
    devices: list[int]
    graphs: int
    graphs_traced: int
    windows: int
    unattributed_graphs: int
    kernels: int
    attributed_kernels: int
    decode_step: GpuDecodeStep | None
    top_kernels: list[GpuKernelRow]
    side_kernels: list[GpuSideKernel]
    cost: GpuTimerCost | None


class GraphBars(TypedDict):
    """One entry per graph, in graph order."""

    graph_id: list[int]
    duration_ns: list[int]
    phase: list[str]
    n_tokens: list[int]
    text: list[str]  # the graph's tokens


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
    count: int
    time_ns: int  # its share of the device's busy time, summed
    share: float  # of all the traced graphs' busy time
    mean_ns: float  # mean duration


class GpuOverview(TypedDict):
    """What the GPU timer recorded (CUDA, CUPTI's kernel records): absent without GPU times."""

    label: str  # where GPU node times come from, in words
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


# -- timeline ------------------------------------------------------------------------------


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


class TimelinePayload(TypedDict):
    """GET /api/runs/{id}/timeline?t0=&t1=&width="""

    t0: int
    t1: int
    width: int
    ops: list[str]
    lanes: list[TimelineLane]  # one per context


# -- nodes and events ----------------------------------------------------------------------


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

    device: str
    node_index: int  # the node whose kernels computed it: itself, or the first of its fused group
    group_end: int  # the last node those kernels computed
    start_ns: int  # the first kernel began ...
    end_ns: int  # ... and the last ended
    gpu_ns: int  # their share of the device's busy time
    kernels: int


class NodePayload(TypedDict):
    """GET /api/runs/{id}/node?graph=&index="""

    event: int
    graph_id: int
    node_index: int
    start_ns: int | None  # None: not timed
    end_ns: int | None
    tokens: str
    name: str
    op: str
    op_base: str
    type: str
    shape: str
    nbytes: int
    buffer: str | None
    buffer_offset: int | None
    layer: int | None
    sources: list[NodeSource]
    values: NodeValues | None
    gpu: NodeGpuTime | None  # None: not on a traced GPU graph


class EventRow(TypedDict):
    """GET /api/runs/{id}/event/{event}, and each row of the event log and of a search."""

    event: int
    graph_id: int
    node_index: int
    start_ns: int | None
    duration_ns: int | None
    wait_ns: int | None  # of the time, waiting at the barrier for other threads
    op: str
    name: str
    layer: int | None
    type: str
    shape: str


class EventsPayload(TypedDict):
    """GET /api/runs/{id}/events?op=&name=&layer=&t0=&t1=&file_lo=&file_hi=&offset=&limit="""

    total: int
    offset: int
    rows: list[EventRow]


class SearchPayload(TypedDict):
    """GET /api/runs/{id}/search?q="""

    hits: list[EventRow]


# -- graphs --------------------------------------------------------------------------------


class GraphListEntry(TypedDict):
    graph_id: int
    phase: str
    n_nodes: int
    duration_ns: int
    label: str


class GraphListPayload(TypedDict):
    """GET /api/runs/{id}/graphs"""

    graphs: list[GraphListEntry]


class _GraphItemBase(TypedDict):
    id: str  # "n12" a node, "L3" a collapsed layer, "t7" a leaf tensor
    kind: str  # "node", "layer", "weight", "kv", "input", "external"
    layer: int | None
    name: str
    op: str
    duration_ns: int  # -1: not timed
    x: int  # column
    y: int  # row
    band: int  # columns of the leaves' band, left of the computations


class GraphItem(_GraphItemBase, total=False):
    node_index: int  # nodes
    type: str  # nodes and leaves
    shape: str
    n_nodes: int  # layers
    n_weights: int
    reads_kv: bool
    n_inputs: int


GraphLink = TypedDict("GraphLink", {"from": str, "to": str, "label": str, "count": int})


class GraphPayload(TypedDict):
    """GET /api/runs/{id}/graph/{graph_id}?layer="""

    graph_id: int
    layer: int | None  # None: every layer collapsed
    layers: list[int]
    items: list[GraphItem]
    links: list[GraphLink]
    columns: int
    rows: int


# -- memory --------------------------------------------------------------------------------


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


# -- statistics ----------------------------------------------------------------------------


class _StatsRow(TypedDict):
    count: int
    time_ns: int
    wait_ns: int
    bytes: int  # written
    timed: int
    mean_ns: float | None
    time_share: float
    bytes_share: float
    clock: str | None  # where the time comes from: "host", "gpu", "host+gpu"; None: not timed


class OpStats(_StatsRow):
    op: str


class LayerStats(_StatsRow):
    layer: int | str  # "none": nodes outside layers


class TensorStats(_StatsRow):
    tensor: str


class LayerActivation(TypedDict):
    """--values stats of a layer's node outputs."""

    layer: int | str
    min: float | None
    max: float | None
    mean_abs: float | None
    nan: int
    inf: int
    nodes: int


class TimeSource(TypedDict):
    """One clock the statistics' node times come from."""

    clock: str  # "host" or "gpu"
    label: str  # in words: "host clock (inline timing)", "GPU time (CUDA0, CUPTI kernel records, ...)"
    timed: int  # node events it timed
    time_ns: int


class StatsPayload(TypedDict):
    """GET /api/runs/{id}/stats"""

    total_time_ns: int
    time_sources: list[TimeSource]
    by_op: list[OpStats]
    by_layer: list[LayerStats]
    by_tensor: list[TensorStats]  # the top 500
    findings: list[str]
    sections: list[FoundSection]  # titled findings (plugins' summary sections), each shown apart
    activation_by_layer: list[LayerActivation]  # empty without --values stats


# -- attention -----------------------------------------------------------------------------


class AttentionIndexPayload(TypedDict):
    """GET /api/runs/{id}/attention-index"""

    graphs: dict[str, list[int]]  # graph id -> layers with captured attention
    heads: int
    flash_attention: bool


class AttentionPayload(TypedDict):
    """GET /api/runs/{id}/attention?graph=&layer=&head="""

    graph_id: int
    layer: int
    head: int
    heads: int
    query_labels: list[str]  # the graph's tokens
    query_positions: list[int]
    key_labels: list[str]  # the token at each KV cell, by position
    weights: list[list[float]]  # [query][key]
