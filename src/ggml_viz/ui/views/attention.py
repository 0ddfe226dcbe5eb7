"""The attention view (GET .../attention-index, .../attention): which graphs and layers have captured
softmax weights, and one head's weights, queries (the graph's tokens) by keys (KV cells)."""

from __future__ import annotations

import numpy as np

from ..context import RunContext
from ..payloads import AttentionIndexPayload, AttentionPayload


def attention_index(context: RunContext) -> AttentionIndexPayload:
    """The captured softmax tensors (kq_soft_max-L): per graph, the layers, and the heads."""
    run = context.run
    captures = run.captures
    softmax = captures[captures["name"].str.match(r"^kq_soft_max-\d+$")]
    flash = any(str(c.get("flash_attn")) in ("on", "True", "1") for c in run.manifest.get("contexts", []))
    graphs: dict[int, list[int]] = {}
    for row in softmax.itertuples():
        graphs.setdefault(int(row.graph_id), []).append(int(row.name.rsplit("-", 1)[1]))
    heads = int(softmax["ne2"].max()) if len(softmax) else 0
    return {
        "graphs": {str(g): sorted(layers) for g, layers in graphs.items()},
        "heads": heads,
        "flash_attention": flash,
    }


def attention_weights(context: RunContext, graph_id: int, layer: int, head: int) -> AttentionPayload:
    """One head's attention in one graph: queries (the graph's tokens) × keys (KV cells);
    KeyError: nothing captured for that graph, layer and head."""
    run = context.run
    captures = run.captures
    rows = captures[(captures["graph_id"] == graph_id) & (captures["name"] == f"kq_soft_max-{layer}")]
    if rows.empty:
        raise KeyError((graph_id, layer))
    weights = run.captured(graph_id, int(rows["node_index"].iloc[0]))  # (1, heads, queries, keys)
    if not 0 <= head < weights.shape[1]:
        raise KeyError(head)
    matrix = weights[0, head]
    tokens = run.tokens
    graphs = context.graphs
    context_id = int(graphs.loc[graphs["graph_id"] == graph_id, "context_id"].iloc[0])
    contexts = graphs.set_index("graph_id")["context_id"]
    seen = tokens[tokens["graph_id"].map(contexts) == context_id]
    seen = seen[seen["graph_id"] <= graph_id]
    text_at = dict(zip(seen["pos"], seen["text"], strict=False))  # the latest token at each position
    queries = tokens[tokens["graph_id"] == graph_id]
    used = max(text_at, default=-1) + 1
    return {
        "graph_id": graph_id,
        "layer": layer,
        "head": head,
        "heads": int(weights.shape[1]),
        "query_labels": queries["text"].tolist(),
        "query_positions": queries["pos"].tolist(),
        "key_labels": [text_at.get(position, "") for position in range(used)],
        "weights": np.round(matrix[:, :used], 5).tolist(),
    }
