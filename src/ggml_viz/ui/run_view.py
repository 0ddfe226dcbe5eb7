"""One run as the viewer serves it: its context with every view's answers (app.py keeps one per run, the
HTML report reads one); each answer is computed by its view's module in views/."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

import numpy as np

from .context import RunContext
from .gpu import gpu_of
from .payloads import (
    AttentionIndexPayload,
    AttentionPayload,
    BufferTrack,
    DiskTrack,
    EventRow,
    EventsPayload,
    ExpertsPayload,
    GraphLayout,
    GraphListEntry,
    NodePayload,
    OccupancyPayload,
    OverviewPayload,
    RequestsPayload,
    SlotsPayload,
    StatsPayload,
    TimelinePayload,
    WhatifPayload,
)
from .views import attention, experts, graph, memory, overview, requests, slots, stats, whatif
from .views.details import NodeDetails
from .views.events import EventFilter, EventLog
from .views.timeline import Timeline


class RunView(RunContext):
    """A run's context, its GPU side (None without GPU times) and its views; the answers that
    never change for a read of the run are kept."""

    def __init__(self, run_id: str, path: Path) -> None:
        super().__init__(run_id, path)
        self.gpu = gpu_of(self)
        self.timeline_view = Timeline(self, self.gpu)
        self.node_details = NodeDetails(self, self.gpu)
        self.event_log = EventLog(self)

    @cached_property
    def overview(self) -> OverviewPayload:
        return overview.run_overview(self, self.gpu)

    def timeline(self, t0: int, t1: int, width: int) -> TimelinePayload:
        """Graph and node bars meeting [t0, t1), for a canvas `width` pixels wide."""
        return self.timeline_view.window(t0, t1, width)

    def node(self, event: int) -> NodePayload:
        return self.node_details.of_event(event)

    # -- the event log ---------------------------------------------------------------

    def events(self, where: EventFilter, offset: int, limit: int) -> EventsPayload:
        return self.event_log.page(where, offset, limit)

    def event_row(self, event: int) -> EventRow:
        return self.event_log.row(event)

    def event_rows(self, events: np.ndarray) -> list[EventRow]:
        return self.event_log.rows(events)

    def search(self, query: str) -> list[EventRow]:
        return self.event_log.search(query)

    def weight_file_reads(self, events: np.ndarray) -> tuple[dict[str, list[int]], list[list[int]]]:
        return self.event_log.weight_file_reads(events)

    # -- graphs, memory, statistics, attention ----------------------------------------

    def graph_list(self) -> list[GraphListEntry]:
        return graph.graph_list(self)

    def graph(self, graph_id: int, layer: int | None) -> GraphLayout:
        return graph.graph_layout(self, self.gpu, graph_id, layer)

    @cached_property
    def disk_track(self) -> DiskTrack:
        return memory.disk_track(self)

    @cached_property
    def buffer_track(self) -> BufferTrack:
        return memory.buffer_track(self)

    def compute_occupancy(self, graph_id: int) -> OccupancyPayload:
        return memory.compute_occupancy(self, graph_id)

    @cached_property
    def statistics(self) -> StatsPayload:
        return stats.statistics(self, self.gpu, self.overview["summary"])

    @cached_property
    def experts(self) -> ExpertsPayload:
        return experts.experts(self)

    @cached_property
    def requests(self) -> RequestsPayload:
        return requests.requests_view(self)

    @cached_property
    def slots(self) -> SlotsPayload:
        return slots.slots(self)

    @cached_property
    def whatif(self) -> WhatifPayload:
        return whatif.whatif(self)

    @cached_property
    def attention_index(self) -> AttentionIndexPayload:
        return attention.attention_index(self)

    def attention(self, graph_id: int, layer: int, head: int) -> AttentionPayload:
        return attention.attention_weights(self, graph_id, layer, head)
