"""The summary of a run: every breakdown, the findings, throughput and the GPU's story, gathered
into the object `ggml-viz summary --json` prints (and the viewer and the report show)."""

from __future__ import annotations

from typing import Any, TypedDict

from .._typing import Required
from ..runformat.reader import Run
from .breakdowns import (
    NodeWaits,
    WeightReads,
    backends,
    graphs_by_computation,
    memory_by_buffer,
    node_waits,
    phase_stats,
    time_by_component,
    time_by_layer,
    time_by_op,
    time_by_tensor,
    untimed_reason,
    weight_reads,
)
from .components import structure_components
from .devices import DeviceSummary, PlacementAdvice, device_summary, placement_advice, run_devices
from .findings import FindingContext, find_all
from .flops import ThroughputRow, throughput_by_op
from .gpu import GpuTimerSummary, gpu_summary
from .kv import KvUse, kv_use
from .memory import kv_cache_extremes
from .moe import MoeSummary, moe_summary
from .requests import RequestsSummary, RequestText, requests_and_count, requests_summary
from .roofline import RooflineSummary, roofline_summary
from .rows import records_as
from .speculative import SpeculativeSummary, speculative_summary


class PhaseRow(TypedDict):
    """A phase's graphs, tokens and time (breakdowns.phase_stats)."""

    phase: str
    graphs: int
    tokens: int
    time_ns: int
    tokens_per_s: float | None


class _TimeRow(TypedDict):
    """Timed node events of one kind, their time and waits (breakdowns.time_by_op, _by_layer, ...)."""

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
    """The buffers of one kind (breakdowns.memory_by_buffer)."""

    kind: str
    buffers: int
    bytes: int
    names: str
    peak_bytes: int


class _KvSummaryBase(TypedDict):
    layers: int


class KvSummary(_KvSummaryBase, total=False):
    """The KV cache's layers, and its last graph's cells (_kv_summary: only `layers`, 0, without one)."""

    used: int  # in the last graph; absent without a KV cache
    capacity: int
    fill: float


class OpThroughput(ThroughputRow, total=False):
    """An op's achieved rates; with the run's limits measured, its roofline too (the summary's
    throughput_by_op is then roofline.by_op)."""

    op: Required[str]
    floor_ns: float | None  # the least time its work could take at this machine's limits
    bound: str | None  # "memory" or "compute": the roof that sets the floor (None: not judged)
    of_limit: float | None  # floor / time: 1 at the limit


class ComputationRow(TypedDict):
    """Graphs of one kind (breakdowns.graphs_by_computation)."""

    label: str  # what they compute, from the weights they read ("" none)
    phase: str
    graphs: int
    time_ns: int


class FoundSection(TypedDict):
    """A titled finding's sentences (findings.FoundSection, as data): a plugin's section."""

    title: str
    lines: list[str]
    source: str  # "built-in", or the plugin's package and version


class RunSummary(TypedDict):
    """What `ggml-viz summary` shows (summarize)."""

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
    request_times: RequestsSummary | None  # their counts and time percentiles (None: no request)
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
    kv: KvUse | None  # slots and the cache over time (None: no token of a sequence)
    moe: MoeSummary
    throughput_by_op: list[OpThroughput]
    roofline: RooflineSummary  # against this machine's measured limits
    findings: list[str]
    sections: list[FoundSection]  # titled findings, each shown apart
    clocks: dict[str, int]  # timed node events by their clock: host, gpu
    gpu: GpuTimerSummary | None  # the GPU timer's account (None: no GPU the timer saw)
    devices: DeviceSummary | None  # where a step's time goes per device (None: one device)
    placement: PlacementAdvice | None  # other flags predicted from the run (None: nothing to predict)
    speculative: SpeculativeSummary | None  # drafts verified, accepted, and their time (None: no speculation)


TIMING_LABELS = {
    "inline": "inline (host clock, each graph run whole)",
    "sync": "sync (host clock, each node computed alone: on a GPU without fusion or CUDA graphs, and "
    "synchronized after every node)",
}


def timing_label(timing: str | None) -> str:
    """What a --timing setting measures, in words (wherever node times are shown)."""
    return TIMING_LABELS.get(timing or "", timing or "?")


LISTED_REQUESTS = 50


