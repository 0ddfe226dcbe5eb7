"""The runs view's JSON: the run list (GET /api/runs) and a live run's updates (the comparison of two
runs, GET /api/compare, is analysis.compare's RunComparison)."""

from __future__ import annotations

from typing import TypedDict


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
