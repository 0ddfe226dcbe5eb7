"""The experts view's JSON (GET .../experts): a mixture of experts' routing, layer by expert."""

from __future__ import annotations

from typing import TypedDict


class RequestRouting(TypedDict):
    """One request's routing (a server's): the (token, slot) rows each expert computed for it."""

    label: str  # its sequence, when it began and how its prompt begins
    seq_id: int
    tokens: list[list[int]]  # [layer][expert]


class ExpertsPayload(TypedDict):
    """GET /api/runs/{id}/experts (an empty `layers`: no routing recorded)"""

    layers: list[int]
    n_expert: int
    experts_per_token: int
    tokens: list[list[int]]  # [layer][expert]: (token, slot) rows routed to it
    bytes: list[list[int]]  # [layer][expert]: bytes of its weights read (once per graph that chose it)
    time_share: list[list[float]]  # [layer][expert]: estimated share of the layer's MUL_MAT_ID time
    devices: list[str]  # per layer: the device its experts' weights live on
    requests: list[RequestRouting]  # a server's requests, each apart (none for one request)


class TokenRouting(TypedDict):
    """Columnar: one entry per token of the node's graph the layer computed."""

    position: list[int]
    text: list[str]
    experts: list[list[int]]  # the router's choices, best first
    weights: list[list[float | None]]


class NodeRouting(TypedDict):
    """In a node's details: the routing of its MoE layer in its graph."""

    layer: int | None
    n_expert: int
    tokens: TokenRouting
