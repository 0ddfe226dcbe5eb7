"""The graph view's JSON (GET .../graphs, .../graph/{id}): the graphs, and one graph laid out."""

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


class _GraphItemBase(TypedDict):
    id: str  # "n12" a node, "L3" a collapsed layer, "t7" a leaf tensor
    kind: str  # "node", "layer", "weight", "kv", "input", "external"
    layer: int | None
    name: str
    op: str
    duration_ns: int  # -1: not timed
    x: int  # column
    y: int  # row
    band: int  # columns of the leaves' band, left of the computations


class GraphItem(_GraphItemBase, total=False):
    node_index: int  # nodes
    type: str  # nodes and leaves
    shape: str
    n_nodes: int  # layers
    n_weights: int
    reads_kv: bool
    n_inputs: int


GraphLink = TypedDict("GraphLink", {"from": str, "to": str, "label": str, "count": int})


class GraphPayload(TypedDict):
    """GET /api/runs/{id}/graph/{graph_id}?layer="""

    graph_id: int
    layer: int | None  # None: every layer collapsed
    layers: list[int]
    items: list[GraphItem]
    links: list[GraphLink]
    columns: int
    rows: int
