"""The graph view's JSON (GET .../graphs, .../graph/{id}): the graphs (one graph laid out is
analysis.graph_view's GraphLayout)."""

from __future__ import annotations

from typing import TypedDict


class GraphListEntry(TypedDict):
    graph_id: int
    phase: str
    n_nodes: int
    duration_ns: int
    label: str


class GraphListPayload(TypedDict):
    """GET /api/runs/{id}/graphs"""

    graphs: list[GraphListEntry]
