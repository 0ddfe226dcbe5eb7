"""The overview (GET .../overview): the run's summary, a bar per graph, and what the GPU timer recorded
(per device and phase the median traced graph, the top kernels)."""

from __future__ import annotations

from typing import overload

import numpy as np
import pandas as pd

from ...analysis.summary import RunSummary, summarize
from ..context import RunContext
from ..gpu import MEMCPY, MEMSET, UNATTRIBUTED, GpuRun
from ..payloads import GpuOverview, GpuStep, GraphBars, KernelTime, OverviewPayload

TOP_KERNELS = 12
# Bars the overview sends at most: a canvas a few thousand pixels wide draws no more. A run of
# more graphs sends, per slice of its graphs in order, the slice's longest (its peaks stay
# seen), each a real graph: a day of a server (1.75M graphs) sends 4,096, not 100 MB of JSON.
GRAPH_BARS = 4096
# Characters of a text (prompt, generated text, a request's) the overview shows: its start and
# end, with how many were left out between them (a day of a server generates megabytes; the run
# and `summary --json` keep them whole, the event log and graph views show each token's).
TEXT_SHOWN = 20_000


def run_overview(context: RunContext, gpu: GpuRun | None) -> OverviewPayload:
    """The overview of one run, with its GPU side's where the run has GPU times."""
    summary = _texts_cut(summarize(context.run))
    manifest = context.run.manifest
    return {
        "run_id": context.run_id,
        "name": context.path.name,
        "summary": summary,
        "capture": manifest.get("capture"),
        "versions": manifest.get("versions"),
        "duration_ns": context.duration_ns,
        "ops": context.ops,
        "graph_bars": graph_bars(context),
        "gpu": gpu_overview(gpu) if gpu is not None else None,
    }


def _texts_cut(summary: RunSummary) -> RunSummary:
    cut: RunSummary = {
        **summary,
        "prompt": shown(summary["prompt"]),
        "generated_text": shown(summary["generated_text"]),
    }
    cut["requests"] = [
        {**request, "prompt": shown(request["prompt"]), "generated": shown(request["generated"])}
        for request in summary["requests"]
    ]
    return cut


@overload
def shown(text: str, limit: int | None = None) -> str: ...
@overload
def shown(text: None, limit: int | None = None) -> None: ...
@overload
def shown(text: str | None, limit: int | None = None) -> str | None: ...
def shown(text: str | None, limit: int | None = None) -> str | None:
    """`text` cut to its first and last limit/2 (TEXT_SHOWN/2) characters where longer, saying how
    many were left out."""
    limit = TEXT_SHOWN if limit is None else limit
    if text is None or len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]} … [{len(text) - 2 * half:,} characters left out] … {text[-half:]}"


def graph_bars(context: RunContext) -> GraphBars:
    """A bar per graph, or per slice of graphs (GRAPH_BARS): its longest."""
    graphs = context.graphs
    durations = (graphs["end_ns"] - graphs["start_ns"]).to_numpy()
    rows = np.arange(len(graphs))
    if len(graphs) > GRAPH_BARS:
        bounds = np.linspace(0, len(graphs), GRAPH_BARS + 1).astype(np.int64)
        rows = np.array(
            [
                first + int(np.argmax(durations[first:last]))
                for first, last in zip(bounds[:-1], bounds[1:], strict=True)
            ],
            np.int64,
        )
    return {
        "graph_id": graphs["graph_id"].to_numpy()[rows].tolist(),
        "duration_ns": durations[rows].tolist(),
        "phase": graphs["phase"].to_numpy()[rows].tolist(),
        "n_tokens": graphs["n_tokens"].to_numpy()[rows].tolist(),
        "text": context.graph_labels_of(rows),
        "graphs": len(graphs),
    }


def gpu_overview(gpu: GpuRun) -> GpuOverview:
    """Per device and phase, the median traced graph: its time on the host against the
    device's busy time; and the kernel functions taking most of the device's time."""
    graphs = gpu.graphs.assign(span_ns=gpu.graphs["end_ns"] - gpu.graphs["start_ns"])
    graphs["busy_share"] = graphs["busy_ns"] / graphs["host_ns"].where(graphs["host_ns"] > 0)
    steps: list[GpuStep] = []
    for (device, phase), group in graphs.groupby(["device", "phase"], sort=True):
        share = group["busy_share"].median()
        steps.append(
            {
                "device": gpu.device_name(int(device)),
                "phase": str(phase),
                "graphs": int(group["graph_id"].nunique()),
                "host_ns": int(group["host_ns"].median()),
                "busy_ns": int(group["busy_ns"].median()),
                "span_ns": int(group["span_ns"].median()),
                "busy_share": None if pd.isna(share) else float(share),
            }
        )
    steps.sort(key=lambda step: (step["phase"] != "decode", step["device"]))  # a decode step first
    kernels = gpu.kernel_totals
    is_kernel = kernels["op"] >= UNATTRIBUTED
    return {
        "label": gpu.label,
        "devices": gpu.devices,
        "source": gpu.source,
        "traced_graphs": gpu.traced_graphs,
        "graphs": gpu.graphs_on_gpu,
        "steps": steps,
        "top_kernels": top_kernels(gpu),
        "kernels": int(kernels.loc[is_kernel, "count"].sum()),
        "unattributed": int(kernels.loc[kernels["op"] == UNATTRIBUTED, "count"].sum()),
        "copies": int(kernels.loc[~is_kernel, "count"].sum()),
    }


def top_kernels(gpu: GpuRun) -> list[KernelTime]:
    """The kernel functions (and copies) by the device's busy time they took."""
    kernels = gpu.kernel_totals
    if kernels.empty:
        return []
    kernels = kernels.assign(
        kernel=[gpu.short_names[int(i)] for i in kernels["name"]],
        kind=np.select([kernels["op"] == MEMCPY, kernels["op"] == MEMSET], ["memcpy", "memset"], "kernel"),
    )
    by_kernel = kernels.groupby(["kernel", "kind"], as_index=False)[["count", "busy", "time"]].sum()
    total = max(int(by_kernel["busy"].sum()), 1)
    by_kernel = by_kernel.sort_values(["busy", "kernel"], ascending=[False, True]).head(TOP_KERNELS)
    return [
        {
            "kernel": row.kernel,
            "kind": row.kind,
            "count": int(row.count),
            "time_ns": int(row.busy),
            "share": int(row.busy) / total,
            "mean_ns": float(row.time) / max(int(row.count), 1),
        }
        for row in by_kernel.itertuples()
    ]
