"""The timeline view (GET .../timeline): per context lane, a window's graph bars and node bars, the nodes
narrower than a pixel summed per pixel column, and the GPU lanes under each (timeline_gpu.py)."""

from __future__ import annotations

from collections.abc import Iterator
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from ...analysis.join import joined_table
from ...analysis.op_codes import op_codes
from ...runformat.totals import GRAPH_OP_TOTALS
from ..context import RunContext
from ..gpu import GpuRun
from ..payloads import (
    LaneBars,
    NodeBars,
    PixelColumns,
    TimelineGraphs,
    TimelineLane,
    TimelinePayload,
    TimelineTransfers,
)
from .timeline_gpu import gpu_lanes

TRANSFER_LIMIT = 2000  # messages drawn in a window at most (the largest, where more)
DETAIL_LIMIT = 4000  # a window holding more node bars than this is summed per pixel column
WINDOW_EVENT_LIMIT = 400_000  # a window over more node events is drawn from per-graph op totals
OVERVIEW_BINS = 16_384  # time bins of a run's whole-run timeline (see _overview_bins)
TOTALS_SLICE = 1 << 18  # per-graph op totals summed into the overview bins at a time
# A window with more graphs than this per pixel column sends one graph bar per column (the
# whole-run timeline of a long run: a million graphs, each drawn a pixel wide, over each other)
GRAPH_BARS_PER_PX = 4


