"""The run's summary inside the overview's JSON: what `ggml-viz summary` shows (analysis.summary.summarize)."""

from __future__ import annotations

from typing import Any, Required, TypedDict


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
    routed_decode_steps: int  # of a mixture's decode steps, those whose routing was read, when not all were
    weights_read: int
    weights_from_mmap: bool
    weight_edges_resolved_to_file: float | None


class _KvSummaryBase(TypedDict):
    layers: int


class KvSummary(_KvSummaryBase, total=False):
    used: int  # in the last graph; absent without a KV cache
    capacity: int
    fill: float


class _Throughput(TypedDict):
    time_ns: int
    flops: float
    bytes: float
    upper_bound: bool  # the FLOPs count every cell of an attention window its mask may have skipped
    gflop_per_s: float | None
    gb_per_s: float | None
    flops_per_byte: float | None


class OpThroughput(_Throughput, total=False):
    """An op's achieved rates; with the run's limits measured, its roofline too (the summary's
    throughput_by_op is then roofline.by_op)."""

    op: Required[str]
    floor_ns: float | None  # the least time its work could take at this machine's limits
    bound: str | None  # "memory" or "compute": the roof that sets the floor (None: not judged)
    of_limit: float | None  # floor / time: 1 at the limit


class _RooflineRow(_Throughput):
    floor_ns: float | None
    bound: str | None
    of_limit: float | None


class RooflineOp(_RooflineRow):
    op: str


class RooflinePhase(_RooflineRow):
    phase: str


class RooflineLayer(_RooflineRow):
    layer: int


class LimitMeasurement(TypedDict):
    """One limit `ggml-viz limits` measured (runformat/limits.py)."""

    device: str  # "CPU", "CUDA0"
    threads: int | None
    what: str  # memory_read, matvec, matmul, page_cache_read, disk_read
    type: str | None  # the ggml type measured (matvec, matmul)
    gb_per_s: float | None
    gflop_per_s: float | None
    bytes: float | None
    flops: float | None
    seconds: float | None
    repeats: int | None
    note: str | None


class RooflineLimits(TypedDict):
    """The limits a run is judged against, and at which threads."""

    measured: str | None
    machine: dict[str, Any]
    same_machine: bool  # measured on the machine that recorded the run
    threads: dict[str, int | None]  # per phase, the threads it ran on
    judged_at: list[int]  # the measured thread counts the nodes were judged at
    weight_types: list[str]  # the types whose matrix-product peaks judge the nodes (F32 and the weights')
    device: str  # the device holding most of the node time: the one whose roofs a chart draws
    measurements: list[LimitMeasurement]


class DecodeFloor(TypedDict):
    """The decode step's weights read at the measured bandwidth, against its median time."""

    bytes: int
    median_ns: float
    gb_per_s: float
    bandwidth_gb_per_s: float
    floor_ns: float
    of_limit: float
    threads: int | None
    weight_type: str | None
    kernel_gb_per_s: float | None  # the matrix-vector kernel of that type at best


class PromptFloor(TypedDict):
    """The prompt's FLOPs at the matrix product's peak for its main weight type, against its time."""

    flops: float
    time_ns: float
    gflop_per_s: float
    peak_gflop_per_s: float
    weight_type: str | None
    peak_type: str | None  # the type whose peak it is held to (F32's where its own was not measured)
    of_limit: float
    threads: int | None


class FurthestOp(TypedDict):
    op: str
    of_limit: float
    bound: str | None
    share: float  # of node time
    gflop_per_s: float
    gb_per_s: float


class RooflineSummary(TypedDict, total=False):
    """The run against this machine's measured limits (analysis.roofline.roofline_summary): only
    `limits` (None) where the run holds none (`ggml-viz limits --for RUN` measures them)."""

    limits: Required[RooflineLimits | None]
    by_op: list[RooflineOp]  # the top ops by time
    by_phase: list[RooflinePhase]
    by_layer: list[RooflineLayer]
    decode_step: DecodeFloor | None
    prompt: PromptFloor | None
    furthest: FurthestOp | None


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


