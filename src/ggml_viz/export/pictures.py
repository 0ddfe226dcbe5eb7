"""Static pictures for papers and slides (matplotlib): the timeline and the memory heatmap."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .._errors import GgmlVizError
from ..analysis.memory import weight_reads_by_name
from ..runformat.reader import Run
from .base import Exporter, ExportOptions, timed_events

_PALETTE = [
    "#4e79a7",
    "#f28e2b",
    "#e15759",
    "#76b7b2",
    "#59a14f",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
    "#bab0ac",
    "#6cb6ff",
    "#d37295",
    "#a0cbe8",
    "#ffbe7d",
    "#8cd17d",
    "#b6992d",
]
MAX_BARS = 200_000  # beyond this the nodes are drawn as each graph's dominant op


def _figure(width: float, height: float):  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(width, height), dpi=150)


class _Picture(Exporter):
    picture_format = ""
    requires = ("matplotlib",)

    def save(self, figure, output: Path) -> str:  # type: ignore[no-untyped-def]
        import matplotlib.pyplot as plt

        figure.savefig(output, format=self.picture_format, bbox_inches="tight")
        plt.close(figure)
        return f"{output}: {output.stat().st_size:,} bytes"


class _TimelinePicture(_Picture):
    def export(self, run: Run, output: Path, options: ExportOptions) -> str:
        events = timed_events(run)
        if run.graphs.empty:
            raise GgmlVizError("the run holds no graph to draw")
        origin = int(run.graphs["start_ns"].min())
        figure, axes = _figure(12, 3.2)
        ops = sorted(set(events["op"]))
        color = {op: _PALETTE[i % len(_PALETTE)] for i, op in enumerate(ops)}
        graphs = run.graphs
        axes.broken_barh(
            list(zip((graphs["start_ns"] - origin) / 1e6, (graphs["end_ns"] - graphs["start_ns"]) / 1e6, strict=True)),
            (1.1, 0.8),
            facecolors="#8593ad",
        )
        if len(events) <= MAX_BARS:
            for op, group in events.groupby("op"):
                spans = list(
                    zip((group["start_ns"] - origin) / 1e6, (group["end_ns"] - group["start_ns"]) / 1e6, strict=True)
                )
                axes.broken_barh(spans, (0, 0.9), facecolors=color[op], label=op)
        else:
            totals = events.assign(d=events["end_ns"] - events["start_ns"]).groupby(["graph_id", "op"])["d"].sum()
            dominant = totals.groupby(level=0).idxmax().map(lambda key: key[1])
            for op in ops:
                chosen = graphs[graphs["graph_id"].map(dominant) == op]
                spans = list(
                    zip((chosen["start_ns"] - origin) / 1e6, (chosen["end_ns"] - chosen["start_ns"]) / 1e6, strict=True)
                )
                axes.broken_barh(spans, (0, 0.9), facecolors=color[op], label=op)
        axes.set_yticks([0.45, 1.5], ["nodes", "graphs"])
        axes.set_xlabel("time since the first graph (ms)")
        axes.set_title(f"{run.path.name}: {len(events):,} node events in {len(graphs):,} graphs")
        axes.legend(ncol=min(8, len(ops)), fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.3), frameon=False)
        return self.save(figure, output)


class _MemoryPicture(_Picture):
    def export(self, run: Run, output: Path, options: ExportOptions) -> str:
        regions = run.memory_map
        tensors = regions[regions["kind"] == "tensor"]
        if tensors.empty:
            raise GgmlVizError("the run holds no model-file map to draw")
        reads = weight_reads_by_name(run)["reads"]
        values = tensors["name"].map(reads).fillna(0).to_numpy(dtype=float)
        figure, axes = _figure(12, 1.8)
        import matplotlib.cm as cm

        norm = values.max() or 1.0
        colors = cm.viridis(np.sqrt(values / norm))
        size = float(regions["end"].max())
        axes.broken_barh(
            list(zip(tensors["start"] / 2**20, (tensors["end"] - tensors["start"]) / 2**20, strict=True)),
            (0, 1),
            facecolors=colors,
        )
        axes.set_xlim(0, size / 2**20)
        axes.set_yticks([])
        axes.set_xlabel("file offset (MiB); color: reads of each tensor over the run (square-root scale)")
        axes.set_title(f"{Path(str(tensors['model_path'].iloc[0])).name}: {len(tensors):,} tensors")
        return self.save(figure, output)


class TimelineSvgExporter(_TimelinePicture):
    name, extensions, picture_format = "timeline-svg", (".timeline.svg",), "svg"
    summary = "a static picture of the timeline (graphs and nodes by op), SVG"


class TimelinePngExporter(_TimelinePicture):
    name, extensions, picture_format = "timeline-png", (".timeline.png",), "png"
    summary = "a static picture of the timeline, PNG"


class MemorySvgExporter(_MemoryPicture):
    name, extensions, picture_format = "memory-svg", (".memory.svg",), "svg"
    summary = "a static picture of the model file's heatmap (reads per tensor by file offset), SVG"


class MemoryPngExporter(_MemoryPicture):
    name, extensions, picture_format = "memory-png", (".memory.png",), "png"
    summary = "a static picture of the model file's heatmap, PNG"
