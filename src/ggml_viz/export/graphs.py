"""One graph (layers collapsed) or one layer of it, as Graphviz DOT, SVG or PNG: weights,
KV cache and inputs drawn apart from computations, labels with op and shape."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from .._errors import GgmlVizError
from ..analysis.graph_view import graph_view_of
from ..runformat.reader import Run
from .base import Exporter, ExportOptions

_FILL = {"weight": "#c9d3e6", "kv": "#e2cdea", "input": "#c7e3df", "external": "#eeeeee", "layer": "#cfe8f3"}


def default_graph(run: Run) -> int:
    graphs = run.graphs
    decode = graphs[graphs["phase"] == "decode"]
    chosen = decode if len(decode) else graphs
    if chosen.empty:
        raise GgmlVizError("the run holds no graph to draw")
    return int(chosen["graph_id"].iloc[0])


def graph_dot(run: Run, graph_id: int | None, layer: int | None) -> Any:
    """A graphviz.Digraph of the graph (or of one layer)."""
    import graphviz

    graph_id = default_graph(run) if graph_id is None else graph_id
    try:
        view = graph_view_of(run, graph_id, layer)
    except KeyError:
        raise GgmlVizError(f"the run has no graph {graph_id}") from None
    if layer is not None and layer not in view["layers"]:
        raise GgmlVizError(f"graph {graph_id} has no layer {layer} (layers: 0..{max(view['layers'], default=0)})")
    title = f"graph {graph_id}" + (f", layer {layer}" if layer is not None else ", layers collapsed")
    dot = graphviz.Digraph(
        name=f"graph_{graph_id}",
        graph_attr={"rankdir": "TB", "label": title, "fontname": "Helvetica"},
        node_attr={"shape": "box", "style": "rounded,filled", "fontname": "Helvetica", "fontsize": "10"},
        edge_attr={"fontname": "Helvetica", "fontsize": "8"},
    )
    leaves = graphviz.Digraph(
        name="cluster_leaves", graph_attr={"label": "weights, KV cache, inputs", "style": "dashed"}
    )
    for item in view["items"]:
        if item["kind"] == "layer":
            label = f"layer {item['layer']}\n{item['n_nodes']} nodes, {item['n_weights']} weights"
        else:
            label = f"{item['name']}\n{item.get('op') or item['kind']} {item.get('shape', '')}".rstrip()
        if item.get("duration_ns", -1) > 0:
            label += f"\n{item['duration_ns'] / 1000:.1f} µs"
        target = leaves if item["kind"] in ("weight", "kv", "input") else dot
        target.node(
            item["id"],
            label=label,
            fillcolor=_FILL.get(item["kind"], "#f6e3b4"),
            shape="note" if item["kind"] == "weight" else "box",
        )
    dot.subgraph(leaves)
    for link in view["links"]:
        dot.edge(link["from"], link["to"], label=link["label"] if layer is not None else "")
    return dot


class DotExporter(Exporter):
    name = "dot"
    requires = ("graphviz",)
    extensions = (".dot", ".gv")
    summary = "one graph (--graph, layers collapsed) or one layer of it (--layer) as Graphviz DOT"

    def export(self, run: Run, output: Path, options: ExportOptions) -> str:
        dot = graph_dot(run, options.graph_id, options.layer)
        output.write_text(dot.source, encoding="utf-8")
        return f"{output}: {dot.source.count(' -> '):,} edges"


class _GraphPictureExporter(Exporter):
    requires = ("graphviz",)

    def export(self, run: Run, output: Path, options: ExportOptions) -> str:
        if shutil.which("dot") is None:
            raise GgmlVizError("drawing a graph needs Graphviz's `dot` (apt-get install graphviz)")
        dot = graph_dot(run, options.graph_id, options.layer)
        output.write_bytes(dot.pipe(format=self.name))
        return f"{output}: {output.stat().st_size:,} bytes"


class SvgGraphExporter(_GraphPictureExporter):
    name = "svg"
    extensions = (".svg",)
    summary = "one graph or one layer drawn by Graphviz, as SVG"


class PngGraphExporter(_GraphPictureExporter):
    name = "png"
    extensions = (".png",)
    summary = "one graph or one layer drawn by Graphviz, as PNG"
