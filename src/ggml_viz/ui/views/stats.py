"""The statistics view (GET .../stats): node time, bytes written and counts by op, layer and tensor, from
the run's node totals (never its events), where those times come from, and --values stats per layer."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ...analysis.rows import plain, records
from ...analysis.summary import timing_label
from ...layers import NO_LAYER
from ...runformat.memory_sources import VIEW_OPS
from ..context import RunContext, json_safe
from ..gpu import GpuRun
from ..payloads import LayerActivation, RunSummary, StatsPayload, TimeSource


def statistics(context: RunContext, gpu: GpuRun | None, summary: RunSummary) -> StatsPayload:
    """By op, layer and tensor, from the run's node totals (never its events); the findings are the
    summary's."""
    totals = context.run.node_totals
    # A view (VIEW, RESHAPE, PERMUTE, TRANSPOSE) writes nothing: its bytes are its source's.
    written = totals["nbytes"].fillna(0).where(~totals["op_base"].isin(VIEW_OPS), 0).astype(np.int64)
    frame = pd.DataFrame(
        {
            "op": totals["op"].to_numpy(object),
            "layer": totals["layer"].fillna(NO_LAYER).astype(np.int64).to_numpy(),
            "tensor": totals["name"].to_numpy(object),
            "count": totals["graphs"].to_numpy(np.int64),  # node events
            "duration": totals["time_ns"].to_numpy(np.int64),
            "wait": totals["wait_ns"].fillna(0).to_numpy(np.int64),
            "bytes": (written * totals["graphs"]).to_numpy(np.int64),
            "timed": totals["timed"].to_numpy(np.int64),
            "clock": totals["clock"].to_numpy(object),
        }
    )
    total_time = int(frame["duration"].sum())
    total_bytes = int(frame["bytes"].sum())

    def table(key: str) -> list[Any]:  # rows of OpStats, LayerStats or TensorStats
        grouped = frame.groupby(key).agg(
            count=("count", "sum"),
            time_ns=("duration", "sum"),
            wait_ns=("wait", "sum"),
            bytes=("bytes", "sum"),
            timed=("timed", "sum"),
            clock=("clock", _clocks),
        )
        grouped["mean_ns"] = grouped["time_ns"] / grouped["timed"].where(grouped["timed"] > 0)
        grouped["time_share"] = grouped["time_ns"] / total_time if total_time else 0.0
        grouped["bytes_share"] = grouped["bytes"] / total_bytes if total_bytes else 0.0
        grouped = grouped.sort_values("time_ns", ascending=False).reset_index()
        if key == "layer":
            grouped["layer"] = grouped["layer"].map(lambda layer: "none" if layer == NO_LAYER else int(layer))
        return json_safe(records(grouped))

    by_op, by_layer, by_tensor = table("op"), table("layer"), table("tensor")
    return {
        "total_time_ns": total_time,
        "time_sources": time_sources(context, gpu),
        "by_op": by_op,
        "by_layer": by_layer,
        "by_tensor": by_tensor[:500],
        "findings": summary["findings"],
        "sections": summary["sections"],
        "activation_by_layer": activation_by_layer(context),
    }


def activation_by_layer(context: RunContext) -> list[LayerActivation]:
    """--values stats per layer: the range of its nodes' outputs, their mean |x|, non-finite counts."""
    values = context.run.values
    if values.empty:
        return []
    values = values.assign(layer=values["layer"].astype("object").where(values["layer"].notna(), "none"))
    table = values.groupby("layer", sort=False).agg(
        min=("min", "min"),
        max=("max", "max"),
        mean_abs=("mean_abs", "mean"),
        nan=("nan", "sum"),
        inf=("inf", "sum"),
        nodes=("node_index", "size"),
    )
    order = sorted(table.index, key=lambda layer: (layer == "none", layer if layer != "none" else 0))
    return json_safe([{"layer": layer, **{k: plain(v) for k, v in table.loc[layer].items()}} for layer in order])


def time_sources(context: RunContext, gpu: GpuRun | None) -> list[TimeSource]:
    """Where the node times of the statistics come from: the host's clock, the GPU's, both."""
    totals = context.run.node_totals
    timing = (context.run.manifest.get("capture") or {}).get("timing")
    labels = {
        "host": f"timing {timing_label(timing)}" if timing else "host clock",
        "gpu": gpu.label if gpu is not None else "GPU time",
    }
    sources: list[TimeSource] = []
    for clock in ("host", "gpu"):
        rows = totals[totals["clock"] == clock]
        if len(rows):
            sources.append(
                {
                    "clock": clock,
                    "label": labels[clock],
                    "timed": int(rows["timed"].sum()),
                    "time_ns": int(rows["time_ns"].sum()),
                }
            )
    return sources


def _clocks(clocks: pd.Series) -> str | None:
    """The clocks that timed a group of nodes: "host", "gpu", "host+gpu"; None: none."""
    found = sorted(set(clocks.dropna().tolist()), key=["host", "gpu"].index)
    return "+".join(found) or None
