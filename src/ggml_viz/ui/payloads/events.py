"""The event log's JSON (GET .../events, .../event/{n}, .../search): node events as rows."""

from __future__ import annotations

from typing import TypedDict


class EventRow(TypedDict):
    """GET /api/runs/{id}/event/{event}, and each row of the event log and of a search."""

    event: int
    graph_id: int
    node_index: int
    start_ns: int | None
    duration_ns: int | None
    wait_ns: int | None  # of the time, waiting at the barrier for other threads
    op: str
    name: str
    layer: int | None
    type: str
    shape: str


class EventsPayload(TypedDict):
    """GET /api/runs/{id}/events?op=&name=&layer=&t0=&t1=&file_lo=&file_hi=&offset=&limit="""

    total: int
    offset: int
    rows: list[EventRow]


class SearchPayload(TypedDict):
    """GET /api/runs/{id}/search?q="""

    hits: list[EventRow]
