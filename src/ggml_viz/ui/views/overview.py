"""The overview (GET .../overview): the run's summary, a bar per graph, and what the GPU timer recorded
(per device and phase the median traced graph, the top kernels)."""

from __future__ import annotations

from typing import cast

import numpy as np
import pandas as pd

from ...analysis.summary import summarize
from ..context import RunContext
from ..gpu import MEMCPY, MEMSET, SOURCE, UNATTRIBUTED, GpuRun, device_name
from ..payloads import GpuOverview, GpuStep, KernelTime, OverviewPayload, RunSummary

TOP_KERNELS = 12


def run_overview(context: RunContext, gpu: GpuRun | None) -> OverviewPayload:
    """The overview of one run, with its GPU side's where the run has GPU times."""
    summary = summarize(context.run)
    manifest = context.run.manifest
    graphs = context.graphs
    return {
        "run_id": context.run_id,
        "name": context.path.name,
        "summary": cast(RunSummary, summary),
        "capture": manifest.get("capture"),
        "versions": manifest.get("versions"),
        "duration_ns": context.duration_ns,
        "ops": context.ops,
        "graph_bars": {
            "graph_id": graphs["graph_id"].tolist(),
            "duration_ns": (graphs["end_ns"] - graphs["start_ns"]).tolist(),
            "phase": graphs["phase"].tolist(),
            "n_tokens": graphs["n_tokens"].tolist(),
            "text": context.graph_labels,
        },
        "gpu": gpu_overview(gpu) if gpu is not None else None,
    }


def gpu_overview(gpu: GpuRun) -> GpuOverview:
    """Per device and phase, the median traced graph: its time on the host against the
    device's busy time; and the kernel functions taking most of the device's time."""
    graphs = gpu.graphs.assign(span_ns=gpu.graphs["end_ns"] - gpu.graphs["start_ns"])
    graphs["busy_share"] = graphs["busy_ns"] / graphs["host_ns"].where(graphs["host_ns"] > 0)
    steps: list[GpuStep] = []
    for (device, phase), group in graphs.groupby(["device", "phase"], sort=True):
        share = group["busy_share"].median()
        steps.append({
            "device": device_name(int(device)), "phase": str(phase), "graphs": int(group["graph_id"].nunique()),
            "host_ns": int(group["host_ns"].median()), "busy_ns": int(group["busy_ns"].median()),
            "span_ns": int(group["span_ns"].median()), "busy_share": None if pd.isna(share) else float(share),
        })  # fmt: skip
    steps.sort(key=lambda step: (step["phase"] != "decode", step["device"]))  # a decode step first
    kernels = gpu.kernel_totals
    is_kernel = kernels["op"] >= UNATTRIBUTED
    return {"label": gpu.label, "devices": gpu.devices, "source": SOURCE, "traced_graphs": gpu.traced_graphs,
            "graphs": gpu.graphs_on_gpu, "steps": steps, "top_kernels": top_kernels(gpu),
            "kernels": int(kernels.loc[is_kernel, "count"].sum()),
            "unattributed": int(kernels.loc[kernels["op"] == UNATTRIBUTED, "count"].sum()),
            "copies": int(kernels.loc[~is_kernel, "count"].sum())}  # fmt: skip


def top_kernels(gpu: GpuRun) -> list[KernelTime]:
    """The kernel functions (and copies) by the device's busy time they took."""
    kernels = gpu.kernel_totals
    if kernels.empty:
        return []
    kernels = kernels.assign(kernel=[gpu.short_names[int(i)] for i in kernels["name"]],
                             kind=np.select([kernels["op"] == MEMCPY, kernels["op"] == MEMSET],
                                            ["memcpy", "memset"], "kernel"))  # fmt: skip
    by_kernel = kernels.groupby(["kernel", "kind"], as_index=False)[["count", "busy", "time"]].sum()
    total = max(int(by_kernel["busy"].sum()), 1)
    by_kernel = by_kernel.sort_values(["busy", "kernel"], ascending=[False, True]).head(TOP_KERNELS)
    return [
        {"kernel": row.kernel, "kind": row.kind, "count": int(row.count), "time_ns": int(row.busy),
         "share": int(row.busy) / total, "mean_ns": float(row.time) / max(int(row.count), 1)}
        for row in by_kernel.itertuples()
    ]  # fmt: skip
