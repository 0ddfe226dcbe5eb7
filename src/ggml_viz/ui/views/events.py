"""The event log (GET .../events, .../event/{n}, .../search): pages of the node events passing its
filters, each as a row, the search, and for an offline report which weights each event's node reads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ...layers import NO_LAYER
from ..context import RunContext, shape_text
from ..payloads import EventRow, EventsPayload

EVENT_PAGE_LIMIT = 500
SEARCH_LIMIT = 200


@dataclass(frozen=True)
class EventFilter:
    """The event log's filters; empty fields filter nothing."""

    op: str = ""
    name: str = ""
    layer: int | None = None
    t0: int | None = None  # relative ns
    t1: int | None = None
    file_lo: int | None = None  # nodes reading a weight whose file bytes meet [file_lo, file_hi)
    file_hi: int | None = None


class EventLog:
    """One run's event log, answered without building its node events; the last filter's
    counts are kept (the browser pages through one filter at a time)."""

    def __init__(self, context: RunContext) -> None:
        self.context = context
        self._filter_cache: tuple[EventFilter, tuple[np.ndarray, np.ndarray, Any]] | None = None

    def page(self, where: EventFilter, offset: int, limit: int) -> EventsPayload:
        """A page of the node events passing the filters, in (graph, node) order. Filters of
        op, name, layer and file region depend on a node's place in its structure alone;
        a time window also reads the times of the graphs at its edges: never every event."""
        counts, rows, events_of = self._filtered(where)
        total = int(counts.sum())
        limit = max(0, min(limit, EVENT_PAGE_LIMIT))
        before = np.cumsum(counts) - counts
        page: list[int] = []
        position = int(np.searchsorted(before, offset, side="right")) - 1 if len(rows) else 0
        while len(page) < limit and 0 <= position < len(rows):
            skip = max(0, offset - int(before[position])) if not page else 0
            page += events_of(int(rows[position]))[skip : skip + limit - len(page)].tolist()
            position += 1
        return {"total": total, "offset": offset, "rows": self.rows(np.array(page, dtype=np.int64))}

    def _filtered(self, where: EventFilter) -> tuple[np.ndarray, np.ndarray, Any]:
        """For the graphs that may hold events passing `where`: how many do (per graph), the
        graphs' rows, and a function giving a graph row's passing event numbers."""
        context = self.context
        if self._filter_cache is not None and self._filter_cache[0] == where:
            return self._filter_cache[1]
        tensor_ok = np.ones(len(context.tensor_op), dtype=bool)
        if where.op:
            tensor_ok &= np.isin(
                context.tensor_op, [code for code, op in enumerate(context.ops) if op == where.op.upper()]
            )
        if where.name:
            names = context.tensors["name"].str.lower().str.contains(where.name.lower(), regex=False)
            named = np.zeros(len(context.tensor_op), dtype=bool)
            named[context.tensors.loc[names, "tensor_id"].to_numpy()] = True
            tensor_ok &= named
        readers = None
        if where.file_lo is not None and where.file_hi is not None:
            regions = context.run.memory_map
            weights = regions[
                (regions["kind"] == "tensor") & (regions["end"] > where.file_lo) & (regions["start"] < where.file_hi)
            ]
            readers = self._weight_readers(weights["name"])
        passing = self._passing_nodes(tensor_ok, where.layer, readers)
        structure = context.graphs["structure_id"].to_numpy()
        per_structure = np.bincount(context.structure["structure_id"].to_numpy(np.int64), weights=passing, minlength=1)
        rows = np.arange(len(context.graphs))
        timed_window = where.t0 is not None or where.t1 is not None
        t0 = where.t0 if where.t0 is not None else -(1 << 62)
        t1 = where.t1 if where.t1 is not None else 1 << 62
        if timed_window:  # graphs meeting the window; their events must be timed and meet it too
            start = context.graphs["start_ns"].to_numpy(np.int64) - context.origin_ns
            end = context.graphs["end_ns"].to_numpy(np.int64) - context.origin_ns
            rows = rows[(end > t0) & (start < t1)]

        def events_of(row: int) -> np.ndarray:
            first = int(context.graph_first_event[row])
            if not timed_window:
                nodes = np.flatnonzero(passing[context.structure_rows(structure[row])])
                return first + nodes
            events, start, end, *_ = context.chunk_events_of_row(row)
            mine = (events >= first) & (events < context.graph_first_event[row + 1]) & (end > t0) & (start < t1)
            events = events[mine]
            return events[passing[context.event_structure_node(events)]]

        counts = (
            per_structure[structure[rows]]
            if not timed_window
            else np.array([len(events_of(int(row))) for row in rows], dtype=np.int64)
        )
        result: tuple[np.ndarray, np.ndarray, Any] = (counts.astype(np.int64), rows, events_of)
        self._filter_cache = (where, result)
        return result

    def _passing_nodes(self, tensor_ok: np.ndarray, layer: int | None, readers: pd.DataFrame | None) -> np.ndarray:
        """Per row of `structure` (a node of a structure): whether it passes the filters that
        depend on the node alone."""
        context = self.context
        tensor = context.structure["tensor_id"].to_numpy()
        passing = tensor_ok[tensor] if len(tensor_ok) else np.zeros(len(tensor), dtype=bool)
        if layer is not None:
            passing &= context.structure["layer"].to_numpy() == layer
        if readers is not None:
            keys = _event_key(
                context.structure["structure_id"].to_numpy(np.int32), context.structure["node_index"].to_numpy(np.int32)
            )
            wanted = _event_key(readers["structure_id"].to_numpy(np.int32), readers["node_index"].to_numpy(np.int32))
            passing &= np.isin(keys, wanted)
        return passing

    def _weight_readers(self, names: Any) -> pd.DataFrame:
        """(structure_id, node_index, name) of each node that reads a weight of these names."""
        context = self.context
        tensors = context.tensors.loc[context.tensors["name"].isin(names), ["tensor_id", "name"]]
        edges = context.run.raw("edges").merge(tensors, left_on="src_tensor_id", right_on="tensor_id")
        return edges[["structure_id", "node_index", "name"]].drop_duplicates()

    def weight_file_reads(self, events: np.ndarray) -> tuple[dict[str, list[int]], list[list[int]]]:
        """For an offline report's file-region filter: the file ranges of the weights the run
        reads ({"start", "end"}) and, per event, the indexes of those its node reads (the same
        rule as _reads_file_range)."""
        context = self.context
        regions = context.run.memory_map
        weights = regions[regions["kind"] == "tensor"].reset_index(drop=True)
        index_of = {name: i for i, name in enumerate(weights["name"])}
        readers = self._weight_readers(weights["name"])
        by_node: dict[int, list[int]] = {}
        keys = _event_key(readers["structure_id"].to_numpy(np.int32), readers["node_index"].to_numpy(np.int32))
        for key, name in zip(keys.tolist(), readers["name"].tolist(), strict=True):
            by_node.setdefault(key, []).append(index_of[name])
        at = context.event_structure_node(np.asarray(events, dtype=np.int64))
        event_keys = _event_key(
            context.structure["structure_id"].to_numpy(np.int32)[at],
            context.structure["node_index"].to_numpy(np.int32)[at],
        ).tolist()
        ranges = {"start": weights["start"].astype(int).tolist(), "end": weights["end"].astype(int).tolist()}
        return ranges, [by_node.get(key, []) for key in event_keys]

    def row(self, event: int) -> EventRow:
        return self.rows(np.array([event], dtype=np.int64))[0]

    def rows(self, events: np.ndarray) -> list[EventRow]:
        """The event log's rows for these event numbers (in one pass)."""
        context = self.context
        events = np.asarray(events, dtype=np.int64)
        at = context.event_structure_node(events)
        graph_row = np.searchsorted(context.graph_first_event, events, side="right") - 1
        tensor = context.structure["tensor_id"].to_numpy()[at]
        layer = context.structure["layer"].to_numpy()[at]
        node = context.structure["node_index"].to_numpy()[at]
        timed_events, start, end, _, _, wait = context.chunk_events_of(np.unique(graph_row))
        found = np.minimum(np.searchsorted(timed_events, events), max(len(timed_events) - 1, 0))
        timed = (timed_events[found] == events) if len(timed_events) else np.zeros(len(events), dtype=bool)
        described = context.tensors.set_index("tensor_id").reindex(tensor)
        rows: list[EventRow] = []
        for i, event in enumerate(events.tolist()):
            j, known = int(found[i]), bool(timed[i])
            rows.append(
                {
                    "event": event,
                    "graph_id": int(context.graphs["graph_id"].iat[int(graph_row[i])]),
                    "node_index": int(node[i]),
                    "start_ns": int(start[j]) if known else None,
                    "duration_ns": int(end[j] - start[j]) if known else None,
                    "wait_ns": int(wait[j]) if known and wait[j] >= 0 else None,
                    "op": context.ops[int(context.tensor_op[tensor[i]])] if len(context.tensor_op) else "",
                    "name": str(context.tensor_names[tensor[i]]) if len(context.tensor_names) else "",
                    "layer": None if layer[i] == NO_LAYER else int(layer[i]),
                    "type": str(described["type"].iat[i]),
                    "shape": shape_text(*(described[f"ne{d}"].iat[i] for d in range(4))),
                }
            )
        return rows

    def search(self, query: str) -> list[EventRow]:
        """Node events whose tensor name or op contains `query` (case-insensitive), first ones first."""
        context = self.context
        query = query.strip().lower()
        if not query or not len(context.tensors):
            return []
        names = context.tensors["name"].str.lower()
        ops = context.tensors["op"].str.lower()
        matching = names.str.contains(query, regex=False) | ops.str.contains(query, regex=False)
        tensor_ok = np.zeros(len(context.tensor_op), dtype=bool)
        tensor_ok[context.tensors.loc[matching, "tensor_id"].to_numpy()] = True
        passing = self._passing_nodes(tensor_ok, None, None)
        hits: list[int] = []
        for rows in context.row_batches():
            events, *_ = context.chunk_events_of(rows)
            structure_node = context.event_structure_node(events)
            hits += events[passing[structure_node]].tolist()[: SEARCH_LIMIT - len(hits)]
            if len(hits) >= SEARCH_LIMIT:
                break
        return self.rows(np.array(hits, dtype=np.int64))


def _event_key(graph_or_structure: np.ndarray, node_index: np.ndarray) -> np.ndarray:
    return (graph_or_structure.astype(np.int64) << 32) | node_index.astype(np.int64)
