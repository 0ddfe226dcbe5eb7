"""The experts view (GET .../experts) and the routing in a node's details: a mixture of experts'
load, layer by expert (tokens, bytes, estimated time), each request of a server apart, and the
experts each token of a graph chose in one layer."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ...analysis.breakdowns import requests
from ...analysis.moe import expert_devices
from ..context import RunContext
from ..payloads import ExpertsPayload, NodeRouting, RequestRouting

PROMPT_LABEL = 40  # characters of a request's prompt in its label


def experts(context: RunContext) -> ExpertsPayload:
    """Per MoE layer and expert: tokens routed, bytes read, share of the layer's expert time."""
    run = context.run
    table = run.moe_experts
    if table.empty:
        return {
            "layers": [],
            "n_expert": 0,
            "experts_per_token": 0,
            "tokens": [],
            "bytes": [],
            "time_share": [],
            "devices": [],
            "requests": [],
        }
    layers = sorted(int(layer) for layer in table["layer"].unique())
    n_expert = int(table["n_expert"].max())

    def matrix(column: str, kind: Any = int) -> list[list[Any]]:
        grid = table.pivot_table(index="layer", columns="expert", values=column, aggfunc="sum")
        grid = grid.reindex(index=layers, columns=range(n_expert)).fillna(0)
        return [[kind(value) for value in row] for row in grid.to_numpy()]

    placement = expert_devices(run).drop_duplicates("layer").set_index("layer")["device"]
    return {
        "layers": layers,
        "n_expert": n_expert,
        "experts_per_token": int(run.raw("moe_routing")["slot"].max()) + 1,
        "tokens": matrix("tokens"),
        "bytes": matrix("bytes_read"),
        "time_share": matrix("time_share", lambda value: round(float(value), 4)),
        "devices": [str(placement.get(layer, "?")) for layer in layers],
        "requests": _per_request(context, layers, n_expert),
    }


def _per_request(context: RunContext, layers: list[int], n_expert: int) -> list[RequestRouting]:
    """A server's requests, each with its own layer × expert load (none where there is one request).
    A routed token belongs to the latest request of its sequence begun by its graph's start."""
    run = context.run
    served = requests(run)
    if len(served) < 2:
        return []
    rows = run.moe_routing
    rows = rows[rows["sequence"].notna() & rows["layer"].notna()]
    starts = run.graphs.set_index("graph_id")["start_ns"] - context.origin_ns
    started = rows["graph_id"].map(starts).to_numpy()
    owner = np.full(len(rows), -1)
    for seq_id in {request["seq_id"] for request in served}:
        mine = [i for i, request in enumerate(served) if request["seq_id"] == seq_id]
        begins = np.array([served[i]["start_ns"] for i in mine])
        in_seq = (rows["sequence"] == seq_id).to_numpy()
        at = np.searchsorted(begins, started[in_seq], side="right") - 1
        owner[in_seq] = np.where(at >= 0, np.array(mine)[np.maximum(at, 0)], -1)
    rows = rows.assign(request=owner)
    found: list[RequestRouting] = []
    layer_at = {layer: i for i, layer in enumerate(layers)}
    for index, group in rows[rows["request"] >= 0].groupby("request"):
        grid = np.zeros((len(layers), n_expert), dtype=np.int64)
        counts = group.groupby(["layer", "expert"]).size()
        for (layer, expert), count in counts.items():
            if int(layer) in layer_at and 0 <= int(expert) < n_expert:
                grid[layer_at[int(layer)], int(expert)] = int(count)
        request = served[int(index)]
        prompt = request["prompt"].replace("\n", " ")
        label = f"sequence {request['seq_id']} at {request['start_ns'] / 1e6:,.1f} ms: {prompt[:PROMPT_LABEL]!r}"
        found.append({"label": label, "seq_id": int(request["seq_id"]), "tokens": grid.tolist()})
    return found


def node_routing(context: RunContext, graph_id: int, node_index: int) -> NodeRouting | None:
    """The routing of the MoE layer a MUL_MAT_ID node belongs to, in its graph: each token the
    layer computed, its experts and their weights. None for another node, or none recorded."""
    run = context.run
    by_ids = run.expert_nodes
    if by_ids.empty:
        return None
    structure = int(context.graphs.loc[context.graphs["graph_id"] == graph_id, "structure_id"].iloc[0])
    mine = by_ids[(by_ids["structure_id"] == structure) & (by_ids["node_index"] == node_index)]
    if mine.empty:
        return None
    routed_at = int(mine["routed_at"].iloc[0])
    raw = run.raw("moe_routing")
    rows = raw[(raw["graph_id"] == graph_id) & (raw["node_index"] == routed_at)].sort_values(["row", "slot"])
    if rows.empty:
        return None
    tokens = run.tokens[run.tokens["graph_id"] == graph_id].reset_index(drop=True)
    positions, texts, chosen, weights = [], [], [], []
    for (_, token_index), group in rows.groupby(["row", "token_index"], sort=True):
        known = 0 <= int(token_index) < len(tokens)
        positions.append(int(tokens["pos"].iloc[int(token_index)]) if known else -1)
        texts.append(str(tokens["text"].iloc[int(token_index)]) if known else "")
        chosen.append([int(e) for e in group["expert"]])
        weights.append([None if pd.isna(w) else round(float(w), 5) for w in group["weight"]])
    layer = mine["layer"].iloc[0]
    return {
        "layer": int(layer) if layer >= 0 else None,
        "n_expert": int(mine["n_expert"].iloc[0]),
        "tokens": {"position": positions, "text": texts, "experts": chosen, "weights": weights},
    }