class MoeLayerBalance(TypedDict):
    """One MoE layer's load over its experts (analysis.moe.layer_balance)."""

    layer: int
    n_expert: int
    tokens: int  # (token, slot) rows routed
    max_over_mean: float  # the busiest expert's load over the mean
    never_used: int
    entropy_bits: float
    entropy_share: float  # of log2(n_expert): 1.0 even
    hottest: list[list[float]]  # [expert, share of the load], busiest first
    prompt_tokens: int
    decode_tokens: int


class MoeSummary(TypedDict, total=False):
    """A mixture of experts' routing (analysis.moe.moe_summary): only `layers` (0) for a dense model."""

    layers: Required[int]
    graphs_routed: int  # graphs whose routing was read ...
    graphs_with_experts: int  # ... of those that ran experts (a GPU reads it in its windows)
    n_expert: int
    experts_per_token: int
    balance: list[MoeLayerBalance]
    never_used: int
    worst_layer: int
    worst_max_over_mean: float
    median_max_over_mean: float
    median_entropy_share: float
    decode_expert_bytes_by_device: dict[str, int]
    token_share_by_device: dict[str, float]


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
    untimed_reason: str  # why a run whose nodes were not timed has graph times only, in words
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
    moe: MoeSummary
    throughput_by_op: list[OpThroughput]
    roofline: RooflineSummary  # against this machine's measured limits
    findings: list[str]
    sections: list[FoundSection]  # titled findings, each shown apart
    clocks: dict[str, int]  # timed node events by their clock: host, gpu
    gpu: GpuTimerSummary | None  # the GPU timer's account (None: no GPU the timer saw)
    devices: DeviceSummary | None  # where a step's time goes per device (None: one device)
    placement: PlacementAdvice | None  # other flags predicted from the run (None: nothing to predict)


class PlacementCheck(TypedDict):
    """The recorded placement's predicted rate against the rate its own steps ran at."""

    measured_tokens_per_s: float
    predicted_tokens_per_s: float
    ratio: float
    steps: float


class PlacementAdvice(TypedDict):
    """Other flags predicted from the run (analysis.devices.placement_advice)."""

    recorded_flags: str
    check: dict[str, PlacementCheck]  # per phase
    best_flags: str | None
    best_decode_tokens_per_s: float | None
    recorded_decode_tokens_per_s: float | None
    finding: str | None


class DeviceTime(TypedDict):
    """One device's part of a phase's mean step (analysis.devices.steps.phase_breakdown)."""

    device: str
    busy_ns: float
    idle_share: float
    parts: dict[str, float]  # idle time by cause: "waiting for D", "waiting for transfers", ...


class DevicePhase(TypedDict):
    phase: str
    steps: int
    step_ns: float  # the mean step: each device's busy time and parts add up to it
    devices: list[DeviceTime]


class DeviceSummary(TypedDict):
    """Where a step's time goes per device (analysis.devices.device_summary)."""

    phases: list[DevicePhase]
    finding: str | None


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
    count: int  # in the traced graphs
    busy_ns: int  # over the run, estimated (the traced graphs weighted by how often each structure ran)
    share: float  # of that
    mean_ns: float  # in the traced graphs


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
    timer: str  # what timed the GPU's nodes: cupti (CUDA) or vulkan (ggml-viz's Vulkan layer)
    source: str  # where the times come from, in words: "CUPTI kernel records", "Vulkan timestamp queries"
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
    estimate: str | None  # how its shares over the run are estimated from the traced graphs (None: none traced)
    warnings: list[str]  # records the timer dropped or left without times: the traced graphs' times are incomplete
    decode_step: GpuDecodeStep | None
    top_kernels: list[GpuKernelRow]
    side_kernels: list[GpuSideKernel]
    cost: GpuTimerCost | None