def summarize(run: Run, top: int = 10) -> RunSummary:
    """Everything `ggml-viz summary` shows, as plain data."""
    manifest = run.manifest
    served, n_requests = requests_and_count(run, LISTED_REQUESTS)
    generation = manifest.get("generation") or {}
    # one request: its prompt and text are the run's (a server's requests are listed apart)
    prompt, generated = (served[0]["prompt"], served[0]["generated"]) if n_requests == 1 else ("", None)
    totals = run.node_totals
    phases, reads, components = phase_stats(run), weight_reads(run), structure_components(run)  # findings use them too
    gpu = gpu_summary(run, top)
    roofline = roofline_summary(run, reads, top)
    said, sections = find_all(
        run, FindingContext(phases=phases, reads=reads, components=components, gpu=gpu, roofline=roofline)
    )
    activity = run_devices(run)
    devices = device_summary(run, activity) if activity is not None else None
    if devices and devices["finding"]:
        said.append(devices["finding"])
    placement = placement_advice(run, activity)
    if placement and placement["finding"]:
        said.append(placement["finding"])
    return {
        "run": str(run.path),
        "experiment_id": run.experiment_id,
        "status": run.status,
        "incomplete_reason": manifest.get("incomplete_reason"),
        "created": manifest.get("created"),
        "model": manifest.get("model"),
        "contexts": manifest.get("contexts"),
        "prompt": generation.get("prompt", prompt),
        "generated_text": generation.get("generated_text", generated),
        "requests": served,
        "n_requests": n_requests,
        "request_times": requests_summary(run) if n_requests else None,
        "backends": backends(run),
        "graphs": int(len(run.graphs)),
        "node_events": int(totals["graphs"].sum()),  # each graph runs each node of its structure once
        "timed_node_events": int(totals["timed"].sum()),
        "dropped_graphs": int((manifest.get("counts") or {}).get("dropped_graphs", 0)),
        "dropped_events": int((manifest.get("counts") or {}).get("dropped_events", 0)),
        "untimed_graphs": int((manifest.get("counts") or {}).get("untimed_graphs", 0)),
        "timing": (manifest.get("capture") or {}).get("timing", "sync"),
        "timing_label": timing_label((manifest.get("capture") or {}).get("timing", "sync")),
        "untimed_reason": untimed_reason(manifest),
        "clocks": {str(k): int(v) for k, v in totals.groupby("clock")["timed"].sum().items()},
        "gpu": gpu,
        "devices": devices,
        "placement": placement,  # other flags, predicted from this run (analysis/devices/advise.py)
        "speculative": speculative_summary(run),
        "node_waits": node_waits(run),
        "phases": records_as(phases, PhaseRow),
        "computations": records_as(graphs_by_computation(run).head(top), ComputationRow),
        "time_by_op": records_as(time_by_op(run).head(top), OpTime),
        "top_layers": records_as(time_by_layer(run).head(top), LayerTime),
        "top_tensors": records_as(time_by_tensor(run).head(top), TensorTime),
        "time_by_component": records_as(time_by_component(run, components), ComponentTime),
        "memory_by_buffer": records_as(memory_by_buffer(run), BufferKindRow),
        "weight_reads": reads,
        "kv_cache": _kv_summary(run),
        "kv": kv_use(run),
        "moe": moe_summary(run),
        "throughput_by_op": _throughput(run, roofline, top),
        "roofline": roofline,  # against this machine's limits (analysis/roofline.py); limits None: none measured
        "findings": said,
        # titled findings (plugins'), each shown apart
        "sections": [{"title": found.title, "lines": list(found.lines), "source": found.source} for found in sections],
    }


def _throughput(run: Run, roofline: RooflineSummary, top: int) -> list[OpThroughput]:
    """The top ops' achieved rates: with the run's limits measured, their rows of the roofline."""
    if roofline["limits"]:
        return [OpThroughput(**row) for row in roofline["by_op"]]
    return records_as(throughput_by_op(run).head(top), OpThroughput)


def _kv_summary(run: Run) -> KvSummary:
    """The KV cache's layers, and the last graph's cells in use, capacity and fill (memory.kv_cache_fill's,
    from each graph's last position: kv_cache_extremes)."""
    kv = kv_cache_extremes(run)
    if kv is None:
        return {"layers": 0}
    return {"layers": kv["layers"], "used": kv["used"], "capacity": kv["capacity"], "fill": kv["fill"]}
