"""The graph view (GET .../graphs, .../graph/{id}): the run's graphs, and one graph's nodes and links laid
out (a layer open or every layer collapsed), each node with its time."""

from __future__ import annotations

import numpy as np

from ...analysis.graph_view import graph_view
from ..context import RunContext
from ..gpu import GpuRun
from ..payloads import GraphLayout, GraphListEntry


def graph_list(context: RunContext) -> list[GraphListEntry]:
    graphs = context.graphs
    return [
        {"graph_id": int(g), "phase": p, "n_nodes": int(n), "duration_ns": int(e - s), "label": label}
        for g, p, n, s, e, label in zip(
            graphs["graph_id"],
            graphs["phase"],
            graphs["n_nodes"],
            graphs["start_ns"],
            graphs["end_ns"],
            context.graph_labels,
            strict=True,
        )
    ]


def graph_layout(context: RunContext, gpu: GpuRun | None, graph_id: int, layer: int | None) -> GraphLayout:
    """One graph laid out; KeyError: no such graph."""
    rows = context.graphs[context.graphs["graph_id"] == graph_id]
    if rows.empty:
        raise KeyError(graph_id)
    structure_id = int(rows["structure_id"].iloc[0])
    nodes = context.run.raw("structure_nodes")
    nodes = nodes[nodes["structure_id"] == structure_id].sort_values("node_index")
    edges = context.run.raw("edges")
    edges = edges[edges["structure_id"] == structure_id]
    row = context.graph_rows(np.array([graph_id]))
    events, start, end, _ = context.timed_events_of(row)
    nodes_timed = events - context.graph_first_event[row[0]]
    duration_by_node = {node: -1 for node in nodes["node_index"].tolist()}
    duration_by_node.update(zip(nodes_timed.tolist(), (end - start).tolist(), strict=True))
    if not len(events) and gpu is not None:  # a GPU's graph: the host timed none of its nodes
        duration_by_node.update(gpu.graph_node_times(graph_id))
    return graph_view(nodes, edges, context.tensors, duration_by_node, layer, graph_id)