class Timeline:
    """The timeline of one run. A window reads the node times of the graphs in view (the
    context's chunks); a window over many graphs is drawn from the stored per-graph op totals
    or, for the whole run, from time bins computed once (nodes narrower than a pixel are
    summed per pixel column, so the browser never holds a million bars)."""

    def __init__(self, context: RunContext, gpu: GpuRun | None) -> None:
        self.context = context
        self.gpu = gpu

    def window(self, t0: int, t1: int, width: int) -> TimelinePayload:
        """Graph and node bars meeting [t0, t1), for a canvas `width` pixels wide."""
        context = self.context
        width = max(1, min(int(width), 8192))
        t1 = max(t1, t0 + 1)
        ns_per_px = (t1 - t0) / width
        lanes: list[TimelineLane] = []
        gpu_by_context = gpu_lanes(self.gpu, t0, t1, width) if self.gpu is not None else {}
        for lane in context.lanes:
            g0 = np.searchsorted(lane["graph_end_max"], t0, side="right") if len(lane["graph_end"]) else 0
            g1 = np.searchsorted(lane["graph_start"], t1, side="left") if len(lane["graph_start"]) else 0
            graph_slice = slice(int(g0), int(max(g0, g1)))
            rows = lane["graph_row"][graph_slice]
            shown = np.arange(graph_slice.start, graph_slice.stop)
            if len(rows) > GRAPH_BARS_PER_PX * width:  # (the node bars below are of every graph)
                shown = shown[_longest_per_column(lane["graph_start"][shown], lane["graph_end"][shown], t0, ns_per_px)]
            graph_bars: TimelineGraphs = {
                "start": lane["graph_start"][shown].tolist(),
                "end": lane["graph_end"][shown].tolist(),
                "graph_id": lane["graph_id"][shown].tolist(),
                "label": context.graph_labels_of(lane["graph_row"][shown]),
                "phase": self._phases[lane["graph_row"][shown]].tolist(),
            }
            lanes.append(
                {
                    "label": lane["label"],
                    "graphs": graph_bars,
                    **self._node_bars(lane, rows, t0, t1, width, ns_per_px),
                    "gpu": gpu_by_context.get(lane["context_id"], []),
                }
            )
        return {
            "t0": t0,
            "t1": t1,
            "width": width,
            "ops": context.ops,
            "lanes": lanes,
            "transfers": self._transfers_in(t0, t1),
        }

    @cached_property
    def _transfers(self) -> pd.DataFrame:
        """A joined run's messages on the wire, each with the lanes it goes between (the head's
        lane and its worker's: the contexts the join named by host), times from the origin."""
        columns = ["start", "end", "source", "target", "bytes", "command"]
        path = joined_table(Path(self.context.run.path), "transfers")
        if path is None:
            return pd.DataFrame(columns=columns)
        contexts = {int(c.get("context_id", -1)): c for c in self.context.run.manifest.get("contexts") or []}
        lane_of = {}
        for index, lane in enumerate(self.context.lanes):
            about = contexts.get(int(lane["context_id"]), {})
            lane_of["head" if about.get("role") == "head" else str(about.get("host"))] = index
        wire = pd.read_parquet(path, columns=["host", "direction", "bytes", "command", "sent_ns", "received_ns"])
        worker = wire["host"].astype(str).map(lane_of)
        head = lane_of.get("head")
        wire = wire[worker.notna()].assign(worker=worker[worker.notna()].astype(int))
        if head is None or wire.empty:
            return pd.DataFrame(columns=columns)
        to_worker = (wire["direction"] == "to_worker").to_numpy()
        origin = self.context.origin_ns
        return pd.DataFrame(
            {
                "start": wire["sent_ns"].to_numpy(np.int64) - origin,
                "end": wire["received_ns"].to_numpy(np.int64) - origin,
                "source": np.where(to_worker, head, wire["worker"]),
                "target": np.where(to_worker, wire["worker"], head),
                "bytes": wire["bytes"].to_numpy(np.int64),
                "command": wire["command"].astype(str).to_numpy(),
            }
        ).sort_values("start", ignore_index=True)

    def _transfers_in(self, t0: int, t1: int) -> TimelineTransfers:
        wire = self._transfers
        inside = wire[(wire["start"] < t1) & (wire["end"] > t0)]
        shown = (
            inside.nlargest(TRANSFER_LIMIT, "bytes").sort_values("start") if len(inside) > TRANSFER_LIMIT else inside
        )
        return {
            "start": shown["start"].astype(int).tolist(),
            "end": shown["end"].astype(int).tolist(),
            "source": shown["source"].astype(int).tolist(),
            "target": shown["target"].astype(int).tolist(),
            "bytes": shown["bytes"].astype(int).tolist(),
            "command": shown["command"].astype(str).tolist(),
            "total": int(len(inside)),
        }

    def _node_bars(
        self, lane: dict[str, Any], rows: np.ndarray, t0: int, t1: int, width: int, ns_per_px: float
    ) -> LaneBars:
        """The node bars of the graphs at `rows` meeting [t0, t1): each node, or (more than
        DETAIL_LIMIT of them) the wide ones with the rest summed per pixel column; a window
        over more than WINDOW_EVENT_LIMIT node events is summed per pixel column from each
        graph's time per op, without reading its events."""
        first_event = self.context.graph_first_event
        n_events = int((first_event[rows + 1] - first_event[rows]).sum())
        if n_events > WINDOW_EVENT_LIMIT:
            return {
                "nodes": _no_bars(),
                "columns": self._columns_from_graph_totals(lane, rows, t0, t1, width, ns_per_px),
            }
        events, s, e, ops = self.context.timed_events_of(rows)
        meets = (e > t0) & (s < t1) | ((e == s) & (s >= t0) & (s < t1))
        order = np.flatnonzero(meets)
        order = order[np.argsort(s[order], kind="stable")]
        events, s, e, ops = events[order], s[order], e[order], ops[order]
        if len(events) <= DETAIL_LIMIT:
            return {"nodes": _bars(events, s, e, ops), "columns": _no_columns()}
        # Wide enough to see: its own bar (the widest DETAIL_LIMIT); the rest summed per pixel.
        wide = (e - s) >= 2 * ns_per_px
        wide_index = np.flatnonzero(wide)
        if len(wide_index) > DETAIL_LIMIT:
            wide_index = wide_index[np.argsort(s[wide_index] - e[wide_index], kind="stable")[:DETAIL_LIMIT]]
            wide_index.sort()
            wide = np.zeros(len(s), dtype=bool)
            wide[wide_index] = True
        narrow = ~wide
        ns, ne = np.maximum(s[narrow], t0), np.minimum(e[narrow], t1)
        column = np.clip(((ns - t0) / ns_per_px).astype(np.int64), 0, width - 1)
        return {
            "nodes": _bars(events[wide], s[wide], e[wide], ops[wide]),
            "columns": self._columns(
                column, ops[narrow].astype(np.int64), (ne - ns).astype(np.float64), width, ns_per_px
            ),
        }

    def _columns(
        self, column: np.ndarray, ops: np.ndarray, busy_ns: np.ndarray, width: int, ns_per_px: float
    ) -> PixelColumns:
        """Per pixel column with work in it: the op that kept it busiest, and how busy it was."""
        n_ops = len(self.context.ops)
        busy = np.bincount(column * n_ops + ops, weights=busy_ns, minlength=width * n_ops).reshape(width, n_ops)
        total = busy.sum(axis=1)
        used = np.flatnonzero(total > 0)
        return {
            "px": used.tolist(),
            "op": busy[used].argmax(axis=1).tolist(),
            "fill": np.minimum(total[used] / ns_per_px, 1.0).round(3).tolist(),
        }

    def _columns_from_graph_totals(
        self, lane: dict[str, Any], rows: np.ndarray, t0: int, t1: int, width: int, ns_per_px: float
    ) -> PixelColumns:
        """Pixel columns from each graph's time per op (graph_op_totals), spread evenly over
        the columns the graph spans: the zoomed-out timeline of a long run. A window wider
        than a few of the run's OVERVIEW_BINS is drawn from those bins instead (computed
        once), so a whole-run view costs the same at any length."""
        bins = self._overview_bins
        bin_ns = bins["bin_ns"]
        if ns_per_px >= 4 * bin_ns:
            # a window may reach past the run on either side (the whole run, with a margin)
            first, last = max(int(t0 // bin_ns), 0), int(min(np.ceil(t1 / bin_ns), OVERVIEW_BINS))
            busy = bins["by_lane"][lane["context_id"]][first:last]
            column = np.clip(((np.arange(first, last) * bin_ns - t0) / ns_per_px).astype(np.int64), 0, width - 1)
            cells = np.nonzero(busy)
            return self._columns(column[cells[0]], cells[1].astype(np.int64), busy[cells], width, ns_per_px)
        column, ops, busy_ns = self._spread(rows, t0, t1, ns_per_px, width)
        return self._columns(column, ops, busy_ns, width, ns_per_px)

    def _spread(
        self, rows: np.ndarray, t0: int, t1: int, ns_per_px: float, width: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each (graph, op) time of the graphs at `rows`, spread evenly over the columns
        [t0, t1) at ns_per_px that the graph spans: (column, op, busy ns) per piece."""
        totals = self._graph_op_time
        in_window = np.zeros(len(self.context.graphs), dtype=bool)
        in_window[rows] = True
        lo, hi = np.searchsorted(totals["row"], [rows.min(), rows.max() + 1]) if len(rows) else (0, 0)
        picked = np.arange(lo, hi)[in_window[totals["row"][lo:hi]]]
        row, op, time_ns = totals["row"][picked], totals["op"][picked], totals["time_ns"][picked]
        graph_start, graph_end = self._graph_spans
        start = np.maximum(graph_start[row], t0)
        end = np.minimum(graph_end[row], t1)
        first = np.clip(((start - t0) / ns_per_px).astype(np.int64), 0, width - 1)
        last = np.clip(((np.maximum(end, start + 1) - 1 - t0) / ns_per_px).astype(np.int64), 0, width - 1)
        span = last - first + 1
        repeat = np.repeat(np.arange(len(row)), span)  # each (graph, op) once per column it spans
        column = first[repeat] + (np.arange(len(repeat)) - np.repeat(np.cumsum(span) - span, span))
        return column, op[repeat].astype(np.int64), (time_ns / span)[repeat]

    @cached_property
    def _phases(self) -> np.ndarray:
        """Each graph's phase (in `graphs` order)."""
        return self.context.graphs["phase"].to_numpy()

    @cached_property
    def _graph_spans(self) -> tuple[np.ndarray, np.ndarray]:
        """Each graph's start and end (in `graphs` order), relative to the run's origin."""
        graphs, origin = self.context.graphs, self.context.origin_ns
        return graphs["start_ns"].to_numpy(np.int64) - origin, graphs["end_ns"].to_numpy(np.int64) - origin

    @cached_property
    def _overview_bins(self) -> dict[str, Any]:
        """The multi-resolution index's coarse level: per context, the run cut into
        OVERVIEW_BINS equal spans of time, each op's busy time in each: each (graph, op) time
        spread evenly over the bins its graph spans (as _spread). Summed a slice of the per-graph
        op totals at a time, in graph order, each bin's sum carried from slice to slice: the same
        additions in the same order as one pass over them all."""
        context = self.context
        n_graphs, n_ops = len(context.graphs), len(context.ops)
        bin_ns = max(1.0, context.duration_ns / OVERVIEW_BINS)
        # Per graph row (and one past the graphs: no lane's), its lane; per graph, the bins it spans.
        lane_of_row = np.full(n_graphs + 1, -1, np.int64)
        for index, lane in enumerate(context.lanes):
            lane_of_row[lane["graph_row"]] = index
        graph_start, graph_end = self._graph_spans
        start = np.maximum(graph_start, 0)
        last = np.maximum(np.minimum(graph_end, context.duration_ns), start + 1) - 1
        first_bin = np.clip((start / bin_ns).astype(np.int64), 0, OVERVIEW_BINS - 1).astype(np.int32)
        del start
        bins_spanned = np.clip((last / bin_ns).astype(np.int64), 0, OVERVIEW_BINS - 1).astype(np.int32)
        del last
        bins_spanned -= first_bin - 1
        sums: list[np.ndarray] = [np.zeros(OVERVIEW_BINS * n_ops) for _ in context.lanes]
        for row, op, time_ns in self._graph_op_time_slices():
            lane_of = lane_of_row[row]
            for index, lane_sums in enumerate(sums):
                mine = lane_of == index
                piece_row, piece_op, piece_time = row, op, time_ns
                if not mine.all():
                    piece_row, piece_op, piece_time = row[mine], op[mine], time_ns[mine]
                first, span = first_bin[piece_row], bins_spanned[piece_row]
                busy_ns = piece_time / span
                if len(span) and int(span.max()) > 1:  # a graph over several bins: a piece in each
                    repeat = np.repeat(np.arange(len(span)), span)
                    first = first[repeat] + (np.arange(len(repeat)) - np.repeat(np.cumsum(span) - span, span))
                    piece_op, busy_ns = piece_op[repeat], busy_ns[repeat]
                carried = np.flatnonzero(lane_sums)
                sums[index] = np.bincount(
                    np.concatenate((carried, first.astype(np.int64) * n_ops + piece_op)),
                    weights=np.concatenate((lane_sums[carried], busy_ns)),
                    minlength=OVERVIEW_BINS * n_ops,
                )
        by_lane = {
            lane["context_id"]: busy.reshape(OVERVIEW_BINS, n_ops)
            for lane, busy in zip(context.lanes, sums, strict=True)
        }
        return {"bin_ns": bin_ns, "by_lane": by_lane}

    def _graph_op_time_slices(self) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """The per-graph op totals (graph row, op, time), TOTALS_SLICE rows at a time in graph row
        order (as _graph_op_time holds them): read a slice at a time from the stored table where
        it is stored by graph_id (as ggml-viz stores it), else sorted whole."""
        totals = self.context.run.totals_table(GRAPH_OP_TOTALS)
        if "_graph_op_time" in self.__dict__ or not _sorted(totals.column("graph_id")):
            whole = self._graph_op_time
            for offset in range(0, len(whole["row"]), TOTALS_SLICE):
                part = slice(offset, offset + TOTALS_SLICE)
                yield whole["row"][part], whole["op"][part], whole["time_ns"][part]
            return
        lookup, codes = self._op_codes(totals)
        for offset in range(0, totals.num_rows, TOTALS_SLICE):
            ops = lookup[codes[offset : offset + TOTALS_SLICE]]
            piece = self._graph_op_time_of(totals.slice(offset, TOTALS_SLICE), ops, sorted_ids=True)
            yield piece["row"], piece["op"], piece["time_ns"]

    @cached_property
    def _graph_op_time(self) -> dict[str, np.ndarray]:
        """The per-graph op totals by graph row (a window's graphs are one slice of them)."""
        totals = self.context.run.totals_table(GRAPH_OP_TOTALS)
        lookup, codes = self._op_codes(totals)
        if _sorted(totals.column("graph_id")):  # stored in graph order (as ggml-viz stores it)
            return self._graph_op_time_of(totals, lookup[codes], sorted_ids=True)
        piece = self._graph_op_time_of(totals, lookup[codes])
        order = np.argsort(piece["row"], kind="stable")
        return {key: column[order] for key, column in piece.items()}

    def _op_codes(self, totals: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        """Each row's op code (the findings hashed them already: analysis/op_codes.py) and, per
        code, the index of its op in the context's ops (0: an op not among them, or none): a
        row's op is lookup[code]."""
        names, codes = op_codes(totals)
        index = {op: code for code, op in enumerate(self.context.ops)}
        lookup = np.array([index.get(name, 0) for name in names] + [0], np.int64)  # (the last: code -1, no op)
        return lookup, codes

    def _graph_op_time_of(self, totals: pa.Table, op: np.ndarray, sorted_ids: bool = False) -> dict[str, np.ndarray]:
        """Per-graph op totals as arrays: graph row, op (`op`: its index into the context's ops),
        time (`sorted_ids`: the totals are in graph_id order, each graph's row looked up once)."""
        graph_id = totals.column("graph_id").to_numpy()
        if sorted_ids and len(graph_id):
            first = np.flatnonzero(np.concatenate(([True], graph_id[1:] != graph_id[:-1])))
            row = np.repeat(self.context.graph_rows(graph_id[first]), np.diff(np.append(first, len(graph_id))))
        else:
            row = self.context.graph_rows(graph_id)
        return {
            "row": row,
            "op": op.astype(np.int64, copy=False),
            "time_ns": totals.column("time_ns").to_numpy().astype(np.float64),
        }


def _longest_per_column(start: np.ndarray, end: np.ndarray, t0: int, ns_per_px: float) -> np.ndarray:
    """Of graphs in start order, the place of the longest one starting in each pixel column
    (the first of equals): the bar a column shows of the graphs packed into it, each a real graph
    (a click still finds one); a graph spanning several columns is the longest of its first."""
    if not len(start):
        return np.zeros(0, np.int64)
    column = np.floor((start - t0) / ns_per_px).astype(np.int64)  # (never decreasing: starts in order)
    firsts = np.flatnonzero(np.concatenate(([True], column[1:] != column[:-1])))
    counts = np.diff(np.append(firsts, len(column)))
    duration = end - start
    longest = np.repeat(np.maximum.reduceat(duration, firsts), counts)
    candidates = np.flatnonzero(duration == longest)
    columns = column[candidates]
    return candidates[np.concatenate(([True], columns[1:] != columns[:-1]))]


def _sorted(column: pa.ChunkedArray) -> bool:
    """Whether an integer column never decreases (checked TOTALS_SLICE values at a time)."""
    last = None
    for offset in range(0, len(column), TOTALS_SLICE):
        values = column.slice(offset, TOTALS_SLICE).to_numpy()
        if (last is not None and values[0] < last) or bool((values[1:] < values[:-1]).any()):
            return False
        last = values[-1]
    return True


def _no_bars() -> NodeBars:
    return _bars(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))


def _bars(events: np.ndarray, start: np.ndarray, end: np.ndarray, ops: np.ndarray) -> NodeBars:
    return {"start": start.tolist(), "end": end.tolist(), "op": ops.tolist(), "event": events.tolist()}


def _no_columns() -> PixelColumns:
    return {"px": [], "op": [], "fill": []}
