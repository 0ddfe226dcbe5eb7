"""One run opened for the viewer's views: its graphs, tensors and structures, a lane per context, the
numbering of node events, and the node times of the graphs in view, read a chunk of graphs at a time."""

from __future__ import annotations

import math
from functools import cached_property
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..analysis.breakdowns import backend_names
from ..runformat.reader import Run, open_run

EVENT_CHUNK_GRAPHS = 256  # graphs whose node times are read together
CHUNKS_KEPT = 32  # chunks of node times a context keeps


class RunContext:
    """One run, ready for the views: what is small is kept (graphs, tensor descriptions, each
    graph structure's nodes), and the run's node events are never built. A node event is
    numbered by its graph's first event plus its index in the graph, and its description
    comes from its structure. Times go to the browser in nanoseconds relative to the run's
    first graph (`origin_ns`)."""

    def __init__(self, run_id: str, path: Path) -> None:
        self.run_id = run_id
        self.path = path
        self.run: Run = open_run(path)
        self._chunks: dict[int, tuple[np.ndarray, ...]] = {}  # chunk_events, by chunk
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

    # -- graphs ----------------------------------------------------------------------

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
    def _graph_text_array(self) -> pa.Array:
        """Each graph's tokens' text, joined (in `graphs` order), as Arrow strings."""
        graphs = self.run.arrow("graphs")
        texts = pc.binary_join(graphs.column("token_texts"), "").fill_null("")
        order = pc.sort_indices(graphs.column("graph_id"))
        return cast(pa.Array, texts.take(order).combine_chunks())

    def graph_text(self, row: int) -> str:
        """The tokens' text of the graph at `row` of `graphs`."""
        return cast(str, self._graph_text_array[row].as_py())

    @cached_property
    def _graph_label_array(self) -> pa.Array:
        """graph_labels as Arrow strings."""
        texts = self._graph_text_array
        computes = self.run.structure_labels
        if not computes or not len(texts):
            return texts
        structures = pa.array(self.graphs["structure_id"].to_numpy(np.int64))
        known = pa.array(list(computes), pa.int64())
        labels = pc.take(pa.array(list(computes.values()), pa.string()), pc.index_in(structures, value_set=known))
        return cast(pa.Array, pc.if_else(pc.equal(texts, ""), labels.fill_null(""), texts))

    @cached_property
    def graph_labels(self) -> list[str]:
        """What to call each graph (in `graphs` order): its tokens' text, or for a graph without
        tokens (an encoder's, a plain program's) what it computes (Run.structure_labels)."""
        return cast(list[str], self._graph_label_array.to_pylist())

    def graph_labels_of(self, rows: np.ndarray) -> list[str]:
        """graph_labels of the graphs at `rows` of `graphs`."""
        if "graph_labels" in self.__dict__:
            labels = self.graph_labels
            return [labels[row] for row in rows.tolist()]
        return cast(list[str], self._graph_label_array.take(pa.array(rows, pa.int64())).to_pylist())

    # -- node events -----------------------------------------------------------------

    def event_index(self, graph_id: int, node_index: int) -> int | None:
        """The event number of a graph's node (None: no such node)."""
        row = int(self.graph_rows(np.array([graph_id]))[0])
        if row >= len(self.graphs) or int(self.graphs["graph_id"].iloc[row]) != graph_id:
            return None
        first, after = int(self.graph_first_event[row]), int(self.graph_first_event[row + 1])
        return first + node_index if 0 <= node_index < after - first else None

    def structure_rows(self, structure_id: int) -> slice:
        """The rows of `structure` holding one structure's nodes (in node order)."""
        first = int(self.structure_first[structure_id])
        return slice(first, first + int(self.structure_size[structure_id]))

    def event_structure_node(self, events: np.ndarray) -> np.ndarray:
        """Each event's row in `structure` (its structure's node)."""
        row = np.searchsorted(self.graph_first_event, events, side="right") - 1
        node = events - self.graph_first_event[row]
        first = self.structure_first.reindex(self.graphs["structure_id"].to_numpy()[row]).to_numpy(np.int64)
        return first + node

    # -- node times, a chunk of graphs at a time --------------------------------------

    def timed_events_of(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The timed node events of the graphs at `rows`: event numbers, start, end, op."""
        events, start, end, ops, row, _ = self.chunk_events_of(rows)
        keep = np.isin(row, rows)
        return events[keep], start[keep], end[keep], ops[keep]

    def chunk_events_of(self, rows: np.ndarray) -> tuple[np.ndarray, ...]:
        """chunk_events of every chunk holding one of the graph rows, joined."""
        parts = [self.chunk_events(chunk) for chunk in np.unique(rows // EVENT_CHUNK_GRAPHS).tolist()]
        if not parts:
            return tuple(np.zeros(0, np.int64) for _ in range(6))
        return tuple(np.concatenate(column) for column in zip(*parts, strict=True))

    def chunk_events_of_row(self, row: int) -> tuple[np.ndarray, ...]:
        """chunk_events of the chunk holding one graph row."""
        return self.chunk_events(row // EVENT_CHUNK_GRAPHS)

    def row_batches(self) -> list[np.ndarray]:
        """Every graph row, in batches of about a chunk (a pass over the run's node times)."""
        return np.array_split(np.arange(len(self.graphs)), max(1, len(self.graphs) // EVENT_CHUNK_GRAPHS))

    def chunk_events(self, chunk: int) -> tuple[np.ndarray, ...]:
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


def json_safe(value: Any) -> Any:
    """`value` with every NaN or infinity as None (JSON has neither)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(item) for item in value]
    return value


def shape_text(*dims: Any) -> str:
    """A tensor's shape as people write it (4×2), its trailing ones left out."""
    sizes = [int(d) for d in dims]
    while len(sizes) > 1 and sizes[-1] == 1:
        sizes.pop()
    return "×".join(str(d) for d in sizes)
