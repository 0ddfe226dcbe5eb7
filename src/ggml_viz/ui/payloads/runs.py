"""The runs view's JSON: the run list (GET /api/runs), a live run's updates and the comparison of two
runs."""

from __future__ import annotations

from typing import Any, TypedDict


class RunListEntry(TypedDict):
    run_id: str
    name: str  # the run directory's name
    status: str | None  # "recording", "complete", "incomplete"
    created: str | None
    model: str | None
    graphs: int | None


class RunsPayload(TypedDict):
    """GET /api/runs"""

    runs: list[RunListEntry]
    live: bool  # the viewer follows runs being recorded


class LiveUpdate(TypedDict):
    """Each message of GET /api/runs/{id}/live (server-sent events): what a view other than
    the overview needs to draw the grown run (the overview's summary is fetched when shown)."""

    graphs: int
    status: str
    duration_ns: int
    ops: list[str]


class SettingPair(TypedDict):
    a: Any
    b: Any


class PhaseSpeeds(TypedDict, total=False):
    a: float  # tokens per second; a side without that phase has no entry
    b: float


class _TimeDeltaBase(TypedDict):
    phase: str
    a_ns: float  # per graph
    b_ns: float
    delta_ns: float
    ratio: float | None


class TimeDelta(_TimeDeltaBase, total=False):
    op: str  # the key the rows are grouped by: one of these three
    layer: str
    name: str


class ComparisonPayload(TypedDict):
    """GET /api/compare?a=&b="""

    a: str  # paths
    b: str
    settings_that_differ: dict[str, SettingPair]
    tokens_per_s: dict[str, PhaseSpeeds]  # by phase
    per_graph_time_by: dict[str, list[TimeDelta]]  # by "op", "layer", "name": the largest changes
