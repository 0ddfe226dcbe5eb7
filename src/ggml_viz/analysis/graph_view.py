"""The computation graph view: one graph, its layers collapsed or one layer expanded, laid
out in rows for the browser to draw.

A whole model's graph (a thousand nodes) is unreadable drawn at once, so the collapsed
view shows one box per transformer layer (with its node count and time) between the
nodes outside any layer; expanding a layer shows its nodes, with the weights, KV cache
and inputs they read drawn apart in a band on the left, and the nodes of other layers
that feed it as small stubs. Rows are a longest-path layering of the DAG; within a row,
items are ordered by the mean position of what feeds them (two barycenter sweeps), which
keeps a transformer layer's few crossings few.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any, TypedDict

import pandas as pd

from ..layers import NO_LAYER

_KV_CACHE = re.compile(r"^cache_[kv]_l\d+")


class _TensorFields(TypedDict):
    name: str
    op: str
    type: str
    shape: str  # "4096×32": its dimensions, trailing ones left out


class _ItemFields(TypedDict):
    id: str  # "n12" a node, "L3" a collapsed layer, "t7" a leaf tensor
    kind: str  # "node", "layer", "weight", "kv", "input", "external"
    layer: int | None
    name: str
    op: str
    duration_ns: int  # -1: not timed


class _Item(_ItemFields, total=False):
    """An item before it is placed."""

    node_index: int  # nodes
    type: str  # nodes and leaves
    shape: str
    n_nodes: int  # layers
    n_weights: int
    reads_kv: bool
    n_inputs: int


class GraphItem(_Item):
    """A box of the graph, placed."""

    x: int  # column
    y: int  # row
    band: int  # columns of the leaves' band, left of the computations


GraphLink = TypedDict("GraphLink", {"from": str, "to": str, "label": str, "count": int})


class GraphLayout(TypedDict):
    """One graph laid out (graph_view; GET /api/runs/{id}/graph/{graph_id}?layer=)."""

    graph_id: int
    layer: int | None  # None: every layer collapsed
    layers: list[int]
    items: list[GraphItem]
    links: list[GraphLink]
    columns: int
    rows: int


def leaf_kind(name: str) -> str:
    """weight (from the model file), kv (the KV cache) or input (tokens, positions, masks)."""
    if _KV_CACHE.match(name):
        return "kv"
    if name.endswith((".weight", ".bias")) or name.startswith(("blk.", "token_embd", "output")):
        return "weight"
    return "input"


def graph_view(
    nodes: pd.DataFrame,
    edges: pd.DataFrame,
    tensors: pd.DataFrame,
    duration_by_node: dict[int, int],
    layer: int | None,
    graph_id: int,
) -> GraphLayout:
    """Items (boxes) and links of one graph structure: collapsed (`layer` None) or one layer
    open. `nodes` are the structure's rows of `structure_nodes`, with each node's layer."""
    described = tensors.set_index("tensor_id")
    node_tensor = dict(zip(nodes["node_index"].tolist(), nodes["tensor_id"].tolist(), strict=True))
    producer = {tensor: index for index, tensor in node_tensor.items()}  # tensor id -> node index
    layer_of_node = {
        index: int(value) if value != NO_LAYER else None
        for index, value in zip(nodes["node_index"].tolist(), nodes["layer"].tolist(), strict=True)
    }
    layers = sorted({value for value in layer_of_node.values() if value is not None})
    items: dict[str, _Item] = {}
    links: dict[tuple[str, str], GraphLink] = {}

    def tensor_fields(tensor: int) -> _TensorFields:
        row = described.loc[tensor]
        dims = [int(row[f"ne{d}"]) for d in range(4)]
        while len(dims) > 1 and dims[-1] == 1:
            dims.pop()
        return {"name": row["name"], "op": row["op"], "type": row["type"], "shape": "×".join(map(str, dims))}

    def node_item(index: int) -> str:
        key = f"n{index}"
        if key not in items:
            duration = duration_by_node.get(index, -1)
            items[key] = {
                "id": key,
                "kind": "node",
                "node_index": index,
                "layer": layer_of_node[index],
                "duration_ns": duration,
                **tensor_fields(node_tensor[index]),
            }
        return key

    def layer_item(number: int) -> str:
        key = f"L{number}"
        if key not in items:
            members = [i for i, value in layer_of_node.items() if value == number]
            durations = [duration_by_node.get(i, -1) for i in members]
            items[key] = {
                "id": key,
                "kind": "layer",
                "layer": number,
                "name": f"layer {number}",
                "op": "",
                "n_nodes": len(members),
                "duration_ns": sum(d for d in durations if d > 0),
                "n_weights": 0,
                "reads_kv": False,
                "n_inputs": 0,
            }
        return key

    def leaf_item(tensor: int) -> str:
        key = f"t{tensor}"
        if key not in items:
            fields = tensor_fields(tensor)
            items[key] = {"id": key, "kind": leaf_kind(fields["name"]), "layer": None, "duration_ns": -1, **fields}
        return key

    def link(source: str, target: str, label: str) -> None:
        if source == target:
            return
        entry = links.setdefault((source, target), {"from": source, "to": target, "label": label, "count": 0})
        entry["count"] += 1

    sources_of: dict[int, list[int]] = defaultdict(list)
    for index, source_tensor in zip(edges["node_index"].tolist(), edges["src_tensor_id"].tolist(), strict=True):
        sources_of[index].append(int(source_tensor))
    for index in nodes["node_index"].tolist():
        own_layer = layer_of_node[index]
        if layer is None:
            target = layer_item(own_layer) if own_layer is not None else node_item(index)
        elif own_layer == layer:
            target = node_item(index)
        else:
            continue
        for source_tensor in sources_of[index]:
            if source_tensor in producer:
                source_index = producer[source_tensor]
                source_layer = layer_of_node[source_index]
                if layer is None:
                    source = layer_item(source_layer) if source_layer is not None else node_item(source_index)
                elif source_layer == layer:
                    source = node_item(source_index)
                else:  # fed from outside the open layer: a stub
                    source = node_item(source_index)
                    items[source]["kind"] = "external"
                link(source, target, tensor_fields(source_tensor)["shape"])
                continue
            kind = leaf_kind(str(described.at[source_tensor, "name"]))
            if layer is None and target.startswith("L"):  # a layer's leaves: counted on its box
                items[target]["n_weights"] += kind == "weight"
                items[target]["reads_kv"] |= kind == "kv"
                items[target]["n_inputs"] += kind == "input"
                continue
            if layer is None and kind != "input":
                continue
            link(leaf_item(source_tensor), target, tensor_fields(source_tensor)["shape"])
    places, band = _place(items, links)
    placed: list[GraphItem] = [
        {**item, "y": places[key][0], "x": places[key][1], "band": band} for key, item in items.items()
    ]
    return {
        "graph_id": graph_id,
        "layer": layer,
        "layers": layers,
        "items": placed,
        "links": list(links.values()),
        "columns": max((item["x"] for item in placed), default=0) + 1,
        "rows": max((item["y"] for item in placed), default=0) + 1,
    }


def _place(items: dict[str, _Item], links: dict[tuple[str, str], GraphLink]) -> tuple[dict[str, tuple[int, int]], int]:
    """Give every item a row (y) and a column (x), returned by key as (y, x) with the leaves'
    band's width: computations in rows by longest path, leaves (weights, KV cache, inputs) in a
    band of columns on the left, beside the row of the first item that reads them."""
    incoming: dict[str, list[str]] = defaultdict(list)
    outgoing: dict[str, list[str]] = defaultdict(list)
    for source, target in links:
        incoming[target].append(source)
        outgoing[source].append(target)
    leaves = {key for key, item in items.items() if item["kind"] in ("weight", "kv", "input")}
    computations = [key for key in items if key not in leaves]
    order = {key: position for position, key in enumerate(items)}  # insertion = execution order
    row: dict[str, int] = {}
    for key in sorted(computations, key=order.__getitem__):
        feeding = [row[source] for source in incoming[key] if source in row]
        row[key] = max(feeding, default=-1) + 1
    by_row: dict[int, list[str]] = defaultdict(list)
    for key in sorted(computations, key=order.__getitem__):
        by_row[row[key]].append(key)
    # Order within rows: two downward sweeps by the mean column of what feeds each item.
    column: dict[str, float] = {}
    for _ in range(2):
        for number in sorted(by_row):
            keys = by_row[number]
            for position, key in enumerate(keys):
                fed_from = [column[source] for source in incoming[key] if source in column]
                column[key] = sum(fed_from) / len(fed_from) if fed_from else column.get(key, float(position))
            keys.sort(key=lambda key: (column[key], order[key]))
            for position, key in enumerate(keys):
                column[key] = position
    band = 0
    places: dict[str, tuple[int, int]] = {}
    leaf_rows: dict[int, int] = defaultdict(int)
    for key in sorted(leaves, key=order.__getitem__):
        readers = [row[target] for target in outgoing[key] if target in row]
        leaf_row = min(readers, default=0)
        places[key] = (leaf_row, leaf_rows[leaf_row])
        leaf_rows[leaf_row] += 1
        band = max(band, leaf_rows[leaf_row])
    for key in computations:
        places[key] = (row[key], band + int(column[key]))
    return places, band


def graph_view_of(run: Any, graph_id: int, layer: int | None) -> GraphLayout:
    """graph_view for one graph of a run (a ggml_viz Run), node times from its node_times."""
    graphs = run.graphs
    rows = graphs[graphs["graph_id"] == graph_id]
    if rows.empty:
        raise KeyError(graph_id)
    structure_id = int(rows["structure_id"].iloc[0])
    nodes = run.raw("structure_nodes")
    nodes = nodes[nodes["structure_id"] == structure_id].sort_values("node_index")
    edges = run.raw("edges")
    edges = edges[edges["structure_id"] == structure_id]
    times = run.raw("node_times")
    times = times[times["graph_id"] == graph_id]
    durations = dict(zip(times["node_index"].tolist(), (times["end_ns"] - times["start_ns"]).tolist(), strict=True))
    return graph_view(nodes, edges, run.raw("tensors"), durations, layer, graph_id)
