"""What the web UI shows, computed on the server from one run.

`RunView` opens a run and keeps what is small (graphs, tensor descriptions, each graph
structure's nodes) and answers the UI's questions without building the run's node events:
a node event is numbered by its graph's first event plus its index in the graph, and its
description comes from its structure. A timeline window reads the node times of the
graphs in view (a few Parquet row groups, cached a chunk of graphs at a time), and a
window over many graphs is drawn from the stored per-graph op totals or, for the whole
run, from time bins computed once (nodes narrower than a pixel are summed per pixel
column, so the browser never holds a million bars). The statistics come from the node
totals; the event log's filters from each node's place in its structure, with the times
of the graphs a time window meets. Times go to the browser in nanoseconds relative to the
run's first graph. A run with GPU times (CUDA, CUPTI's kernel records) adds a GPU lane under
each context's lane and its kernels' story to the overview: see gpu.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..analysis.graph_view import graph_view
from ..analysis.memory import gathered_rows, kv_cache_fill, live_bytes, occupancy, weight_reads_by_name
from ..analysis.summary import backend_names, plain, records, summarize
from ..layers import NO_LAYER
from ..runformat.memory_sources import VIEW_OPS
from ..runformat.reader import Run, open_run
from ..runformat.schema import NO_ID
from ..runformat.totals import GRAPH_OP_TOTALS
from .gpu import GpuRun, time_sources
from .payloads import (
    AttentionIndexPayload,
    AttentionPayload,
    BufferTrack,
    DiskFile,
    DiskTrack,
    EventRow,
    EventsPayload,
    GraphListEntry,
    GraphPayload,
    KvFill,
    LaneBars,
    LayerActivation,
    NodeBars,
    NodePayload,
    NodeValues,
    OccupancyPayload,
    OverviewPayload,
    PixelColumns,
    RowsRead,
    RunSummary,
    StatsPayload,
    TimelineGraphs,
    TimelineLane,
    TimelinePayload,
)

DETAIL_LIMIT = 4000  # a window holding more node bars than this is summed per pixel column
WINDOW_EVENT_LIMIT = 400_000  # a window over more node events is drawn from per-graph op totals
EVENT_CHUNK_GRAPHS = 256  # graphs whose node times a timeline window reads together
CHUNKS_KEPT = 32  # chunks of node times a RunView keeps
OVERVIEW_BINS = 16_384  # time bins of a run's whole-run timeline (see _overview_bins)
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


class RunView:
    """One run, ready for the UI."""

    def __init__(self, run_id: str, path: Path) -> None:
        self.run_id = run_id
        self.path = path
        self.run: Run = open_run(path)
        self._filter_cache: tuple[EventFilter, tuple[np.ndarray, np.ndarray, Any]] | None = None
        self._chunks: dict[int, tuple[np.ndarray, ...]] = {}  # _chunk_events, by chunk
        self._prepare()

    # -- loading ---------------------------------------------------------------------

    def _prepare(self) -> None:
        run = self.run
        graphs = run.graphs  # sorted by graph_id (the reader's: not to be changed)
        self.origin_ns = int(graphs["start_ns"].min()) if len(graphs) else 0
        self.graphs = graphs
        tensors = run.raw("tensors").sort_values("tensor_id", ignore_index=True)
        self.tensors = tensors
        # Tensor attributes by tensor_id (ids are 0..n-1, dense).
        n_tensors = int(tensors["tensor_id"].max()) + 1 if len(tensors) else 0
        self.ops = sorted(set(tensors.loc[tensors["op"] != "NONE", "op"])) or ["NONE"]
        op_code = {op: code for code, op in enumerate(self.ops)}
        self.tensor_op = np.zeros(n_tensors, dtype=np.int16)
        self.tensor_op[tensors["tensor_id"].to_numpy()] = [op_code.get(op, 0) for op in tensors["op"]]
        self.tensor_names = np.empty(n_tensors, dtype=object)
        self.tensor_names[tensors["tensor_id"].to_numpy()] = tensors["name"].to_numpy()

        # Node events are numbered in (graph, node) order: a graph's events start where the
        # graphs before it end. Each structure's nodes as arrays: a window of graphs is
        # described without building every event of the run.
        structure = run.raw("structure_nodes").sort_values(["structure_id", "node_index"], ignore_index=True)
        self.structure = structure
        sizes = structure.groupby("structure_id").size()
        self.structure_size = sizes  # nodes per structure
        first = np.concatenate(([0], np.cumsum(sizes.to_numpy())))
        self.structure_first = pd.Series(first[:-1], index=sizes.index)  # a structure's first row in `structure`
        per_graph = graphs["structure_id"].map(sizes).fillna(0).to_numpy(np.int64)
        self.graph_first_event = np.concatenate(([0], np.cumsum(per_graph)))
        self.n_events = int(self.graph_first_event[-1])
        self._prepare_lanes()
        self.gpu = GpuRun(self) if run.has_gpu_times or len(run.raw("gpu_graphs")) else None

    def _prepare_lanes(self) -> None:
        """Per context, its graphs in time order (their node events are read per window)."""
        self.lanes: list[dict[str, Any]] = []
        contexts = sorted(set(self.graphs["context_id"].tolist()))
        backends = self._context_backends()
        for context in contexts:
            rows = np.flatnonzero(self.graphs["context_id"].to_numpy() == context)
            rows = rows[np.argsort(self.graphs["start_ns"].to_numpy()[rows], kind="stable")]
            graph_end = self.graphs["end_ns"].to_numpy(np.int64)[rows] - self.origin_ns
            self.lanes.append(
                {
                    "context_id": int(context),
                    "label": self._lane_label(context, backends.get(context, "?"), rows),
                    "graph_row": rows,
                    "graph_start": self.graphs["start_ns"].to_numpy(np.int64)[rows] - self.origin_ns,
                    "graph_end": graph_end,
                    # Running maximum of ends: a window finds every graph that reaches into it.
                    "graph_end_max": np.maximum.accumulate(graph_end) if len(rows) else graph_end,
                    "graph_id": self.graphs["graph_id"].to_numpy(np.int32)[rows],
                }
            )

    def _lane_label(self, context: int, backends: str, rows: np.ndarray) -> str:
        """A llama context by its number and backends; a plain program's scheduler (whisper.cpp
        has one for each part of its model) with what most of its graphs compute too."""
        contexts = {int(c.get("context_id", -1)): c for c in self.run.manifest.get("contexts") or []}
        host = contexts.get(context, {}).get("host")
        if host:  # a joined distributed run: a lane per host (ggml-viz join)
            return f"{contexts[context].get('role', 'host')} {host} · {backends}"
        if contexts.get(context, {}).get("kind") != "ggml":
            return f"context {context} · {backends}"
        labels = self.graphs["structure_id"].iloc[rows].map(self.run.structure_labels).dropna()
        computes = labels.mode().iloc[0] if len(labels) else ""
        return " · ".join(filter(None, [f"scheduler {context}", backends, computes]))

    def _context_backends(self) -> dict[int, str]:
        buffers = self.run.raw("buffers")
        return {
            int(c): ", ".join(backend_names(group))
            for c, group in buffers["buffer_type"].groupby(buffers["context_id"])
        }

    def graph_rows(self, graph_ids: np.ndarray) -> np.ndarray:
        """Row positions in `graphs` (sorted by graph_id; ids need not start at 0 or be dense)."""
        return np.searchsorted(self.graphs["graph_id"].to_numpy(), graph_ids)

    @property
    def n_timed(self) -> int:
        """Node events timed on their own."""
        return int(self.run.node_totals["timed"].sum())

    @property
    def duration_ns(self) -> int:
        if not len(self.graphs):
            return 0
        return int(self.graphs["end_ns"].max()) - self.origin_ns

    @cached_property
    def graph_texts(self) -> list[str]:
        """Each graph's tokens' text, joined (in `graphs` order)."""
        graphs = self.run.arrow("graphs")
        texts = pc.binary_join(graphs.column("token_texts"), "").fill_null("")
        order = pc.sort_indices(graphs.column("graph_id"))
        return cast(list[str], texts.take(order).to_pylist())

    @cached_property
    def graph_labels(self) -> list[str]:
        """What to call each graph (in `graphs` order): its tokens' text, or for a graph without
        tokens (an encoder's, a plain program's) what it computes (Run.structure_labels)."""
        computes = self.run.structure_labels
        structures = self.graphs["structure_id"].tolist()
        return [text or computes.get(int(structure), "") for text, structure in zip(self.graph_texts, structures,
                strict=True)]  # fmt: skip

    # -- overview --------------------------------------------------------------------

    @cached_property
    def overview(self) -> OverviewPayload:
        summary = summarize(self.run)
        manifest = self.run.manifest
        graphs = self.graphs
        return {
            "run_id": self.run_id,
            "name": self.path.name,
            "summary": cast(RunSummary, summary),
            "capture": manifest.get("capture"),
            "versions": manifest.get("versions"),
            "duration_ns": self.duration_ns,
            "ops": self.ops,
            "graph_bars": {
                "graph_id": graphs["graph_id"].tolist(),
                "duration_ns": (graphs["end_ns"] - graphs["start_ns"]).tolist(),
                "phase": graphs["phase"].tolist(),
                "n_tokens": graphs["n_tokens"].tolist(),
                "text": self.graph_labels,
            },
            "gpu": self.gpu.overview if self.gpu is not None else None,
        }

    # -- timeline --------------------------------------------------------------------

    def timeline(self, t0: int, t1: int, width: int) -> TimelinePayload:
        """Graph and node bars meeting [t0, t1), for a canvas `width` pixels wide."""
        width = max(1, min(int(width), 8192))
        t1 = max(t1, t0 + 1)
        ns_per_px = (t1 - t0) / width
        lanes: list[TimelineLane] = []
        gpu_lanes = self.gpu.timeline_lanes(t0, t1, width) if self.gpu is not None else {}
        for lane in self.lanes:
            g0 = np.searchsorted(lane["graph_end_max"], t0, side="right") if len(lane["graph_end"]) else 0
            g1 = np.searchsorted(lane["graph_start"], t1, side="left") if len(lane["graph_start"]) else 0
            graph_slice = slice(int(g0), int(max(g0, g1)))
            graph_ids = lane["graph_id"][graph_slice]
            graph_bars: TimelineGraphs = {
                "start": lane["graph_start"][graph_slice].tolist(),
                "end": lane["graph_end"][graph_slice].tolist(),
                "graph_id": graph_ids.tolist(),
                "label": [self.graph_labels[row] for row in self.graph_rows(graph_ids).tolist()],
                "phase": self.graphs["phase"].to_numpy()[self.graph_rows(graph_ids)].tolist(),
            }
            rows = lane["graph_row"][graph_slice]
            lanes.append(
                {"label": lane["label"], "graphs": graph_bars, **self._node_bars(lane, rows, t0, t1, width, ns_per_px),
                 "gpu": gpu_lanes.get(lane["context_id"], [])}
            )  # fmt: skip
        return {"t0": t0, "t1": t1, "width": width, "ops": self.ops, "lanes": lanes}

    def _node_bars(
        self, lane: dict[str, Any], rows: np.ndarray, t0: int, t1: int, width: int, ns_per_px: float
    ) -> LaneBars:
        """The node bars of the graphs at `rows` meeting [t0, t1): each node, or (more than
        DETAIL_LIMIT of them) the wide ones with the rest summed per pixel column; a window
        over more than WINDOW_EVENT_LIMIT node events is summed per pixel column from each
        graph's time per op, without reading its events."""
        n_events = int((self.graph_first_event[rows + 1] - self.graph_first_event[rows]).sum())
        if n_events > WINDOW_EVENT_LIMIT:
            return {
                "nodes": _no_bars(),
                "columns": self._columns_from_graph_totals(lane, rows, t0, t1, width, ns_per_px),
            }
        events, s, e, ops = self._timed_events_of(rows)
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
            "columns": self._columns(column, ops[narrow].astype(np.int64), (ne - ns).astype(np.float64), width,
                                     ns_per_px),
        }  # fmt: skip

    def _columns(self, column: np.ndarray, ops: np.ndarray, busy_ns: np.ndarray, width: int, ns_per_px: float
                 ) -> PixelColumns:  # fmt: skip
        """Per pixel column with work in it: the op that kept it busiest, and how busy it was."""
        n_ops = len(self.ops)
        busy = np.bincount(column * n_ops + ops, weights=busy_ns, minlength=width * n_ops).reshape(width, n_ops)
        total = busy.sum(axis=1)
        used = np.flatnonzero(total > 0)
        return {
            "px": used.tolist(),
            "op": busy[used].argmax(axis=1).tolist(),
            "fill": np.minimum(total[used] / ns_per_px, 1.0).round(3).tolist(),
        }

    def _columns_from_graph_totals(self, lane: dict[str, Any], rows: np.ndarray, t0: int, t1: int, width: int,
                                   ns_per_px: float
                                   ) -> PixelColumns:  # fmt: skip
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

    def _spread(self, rows: np.ndarray, t0: int, t1: int, ns_per_px: float, width: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
        """Each (graph, op) time of the graphs at `rows`, spread evenly over the columns
        [t0, t1) at ns_per_px that the graph spans: (column, op, busy ns) per piece."""
        totals = self._graph_op_time
        in_window = np.zeros(len(self.graphs), dtype=bool)
        in_window[rows] = True
        lo, hi = np.searchsorted(totals["row"], [rows.min(), rows.max() + 1]) if len(rows) else (0, 0)
        picked = np.arange(lo, hi)[in_window[totals["row"][lo:hi]]]
        row, op, time_ns = totals["row"][picked], totals["op"][picked], totals["time_ns"][picked]
        start = np.maximum(self.graphs["start_ns"].to_numpy(np.int64)[row] - self.origin_ns, t0)
        end = np.minimum(self.graphs["end_ns"].to_numpy(np.int64)[row] - self.origin_ns, t1)
        first = np.clip(((start - t0) / ns_per_px).astype(np.int64), 0, width - 1)
        last = np.clip(((np.maximum(end, start + 1) - 1 - t0) / ns_per_px).astype(np.int64), 0, width - 1)
        span = last - first + 1
        repeat = np.repeat(np.arange(len(row)), span)  # each (graph, op) once per column it spans
        column = first[repeat] + (np.arange(len(repeat)) - np.repeat(np.cumsum(span) - span, span))
        return column, op[repeat].astype(np.int64), (time_ns / span)[repeat]

    @cached_property
    def _overview_bins(self) -> dict[str, Any]:
        """The multi-resolution index's coarse level: per context, the run cut into
        OVERVIEW_BINS equal spans of time, each op's busy time in each."""
        bin_ns = max(1.0, self.duration_ns / OVERVIEW_BINS)
        by_lane = {}
        for lane in self.lanes:
            column, ops, busy_ns = self._spread(lane["graph_row"], 0, self.duration_ns, bin_ns, OVERVIEW_BINS)
            n_ops = len(self.ops)
            busy = np.bincount(column * n_ops + ops, weights=busy_ns, minlength=OVERVIEW_BINS * n_ops)
            by_lane[lane["context_id"]] = busy.reshape(OVERVIEW_BINS, n_ops)
        return {"bin_ns": bin_ns, "by_lane": by_lane}

    @cached_property
    def _graph_op_time(self) -> dict[str, np.ndarray]:
        totals = self.run.totals_table(GRAPH_OP_TOTALS)
        op = pc.index_in(totals.column("op"), value_set=pa.array(self.ops, pa.string()))
        row = self.graph_rows(totals.column("graph_id").to_numpy())
        order = np.argsort(row, kind="stable")  # by graph row: a window's graphs are one slice
        return {
            "row": row[order],
            "op": op.fill_null(0).to_numpy().astype(np.int64)[order],
            "time_ns": totals.column("time_ns").to_numpy().astype(np.float64)[order],
        }

    def _timed_events_of(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The timed node events of the graphs at `rows`: event numbers, start, end, op."""
        events, start, end, ops, row, _ = self._chunk_events_of(rows)
        keep = np.isin(row, rows)
        return events[keep], start[keep], end[keep], ops[keep]

    def _chunk_events_of(self, rows: np.ndarray) -> tuple[np.ndarray, ...]:
        """_chunk_events of every chunk holding one of the graph rows, joined."""
        parts = [self._chunk_events(chunk) for chunk in np.unique(rows // EVENT_CHUNK_GRAPHS).tolist()]
        if not parts:
            return tuple(np.zeros(0, np.int64) for _ in range(6))
        return tuple(np.concatenate(column) for column in zip(*parts, strict=True))

    def _chunk_events(self, chunk: int) -> tuple[np.ndarray, ...]:
        """The timed events of graph rows [chunk * EVENT_CHUNK_GRAPHS, ...): event numbers,
        start, end, op, graph row and wait (-1: not seen), read from the run's node times for
        those graphs. The last CHUNKS_KEPT chunks are kept: a pan reuses them."""
        if chunk in self._chunks:
            self._chunks[chunk] = self._chunks.pop(chunk)  # the most recently used last
            return self._chunks[chunk]
        self._chunks[chunk] = self._read_chunk(chunk)
        while len(self._chunks) > CHUNKS_KEPT:
            self._chunks.pop(next(iter(self._chunks)))
        return self._chunks[chunk]

    def _read_chunk(self, chunk: int) -> tuple[np.ndarray, ...]:
        rows = np.arange(chunk * EVENT_CHUNK_GRAPHS, min((chunk + 1) * EVENT_CHUNK_GRAPHS, len(self.graphs)))
        times = self.run.node_times_of(self.graphs["graph_id"].to_numpy()[rows].tolist())
        row = self.graph_rows(times["graph_id"].to_numpy())
        node = times["node_index"].to_numpy(np.int64)
        structure = self.graphs["structure_id"].to_numpy()[row]
        first_of_structure = self.structure_first.reindex(structure).to_numpy(np.int64)
        tensor = self.structure["tensor_id"].to_numpy()[first_of_structure + node]
        return (
            self.graph_first_event[row] + node,
            times["start_ns"].to_numpy(np.int64) - self.origin_ns,
            times["end_ns"].to_numpy(np.int64) - self.origin_ns,
            self.tensor_op[tensor] if len(self.tensor_op) else np.zeros(len(row), np.int16),
            row,
            times["wait_ns"].fillna(-1).to_numpy(np.int64),
        )

    # -- one node --------------------------------------------------------------------

    def event_index(self, graph_id: int, node_index: int) -> int | None:
        row = int(self.graph_rows(np.array([graph_id]))[0])
        if row >= len(self.graphs) or int(self.graphs["graph_id"].iloc[row]) != graph_id:
            return None
        first, after = int(self.graph_first_event[row]), int(self.graph_first_event[row + 1])
        return first + node_index if 0 <= node_index < after - first else None

    def node(self, event: int) -> NodePayload:
        """Everything about one node event, with each source and where its bytes live (read
        from its graph alone)."""
        row = int(np.searchsorted(self.graph_first_event, event, side="right")) - 1
        graph_id, node_index = int(self.graphs["graph_id"].iloc[row]), event - int(self.graph_first_event[row])
        node = self.run.nodes_of(graph_id)
        node = node[node["node_index"] == node_index].iloc[0]
        timed = bool(node["timed"])
        details: dict[str, Any] = {
            "event": int(event), "graph_id": graph_id, "node_index": node_index,
            "start_ns": int(node["start_ns"]) - self.origin_ns if timed else None,
            "end_ns": int(node["end_ns"]) - self.origin_ns if timed else None,
            "tokens": self.graph_texts[row],
        }  # fmt: skip
        tensor = self.tensors.iloc[int(node["tensor_id"])] if len(self.tensors) else None
        if tensor is not None:
            details.update(_describe_tensor(tensor, self._buffer_names))
        details["layer"] = None if pd.isna(node["layer"]) else int(node["layer"])  # from the graph
        sources = []
        for row in self.run.edges_of(graph_id, node_index).itertuples():
            memory = row.memory
            sources.append(
                {
                    "slot": int(row.src_slot), "name": row.src_name, "op": row.src_op, "type": row.src_type,
                    "shape": _shape(row.src_ne0, row.src_ne1, row.src_ne2, row.src_ne3),
                    "nbytes": int(row.src_nbytes), "usage": row.src_usage, "memory": memory,
                    "buffer": None if pd.isna(row.src_buffer_name) else row.src_buffer_name,
                    "file_offset": None if pd.isna(row.file_offset) else int(row.file_offset),
                    "buffer_offset": None if pd.isna(row.buffer_offset) else int(row.buffer_offset),
                }
            )  # fmt: skip
        details["sources"] = sources
        details["values"] = self._values_of(graph_id, node_index)
        details["gpu"] = self.gpu.node_time(graph_id, node_index) if self.gpu is not None else None
        return cast(NodePayload, details)

    @cached_property
    def _values(self) -> pd.DataFrame:
        return self.run.raw("node_values").set_index(["graph_id", "node_index"]).sort_index()

    def _values_of(self, graph_id: int, node_index: int) -> NodeValues | None:
        """--values stats of one node event, if the run has them."""
        if (graph_id, node_index) not in self._values.index:
            return None
        row = self._values.loc[(graph_id, node_index)]
        return json_safe({column: row[column].item() for column in self._values.columns})

    @cached_property
    def activation_by_layer(self) -> list[LayerActivation]:
        """--values stats per layer: the range of its nodes' outputs, their mean |x|, non-finite counts."""
        values = self.run.values
        if values.empty:
            return []
        values = values.assign(layer=values["layer"].astype("object").where(values["layer"].notna(), "none"))
        table = values.groupby("layer", sort=False).agg(
            min=("min", "min"), max=("max", "max"), mean_abs=("mean_abs", "mean"), nan=("nan", "sum"),
            inf=("inf", "sum"), nodes=("node_index", "size"),
        )  # fmt: skip
        order = sorted(table.index, key=lambda layer: (layer == "none", layer if layer != "none" else 0))
        return json_safe([{"layer": layer, **{k: plain(v) for k, v in table.loc[layer].items()}} for layer in order])

    # -- attention -------------------------------------------------------------------

    @cached_property
    def attention_index(self) -> AttentionIndexPayload:
        """The captured softmax tensors (kq_soft_max-L): per graph, the layers, and the heads."""
        captures = self.run.captures
        softmax = captures[captures["name"].str.match(r"^kq_soft_max-\d+$")]
        flash = any(str(c.get("flash_attn")) in ("on", "True", "1") for c in self.run.manifest.get("contexts", []))
        graphs: dict[int, list[int]] = {}
        for row in softmax.itertuples():
            graphs.setdefault(int(row.graph_id), []).append(int(row.name.rsplit("-", 1)[1]))
        heads = int(softmax["ne2"].max()) if len(softmax) else 0
        return {"graphs": {str(g): sorted(layers) for g, layers in graphs.items()}, "heads": heads,
                "flash_attention": flash}  # fmt: skip

    def attention(self, graph_id: int, layer: int, head: int) -> AttentionPayload:
        """One head's attention in one graph: queries (the graph's tokens) × keys (KV cells)."""
        captures = self.run.captures
        rows = captures[(captures["graph_id"] == graph_id) & (captures["name"] == f"kq_soft_max-{layer}")]
        if rows.empty:
            raise KeyError((graph_id, layer))
        weights = self.run.captured(graph_id, int(rows["node_index"].iloc[0]))  # (1, heads, queries, keys)
        if not 0 <= head < weights.shape[1]:
            raise KeyError(head)
        matrix = weights[0, head]
        tokens = self.run.tokens
        context = int(self.graphs.loc[self.graphs["graph_id"] == graph_id, "context_id"].iloc[0])
        contexts = self.graphs.set_index("graph_id")["context_id"]
        seen = tokens[tokens["graph_id"].map(contexts) == context]
        seen = seen[seen["graph_id"] <= graph_id]
        text_at = dict(zip(seen["pos"], seen["text"], strict=False))  # the latest token at each position
        queries = tokens[tokens["graph_id"] == graph_id]
        used = max(text_at, default=-1) + 1
        return {
            "graph_id": graph_id, "layer": layer, "head": head, "heads": int(weights.shape[1]),
            "query_labels": queries["text"].tolist(), "query_positions": queries["pos"].tolist(),
            "key_labels": [text_at.get(position, "") for position in range(used)],
            "weights": np.round(matrix[:, :used], 5).tolist(),
        }  # fmt: skip

    @cached_property
    def _buffer_names(self) -> dict[int, str]:
        buffers = self.run.raw("buffers")
        return dict(zip(buffers["buffer_id"].tolist(), buffers["name"].tolist(), strict=True))

    def search(self, query: str) -> list[EventRow]:
        """Node events whose tensor name or op contains `query` (case-insensitive), first ones first."""
        query = query.strip().lower()
        if not query or not len(self.tensors):
            return []
        names = self.tensors["name"].str.lower()
        ops = self.tensors["op"].str.lower()
        matching = names.str.contains(query, regex=False) | ops.str.contains(query, regex=False)
        tensor_ok = np.zeros(len(self.tensor_op), dtype=bool)
        tensor_ok[self.tensors.loc[matching, "tensor_id"].to_numpy()] = True
        passing = self._passing_nodes(tensor_ok, None, None)
        hits: list[int] = []
        for rows in np.array_split(np.arange(len(self.graphs)), max(1, len(self.graphs) // EVENT_CHUNK_GRAPHS)):
            events, *_ = self._chunk_events_of(rows)
            structure_node = self._event_structure_node(events)
            hits += events[passing[structure_node]].tolist()[: SEARCH_LIMIT - len(hits)]
            if len(hits) >= SEARCH_LIMIT:
                break
        return self.event_rows(np.array(hits, dtype=np.int64))

    # -- graphs ----------------------------------------------------------------------

    def graph_list(self) -> list[GraphListEntry]:
        graphs = self.graphs
        return [
            {"graph_id": int(g), "phase": p, "n_nodes": int(n), "duration_ns": int(e - s), "label": label}
            for g, p, n, s, e, label in zip(
                graphs["graph_id"], graphs["phase"], graphs["n_nodes"], graphs["start_ns"], graphs["end_ns"],
                self.graph_labels, strict=True,
            )
        ]  # fmt: skip

    def graph(self, graph_id: int, layer: int | None) -> GraphPayload:
        rows = self.graphs[self.graphs["graph_id"] == graph_id]
        if rows.empty:
            raise KeyError(graph_id)
        structure_id = int(rows["structure_id"].iloc[0])
        nodes = self.run.raw("structure_nodes")
        nodes = nodes[nodes["structure_id"] == structure_id].sort_values("node_index")
        edges = self.run.raw("edges")
        edges = edges[edges["structure_id"] == structure_id]
        row = self.graph_rows(np.array([graph_id]))
        events, start, end, _ = self._timed_events_of(row)
        nodes_timed = events - self.graph_first_event[row[0]]
        duration_by_node = {node: -1 for node in nodes["node_index"].tolist()}
        duration_by_node.update(zip(nodes_timed.tolist(), (end - start).tolist(), strict=True))
        if not len(events) and self.gpu is not None:  # a GPU's graph: the host timed none of its nodes
            duration_by_node.update(self.gpu.graph_node_times(graph_id))
        return cast(GraphPayload, graph_view(nodes, edges, self.tensors, duration_by_node, layer, graph_id))

    # -- memory ----------------------------------------------------------------------

    @cached_property
    def disk_track(self) -> DiskTrack:
        """The model file by byte offset: every region, and per weight how often and how
        long the run's nodes read it."""
        memory_map = self.run.memory_map
        if memory_map.empty:
            return {"files": []}
        reads = weight_reads_by_name(self.run)
        rows = gathered_rows(self.run)  # the exact rows of tables that lookups read
        rows_per_table = rows.groupby("name").agg(rows=("row", "size"), row_bytes=("end", "sum"))
        rows_per_table["row_bytes"] -= rows.groupby("name")["start"].sum()
        files: list[DiskFile] = []
        for model_path, regions in memory_map.groupby("model_path", sort=False):
            regions = regions.sort_values("start")
            per_name = reads.reindex(regions["name"]).fillna(0)
            gathered = rows_per_table.reindex(regions["name"].where(regions["kind"] == "tensor")).fillna(-1)
            file_rows = rows[rows["name"].isin(regions["name"])].sort_values("start")
            files.append(
                {
                    "path": model_path,
                    "size": int(regions["end"].max()),
                    "regions": {
                        "kind": regions["kind"].tolist(),
                        "name": regions["name"].tolist(),
                        "start": regions["start"].tolist(),
                        "end": regions["end"].tolist(),
                        "layer": regions["layer"].tolist(),
                        "type": regions["type"].tolist(),
                        "category": regions["category"].tolist(),
                        "reads": per_name["reads"].astype(np.int64).tolist(),
                        "read_ns": per_name["read_ns"].astype(np.int64).tolist(),
                        # a table read by row lookups: how many of its rows, and their bytes (-1: not one)
                        "rows_read": gathered["rows"].astype(np.int64).tolist(),
                        "row_bytes_read": gathered["row_bytes"].astype(np.int64).tolist(),
                    },
                    # each row a lookup read, by its exact file bytes
                    "rows": cast(
                        RowsRead,
                        {column: file_rows[column].astype(np.int64).tolist() for column in ("start", "end", "reads")},
                    ),
                }
            )
        return {"files": files}

    @cached_property
    def buffer_track(self) -> BufferTrack:
        """Runtime buffers: each buffer, the KV cache's fill per layer over the graphs."""
        buffers = self.run.buffers
        fill = kv_cache_fill(self.run)
        kv: KvFill = {"layers": [], "graph_id": [], "used": []}
        if not fill.empty:
            pivot = fill.pivot_table(index="graph_id", columns="layer", values="used", aggfunc="max")
            kv = {
                "layers": [int(layer) for layer in pivot.columns],
                "capacity": int(fill["capacity"].max()),
                "graph_id": [int(g) for g in pivot.index],
                "used": pivot.to_numpy().astype(int).tolist(),
            }
        return {
            "buffers": [
                {
                    "buffer": int(row.buffer),
                    "name": row.name,
                    "kind": row.kind,
                    "usage": row.usage,
                    "size": int(row.size),
                    "context_id": int(row.context_id),
                }
                for row in buffers.itertuples()
            ],  # fmt: skip
            "kv_cache": kv,
            "has_output_buffer": bool((buffers["kind"] == "output").any()),
        }

    def compute_occupancy(self, graph_id: int) -> OccupancyPayload:
        """One graph's compute buffer: each intermediate's byte range and live node interval."""
        table = occupancy(self.run, graph_id)
        live = live_bytes(table)
        return {
            "graph_id": graph_id,
            "n_nodes": int(self.graphs.loc[self.graphs["graph_id"] == graph_id, "n_nodes"].iloc[0]),
            "tensors": {
                "name": table["name"].tolist(), "op": table["op"].tolist(), "start": table["start"].tolist(),
                "end": table["end"].tolist(), "first_node": table["first_node"].tolist(),
                "last_node": table["last_node"].tolist(),
            },
            "live_bytes": live.tolist(),
            "peak_bytes": int(live.max()) if len(live) else 0,
        }  # fmt: skip

    # -- statistics ------------------------------------------------------------------

    @cached_property
    def statistics(self) -> StatsPayload:
        """By op, layer and tensor, from the run's node totals (never its events)."""
        totals = self.run.node_totals
        # A view (VIEW, RESHAPE, PERMUTE, TRANSPOSE) writes nothing: its bytes are its source's.
        written = totals["nbytes"].fillna(0).where(~totals["op_base"].isin(VIEW_OPS), 0).astype(np.int64)
        frame = pd.DataFrame(
            {
                "op": totals["op"].to_numpy(object),
                "layer": totals["layer"].fillna(NO_LAYER).astype(np.int64).to_numpy(),
                "tensor": totals["name"].to_numpy(object),
                "count": totals["graphs"].to_numpy(np.int64),  # node events
                "duration": totals["time_ns"].to_numpy(np.int64),
                "wait": totals["wait_ns"].fillna(0).to_numpy(np.int64),
                "bytes": (written * totals["graphs"]).to_numpy(np.int64),
                "timed": totals["timed"].to_numpy(np.int64),
                "clock": totals["clock"].to_numpy(object),
            }
        )
        total_time = int(frame["duration"].sum())
        total_bytes = int(frame["bytes"].sum())

        def table(key: str) -> list[Any]:  # rows of OpStats, LayerStats or TensorStats
            grouped = frame.groupby(key).agg(
                count=("count", "sum"), time_ns=("duration", "sum"), wait_ns=("wait", "sum"),
                bytes=("bytes", "sum"), timed=("timed", "sum"), clock=("clock", _clocks),
            )  # fmt: skip
            grouped["mean_ns"] = grouped["time_ns"] / grouped["timed"].where(grouped["timed"] > 0)
            grouped["time_share"] = grouped["time_ns"] / total_time if total_time else 0.0
            grouped["bytes_share"] = grouped["bytes"] / total_bytes if total_bytes else 0.0
            grouped = grouped.sort_values("time_ns", ascending=False).reset_index()
            if key == "layer":
                grouped["layer"] = grouped["layer"].map(lambda layer: "none" if layer == NO_LAYER else int(layer))
            return json_safe(records(grouped))

        by_op, by_layer, by_tensor = table("op"), table("layer"), table("tensor")
        return {
            "total_time_ns": total_time,
            "time_sources": time_sources(self, self.gpu),
            "by_op": by_op,
            "by_layer": by_layer,
            "by_tensor": by_tensor[:500],
            "findings": self.overview["summary"]["findings"],
            "sections": self.overview["summary"]["sections"],
            "activation_by_layer": self.activation_by_layer,
        }

    # -- event log -------------------------------------------------------------------

    def events(self, where: EventFilter, offset: int, limit: int) -> EventsPayload:
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
        return {"total": total, "offset": offset, "rows": self.event_rows(np.array(page, dtype=np.int64))}

    def _filtered(self, where: EventFilter) -> tuple[np.ndarray, np.ndarray, Any]:
        """For the graphs that may hold events passing `where`: how many do (per graph), the
        graphs' rows, and a function giving a graph row's passing event numbers."""
        if self._filter_cache is not None and self._filter_cache[0] == where:
            return self._filter_cache[1]
        tensor_ok = np.ones(len(self.tensor_op), dtype=bool)
        if where.op:
            tensor_ok &= np.isin(self.tensor_op, [code for code, op in enumerate(self.ops) if op == where.op.upper()])
        if where.name:
            names = self.tensors["name"].str.lower().str.contains(where.name.lower(), regex=False)
            named = np.zeros(len(self.tensor_op), dtype=bool)
            named[self.tensors.loc[names, "tensor_id"].to_numpy()] = True
            tensor_ok &= named
        readers = None
        if where.file_lo is not None and where.file_hi is not None:
            regions = self.run.memory_map
            weights = regions[(regions["kind"] == "tensor") & (regions["end"] > where.file_lo)
                              & (regions["start"] < where.file_hi)]  # fmt: skip
            readers = self._weight_readers(weights["name"])
        passing = self._passing_nodes(tensor_ok, where.layer, readers)
        structure = self.graphs["structure_id"].to_numpy()
        per_structure = np.bincount(self.structure["structure_id"].to_numpy(np.int64), weights=passing, minlength=1)
        rows = np.arange(len(self.graphs))
        timed_window = where.t0 is not None or where.t1 is not None
        t0 = where.t0 if where.t0 is not None else -(1 << 62)
        t1 = where.t1 if where.t1 is not None else 1 << 62
        if timed_window:  # graphs meeting the window; their events must be timed and meet it too
            start = self.graphs["start_ns"].to_numpy(np.int64) - self.origin_ns
            end = self.graphs["end_ns"].to_numpy(np.int64) - self.origin_ns
            rows = rows[(end > t0) & (start < t1)]

        def events_of(row: int) -> np.ndarray:
            first = int(self.graph_first_event[row])
            if not timed_window:
                nodes = np.flatnonzero(passing[self._structure_rows(structure[row])])
                return first + nodes
            events, start, end, *_ = self._chunk_events(row // EVENT_CHUNK_GRAPHS)
            mine = (events >= first) & (events < self.graph_first_event[row + 1]) & (end > t0) & (start < t1)
            events = events[mine]
            return events[passing[self._event_structure_node(events)]]

        counts = per_structure[structure[rows]] if not timed_window else np.array(
            [len(events_of(int(row))) for row in rows], dtype=np.int64)  # fmt: skip
        result: tuple[np.ndarray, np.ndarray, Any] = (counts.astype(np.int64), rows, events_of)
        self._filter_cache = (where, result)
        return result

    def _passing_nodes(self, tensor_ok: np.ndarray, layer: int | None, readers: pd.DataFrame | None) -> np.ndarray:
        """Per row of `structure` (a node of a structure): whether it passes the filters that
        depend on the node alone."""
        tensor = self.structure["tensor_id"].to_numpy()
        passing = tensor_ok[tensor] if len(tensor_ok) else np.zeros(len(tensor), dtype=bool)
        if layer is not None:
            passing &= self.structure["layer"].to_numpy() == layer
        if readers is not None:
            keys = _event_key(self.structure["structure_id"].to_numpy(np.int32),
                              self.structure["node_index"].to_numpy(np.int32))  # fmt: skip
            wanted = _event_key(readers["structure_id"].to_numpy(np.int32), readers["node_index"].to_numpy(np.int32))
            passing &= np.isin(keys, wanted)
        return passing

    def _structure_rows(self, structure_id: int) -> slice:
        """The rows of `structure` holding one structure's nodes (in node order)."""
        first = int(self.structure_first[structure_id])
        return slice(first, first + int(self.structure_size[structure_id]))

    def _event_structure_node(self, events: np.ndarray) -> np.ndarray:
        """Each event's row in `structure` (its structure's node)."""
        row = np.searchsorted(self.graph_first_event, events, side="right") - 1
        node = events - self.graph_first_event[row]
        first = self.structure_first.reindex(self.graphs["structure_id"].to_numpy()[row]).to_numpy(np.int64)
        return first + node

    def _weight_readers(self, names: Any) -> pd.DataFrame:
        """(structure_id, node_index, name) of each node that reads a weight of these names."""
        tensors = self.tensors.loc[self.tensors["name"].isin(names), ["tensor_id", "name"]]
        edges = self.run.raw("edges").merge(tensors, left_on="src_tensor_id", right_on="tensor_id")
        return edges[["structure_id", "node_index", "name"]].drop_duplicates()

    def weight_file_reads(self, events: np.ndarray) -> tuple[dict[str, list[int]], list[list[int]]]:
        """For an offline report's file-region filter: the file ranges of the weights the run
        reads ({"start", "end"}) and, per event, the indexes of those its node reads (the same
        rule as _reads_file_range)."""
        regions = self.run.memory_map
        weights = regions[regions["kind"] == "tensor"].reset_index(drop=True)
        index_of = {name: i for i, name in enumerate(weights["name"])}
        readers = self._weight_readers(weights["name"])
        by_node: dict[int, list[int]] = {}
        keys = _event_key(readers["structure_id"].to_numpy(np.int32), readers["node_index"].to_numpy(np.int32))
        for key, name in zip(keys.tolist(), readers["name"].tolist(), strict=True):
            by_node.setdefault(key, []).append(index_of[name])
        at = self._event_structure_node(np.asarray(events, dtype=np.int64))
        event_keys = _event_key(self.structure["structure_id"].to_numpy(np.int32)[at],
                                self.structure["node_index"].to_numpy(np.int32)[at]).tolist()  # fmt: skip
        ranges = {"start": weights["start"].astype(int).tolist(), "end": weights["end"].astype(int).tolist()}
        return ranges, [by_node.get(key, []) for key in event_keys]

    def event_row(self, event: int) -> EventRow:
        return self.event_rows(np.array([event], dtype=np.int64))[0]

    def event_rows(self, events: np.ndarray) -> list[EventRow]:
        """The event log's rows for these event numbers (in one pass)."""
        events = np.asarray(events, dtype=np.int64)
        at = self._event_structure_node(events)
        graph_row = np.searchsorted(self.graph_first_event, events, side="right") - 1
        tensor = self.structure["tensor_id"].to_numpy()[at]
        layer = self.structure["layer"].to_numpy()[at]
        node = self.structure["node_index"].to_numpy()[at]
        timed_events, start, end, _, _, wait = self._chunk_events_of(np.unique(graph_row))
        found = np.minimum(np.searchsorted(timed_events, events), max(len(timed_events) - 1, 0))
        timed = (timed_events[found] == events) if len(timed_events) else np.zeros(len(events), dtype=bool)
        described = self.tensors.set_index("tensor_id").reindex(tensor)
        rows: list[EventRow] = []
        for i, event in enumerate(events.tolist()):
            j, known = int(found[i]), bool(timed[i])
            rows.append({
                "event": event,
                "graph_id": int(self.graphs["graph_id"].iat[int(graph_row[i])]),
                "node_index": int(node[i]),
                "start_ns": int(start[j]) if known else None,
                "duration_ns": int(end[j] - start[j]) if known else None,
                "wait_ns": int(wait[j]) if known and wait[j] >= 0 else None,
                "op": self.ops[int(self.tensor_op[tensor[i]])] if len(self.tensor_op) else "",
                "name": str(self.tensor_names[tensor[i]]) if len(self.tensor_names) else "",
                "layer": None if layer[i] == NO_LAYER else int(layer[i]),
                "type": str(described["type"].iat[i]),
                "shape": _shape(*(described[f"ne{d}"].iat[i] for d in range(4))),
            })  # fmt: skip
        return rows


def json_safe(value: Any) -> Any:
    """`value` with every NaN or infinity as None (JSON has neither)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(item) for item in value]
    return value


def _clocks(clocks: pd.Series) -> str | None:
    """The clocks that timed a group of nodes: "host", "gpu", "host+gpu"; None: none."""
    found = sorted(set(clocks.dropna().tolist()), key=["host", "gpu"].index)
    return "+".join(found) or None


def _event_key(graph_or_structure: np.ndarray, node_index: np.ndarray) -> np.ndarray:
    return (graph_or_structure.astype(np.int64) << 32) | node_index.astype(np.int64)


def _no_bars() -> NodeBars:
    return _bars(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))


def _bars(events: np.ndarray, start: np.ndarray, end: np.ndarray, ops: np.ndarray) -> NodeBars:
    return {"start": start.tolist(), "end": end.tolist(), "op": ops.tolist(), "event": events.tolist()}


def _no_columns() -> PixelColumns:
    return {"px": [], "op": [], "fill": []}


def _shape(*dims: Any) -> str:
    sizes = [int(d) for d in dims]
    while len(sizes) > 1 and sizes[-1] == 1:
        sizes.pop()
    return "×".join(str(d) for d in sizes)


def _describe_tensor(tensor: pd.Series, buffer_names: dict[int, str]) -> dict[str, Any]:
    buffer = int(tensor["buffer_id"])
    return {
        "name": tensor["name"], "op": tensor["op"], "op_base": tensor["op_base"], "type": tensor["type"],
        "shape": _shape(tensor["ne0"], tensor["ne1"], tensor["ne2"], tensor["ne3"]), "nbytes": int(tensor["nbytes"]),
        "buffer": buffer_names.get(buffer) if buffer != NO_ID else None,
        "buffer_offset": None if tensor["buffer_offset"] == NO_ID else int(tensor["buffer_offset"]),
    }  # fmt: skip
