"""The statistics view's JSON (GET .../stats): node time, bytes and counts by op, layer and tensor."""

from __future__ import annotations

from typing import TypedDict

from ...analysis.summary import FoundSection


class _StatsRow(TypedDict):
    count: int
    time_ns: int
    wait_ns: int
    bytes: int  # written
    timed: int
    mean_ns: float | None
    time_share: float
    bytes_share: float
    clock: str | None  # where the time comes from: "host", "gpu", "host+gpu"; None: not timed


class OpStats(_StatsRow):
    op: str


class LayerStats(_StatsRow):
    layer: int | str  # "none": nodes outside layers


class TensorStats(_StatsRow):
    tensor: str


class LayerActivation(TypedDict):
    """--values stats of a layer's node outputs."""

    layer: int | str
    min: float | None
    max: float | None
    mean_abs: float | None
    nan: int
    inf: int
    nodes: int


class TimeSource(TypedDict):
    """One clock the statistics' node times come from."""

    clock: str  # "host" or "gpu"
    label: str  # in words: "host clock (inline timing)", "GPU time (CUDA0, CUPTI kernel records, ...)"
    timed: int  # node events it timed
    time_ns: int


class StatsPayload(TypedDict):
    """GET /api/runs/{id}/stats"""

    total_time_ns: int
    time_sources: list[TimeSource]
    by_op: list[OpStats]
    by_layer: list[LayerStats]
    by_tensor: list[TensorStats]  # the top 500
    findings: list[str]
    sections: list[FoundSection]  # titled findings (plugins' summary sections), each shown apart
    activation_by_layer: list[LayerActivation]  # empty without --values stats
