"""Profiles for tools that read timings: speedscope's flame graph and TensorBoard's event files."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from ..analysis.components import node_components
from ..analysis.summary import timed_nodes
from ..runformat.reader import Run
from .base import Exporter, ExportOptions


def layer_label(layer: object) -> str:
    return "outside layers" if pd.isna(layer) else f"layer {int(layer)}"  # type: ignore[call-overload]


class SpeedscopeExporter(Exporter):
    name = "speedscope"
    extensions = (".speedscope.json",)
    summary = "a flame graph of time by layer > component (attention, FFN, norm, output) > op > tensor"

    def export(self, run: Run, output: Path, options: ExportOptions) -> str:
        nodes = timed_nodes(run)
        stacks = pd.DataFrame(
            {
                "layer": nodes["layer"].map(layer_label),
                "component": node_components(run, nodes),
                "op": nodes["op"],
                "tensor": nodes["name"],
                "time": nodes["duration_ns"].astype("int64"),
            }
        )
        totals = stacks.groupby(["layer", "component", "op", "tensor"], sort=False)["time"].sum().reset_index()
        frames: list[dict[str, str]] = []
        index: dict[str, int] = {}

        def frame(name: str) -> int:
            if name not in index:
                index[name] = len(frames)
                frames.append({"name": name})
            return index[name]

        samples = [[frame(r.layer), frame(r.component), frame(r.op), frame(r.tensor)] for r in totals.itertuples()]
        weights = totals["time"].tolist()
        document = {
            "$schema": "https://www.speedscope.app/file-format-schema.json",
            "name": run.path.name,
            "exporter": "ggml-viz",
            "shared": {"frames": frames},
            "profiles": [
                {
                    "type": "sampled",
                    "name": f"{run.path.name}: node time",
                    "unit": "nanoseconds",
                    "startValue": 0,
                    "endValue": int(sum(weights)),
                    "samples": samples,
                    "weights": weights,
                }
            ],
        }
        output.write_text(json.dumps(document), encoding="utf-8")
        return f"{len(samples):,} stacks, {sum(weights) / 1e6:,.1f} ms of node time"


class TensorBoardExporter(Exporter):
    name = "tensorboard"
    extensions = (".tensorboard", ".tb")
    summary = "TensorBoard event files: per-token latency, per-op time histograms, per-layer times"

    def export(self, run: Run, output: Path, options: ExportOptions) -> str:
        from tensorboardX import SummaryWriter

        output.mkdir(parents=True, exist_ok=True)
        graphs = run.graphs
        nodes = timed_nodes(run)
        writer = SummaryWriter(logdir=str(output))
        try:
            for step, row in enumerate(graphs.itertuples()):
                seconds = (row.end_ns - row.start_ns) / 1e9
                writer.add_scalar(f"latency_ms/{row.phase}", seconds * 1e3, step)
                if row.n_tokens:
                    writer.add_scalar(f"tokens_per_s/{row.phase}", row.n_tokens / seconds if seconds else 0.0, step)
            for step, (_, group) in enumerate(nodes.groupby("graph_id")):
                for op, times in group.groupby("op")["duration_ns"]:
                    writer.add_histogram(f"op_time_us/{op}", times.to_numpy(dtype="float64") / 1e3, step)
                tags = group["layer"].map(layer_label).str.replace(" ", "_")  # TensorBoard tags take no spaces
                for layer, times in group.groupby(tags)["duration_ns"]:
                    writer.add_scalar(f"layer_time_us/{layer}", float(times.sum()) / 1e3, step)
                options.progress(step + 1, len(graphs))
        finally:
            writer.close()
        return f"{output}/: {len(graphs):,} steps (one per graph)"
