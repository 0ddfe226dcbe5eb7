"""The attention view's JSON (GET .../attention-index, .../attention): captured softmax weights."""

from __future__ import annotations

from typing import TypedDict


class AttentionIndexPayload(TypedDict):
    """GET /api/runs/{id}/attention-index"""

    graphs: dict[str, list[int]]  # graph id -> layers with captured attention
    heads: int
    flash_attention: bool


class AttentionPayload(TypedDict):
    """GET /api/runs/{id}/attention?graph=&layer=&head="""

    graph_id: int
    layer: int
    head: int
    heads: int
    query_labels: list[str]  # the graph's tokens
    query_positions: list[int]
    key_labels: list[str]  # the token at each KV cell, by position
    weights: list[list[float]]  # [query][key]
