"""The run's GPU tables (CUDA: CUPTI's kernel records; Vulkan: the layer's timestamp queries) read for
the views, over the run context:
the kernels in blocks, their pieces, a lane per context and device, and each node's GPU time."""

from __future__ import annotations

from collections.abc import Iterator
from functools import cached_property
from typing import Any, cast

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..analysis.gpu import estimate_note, record_warnings
from ..runformat.schema import PARQUET_SUFFIX
from .context import RunContext
from .payloads import NodeGpuTime

UNATTRIBUTED, MEMCPY, MEMSET = -1, -2, -3  # op codes of what is not a node's kernel
OTHER_CODES = 3  # codes below zero
BLOCK_ROWS = 1 << 17  # rows of a block of a run being recorded (a closed run's: its row groups)
BLOCKS_KEPT = 8  # decoded blocks a view keeps (a pan reuses them)
_COLUMNS = ["graph_id", "node_index", "device", "kind", "kernel", "name", "start_ns", "end_ns", "busy_ns", "bytes"]


def gpu_of(context: RunContext) -> GpuRun | None:
    """The run's GPU side; None: the run has no GPU times."""
    run = context.run
    return GpuRun(context) if run.has_gpu_times or len(run.raw("gpu_graphs")) else None


class GpuRun:
    """The GPU tables of one run, for one run context (whose graphs, structures and ops it reads).

    `gpu_kernels` holds every kernel, memcpy and memset of the traced graphs: millions in a
    long run. It is read the way the host lane reads node times: in blocks (the Parquet row
    groups of a closed run, slices of one being recorded), only the blocks whose span of GPU
    time meets the timeline's window, the last few kept for panning. Once per view the table is
    also streamed block by block into pieces (per graph, device and op: the span of those
    kernels, their busy time and count), small enough to keep, which draw the windows holding
    too many kernels to send and give the overview its top kernels.

    A kernel's op is its node's (the host lane's colors); the other kinds of activity get codes
    below zero: UNATTRIBUTED (a kernel the recorder could not map to a node), MEMCPY, MEMSET.
    Kernels outside the run's graphs (graph_id -1: work the program started between traced
    calls) are left out: they belong to no graph's time. Times are relative to the run's first
    graph, like the host lane's.
    """

    def __init__(self, context: RunContext) -> None:
        self.context = context
        self.run = context.run
        self.short_names: list[str] = []  # kernel functions (quantize_q8_1), by id
        self.full_names: list[str] = []  # the same kernels' whole demangled names
        self._name_ids: dict[tuple[str, str], int] = {}
        self._decoded: dict[int, dict[str, np.ndarray]] = {}  # blocks, the most recently used last
        graphs = self.run.gpu_graphs
        self.graphs = graphs[graphs["graph_id"].isin(context.graphs["graph_id"])].reset_index(drop=True)

    # -- reading kernels -------------------------------------------------------------------

    @cached_property
    def _source(self) -> tuple[pq.ParquetFile | None, pa.Table | None, list[tuple[float, float]]]:
        """Where the kernels are (a closed run's Parquet file, or the table as read) and each
        block's span of GPU time, relative to the run's first graph (from the row groups'
        statistics: no kernel is read to know it)."""
        origin = self.context.origin_ns
        path = self.run.path / ("gpu_kernels" + PARQUET_SUFFIX)
        if path.exists():
            file = pq.ParquetFile(path, read_dictionary=["kind", "kernel", "name"])
            start = file.schema_arrow.get_field_index("start_ns")
            end = file.schema_arrow.get_field_index("end_ns")
            spans = []
            for index in range(file.metadata.num_row_groups):
                group = file.metadata.row_group(index)
                first, last = group.column(start).statistics, group.column(end).statistics
                known = first is not None and last is not None and first.has_min_max and last.has_min_max
                spans.append((first.min - origin, last.max - origin) if known else (-np.inf, np.inf))
            return file, None, spans
        table = self.run.arrow("gpu_kernels")
        spans = []
        for offset in range(0, table.num_rows, BLOCK_ROWS):
            block = table.slice(offset, BLOCK_ROWS)
            spans.append((pc.min(block["start_ns"]).as_py() - origin, pc.max(block["end_ns"]).as_py() - origin))
        return None, table, spans

    def _read_block(self, index: int) -> pa.Table:
        file, table, _ = self._source
        if file is not None:
            return file.read_row_group(index, columns=_COLUMNS)
        assert table is not None
        return table.slice(index * BLOCK_ROWS, BLOCK_ROWS).select(_COLUMNS)

    def _block(self, index: int) -> dict[str, np.ndarray]:
        """A block's kernels, decoded (see _decode); the last BLOCKS_KEPT are kept."""
        if index in self._decoded:
            self._decoded[index] = self._decoded.pop(index)
            return self._decoded[index]
        self._decoded[index] = self._decode(self._read_block(index))
        while len(self._decoded) > BLOCKS_KEPT:
            self._decoded.pop(next(iter(self._decoded)))
        return self._decoded[index]

    def _decode(self, table: pa.Table) -> dict[str, np.ndarray]:
        """Kernels as arrays, those of the run's graphs only: times relative to the run's
        first graph, each kernel's op code (its node's op, or one of the codes below zero),
        its node's event number (-1: none), its graph's context, and its names' id."""
        context = self.context
        graph_id = table.column("graph_id").to_numpy().astype(np.int64)
        row = np.minimum(context.graph_rows(graph_id), max(len(context.graphs) - 1, 0))
        known = (graph_id >= 0) & (len(context.graphs) > 0)
        if len(context.graphs):
            known &= context.graphs["graph_id"].to_numpy()[row] == graph_id
        keep = np.flatnonzero(known)
        row, table = row[keep], table.take(pa.array(keep))
        node = table.column("node_index").to_numpy().astype(np.int64)
        n_nodes = context.graph_first_event[row + 1] - context.graph_first_event[row]
        attributed = (node >= 0) & (node < n_nodes)
        structure = context.graphs["structure_id"].to_numpy()[row]
        first = context.structure_first.reindex(structure).fillna(0).to_numpy(np.int64)
        at = np.where(attributed, first + node, 0)
        tensor = (
            context.structure["tensor_id"].to_numpy()[at] if len(context.structure) else np.zeros(len(at), np.int64)
        )
        op = np.where(attributed, context.tensor_op[tensor] if len(context.tensor_op) else 0, UNATTRIBUTED)
        kind = table.column("kind").cast(pa.string())
        is_copy, is_set = (pc.equal(kind, value).to_numpy(zero_copy_only=False) for value in ("memcpy", "memset"))
        op = np.where(is_copy, MEMCPY, np.where(is_set, MEMSET, op)).astype(np.int16)
        origin = context.origin_ns
        return {
            "start": table.column("start_ns").to_numpy().astype(np.int64) - origin,
            "end": table.column("end_ns").to_numpy().astype(np.int64) - origin,
            "busy": table.column("busy_ns").to_numpy().astype(np.int64),
            "bytes": table.column("bytes").to_numpy().astype(np.int64),
            "op": op,
            "event": np.where(attributed, context.graph_first_event[row] + node, -1),
            "graph_row": row,
            "context": context.graphs["context_id"].to_numpy(np.int64)[row],
            "device": table.column("device").to_numpy().astype(np.int64),
            "name": self._name_codes(table.column("kernel"), table.column("name")),
        }

    def _name_codes(self, kernel: pa.ChunkedArray, name: pa.ChunkedArray) -> np.ndarray:
        """Each kernel's (function, whole name) as an id into short_names and full_names
        (the strings hashed by Arrow, each distinct pair looked up once)."""
        kernels, names = _encoded(kernel), _encoded(name)
        n_names = max(len(names.dictionary), 1)
        pairs = kernels.indices.to_numpy(zero_copy_only=False).astype(np.int64) * n_names
        pairs += names.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        distinct, index = np.unique(pairs, return_inverse=True)
        ids = np.empty(len(distinct), dtype=np.int32)
        for i, pair in enumerate(distinct.tolist()):
            key = (kernels.dictionary[pair // n_names].as_py(), names.dictionary[pair % n_names].as_py())
            if key not in self._name_ids:
                self._name_ids[key] = len(self.short_names)
                self.short_names.append(key[0])
                self.full_names.append(key[1])
            ids[i] = self._name_ids[key]
        return ids[index]

    def _blocks(self) -> Iterator[dict[str, np.ndarray]]:
        """Every block, decoded, one at a time (not kept: a pass over the run)."""
        for index in range(len(self._source[2])):
            yield self._decode(self._read_block(index))

    def kernels_in(self, t0: float, t1: float) -> dict[str, np.ndarray]:
        """The kernels meeting [t0, t1), read from the blocks whose span meets it."""
        blocks = [self._block(i) for i, (lo, hi) in enumerate(self._source[2]) if hi >= t0 and lo <= t1]
        if not blocks:
            return {
                key: np.zeros(0, np.int64)
                for key in ("start", "end", "busy", "bytes", "op", "event", "graph_row", "context", "device", "name")
            }
        kernels = {key: np.concatenate([block[key] for block in blocks]) for key in blocks[0]}
        s, e = kernels["start"], kernels["end"]
        meets = (e > t0) & (s < t1) | ((e == s) & (s >= t0) & (s < t1))
        return {key: values[meets] for key, values in kernels.items()}

    # -- the pieces: one pass --------------------------------------------------------------

    @cached_property
    def _scan(self) -> dict[str, Any]:
        """One pass over the kernels (block by block, bounded memory): the pieces, per graph,
        device and op code (their kernels' span, busy time and count), sorted by start; and
        per kernel function and op code its count, busy time, time and busy time over the run
        (kernel_totals)."""
        pieces, kernels = [], []
        weights = self._graph_row_weights
        for block in self._blocks():
            frame = pd.DataFrame({key: block[key] for key in _PIECE_KEYS + ("start", "end", "busy", "name")})
            frame["count"] = 1
            frame["time"] = frame["end"] - frame["start"]
            frame["estimated"] = frame["busy"] * weights[frame["graph_row"].to_numpy()]
            pieces.append(_pieces(frame))
            kernels.append(frame.groupby(["name", "op"], as_index=False)[["count", "busy", "time", "estimated"]].sum())
        joined = _pieces(pd.concat(pieces)) if pieces else pd.DataFrame(columns=[*_PIECE_KEYS, *_PIECE_SUMS])
        by_name = (
            pd.concat(kernels).groupby(["name", "op"], as_index=False).sum()
            if kernels
            else pd.DataFrame(columns=["name", "op", "count", "busy", "time", "estimated"])
        )
        by_name = by_name.rename(columns={"busy": "traced_busy", "estimated": "busy"})
        joined = joined.sort_values(["context", "device", "start"], ignore_index=True)
        return {"pieces": {column: joined[column].to_numpy(np.int64) for column in joined.columns}, "kernels": by_name}

    @property
    def pieces(self) -> dict[str, np.ndarray]:
        """The pieces (per graph, context, device and op code: span, busy time, count), sorted by
        context, device and start."""
        return cast(dict[str, np.ndarray], self._scan["pieces"])

    @property
    def kernel_totals(self) -> pd.DataFrame:
        """Per kernel function (names' id) and op code, in the traced graphs: count, time and busy
        time (`traced_busy`); and `busy`, the busy time over the run, estimated: each traced graph
        weighted by how many graphs of its phase and structure ran per traced one."""
        return cast(pd.DataFrame, self._scan["kernels"])

    @cached_property
    def _graph_row_weights(self) -> np.ndarray:
        """Per row of the context's graphs: its weight in estimates over the run
        (Run.gpu_graph_weights; 1 for a graph not traced, which has no kernels to weight)."""
        graph_ids = self.context.graphs["graph_id"]
        return self.run.gpu_graph_weights.reindex(graph_ids).fillna(1.0).to_numpy(np.float64)

    @cached_property
    def lanes(self) -> list[dict[str, Any]]:
        """A lane per (context, device) the traced graphs ran kernels on, with those graphs'
        spans on the device (by start; and the running maximum of ends, so that a window
        finds every graph reaching into it) and kernel counts, from gpu_graphs: a window
        knows how many kernels it holds without reading any."""
        traced = self._traced
        lanes = []
        for context, device in sorted(set(zip(traced["context"].tolist(), traced["device"].tolist(), strict=True))):
            rows = np.flatnonzero((traced["context"] == context) & (traced["device"] == device))
            rows = rows[np.argsort(traced["start"][rows], kind="stable")]
            lanes.append(
                {
                    "context_id": context,
                    "device": device,
                    "label": f"{self.device_name(device)} · GPU ({self.source})",
                    "start": traced["start"][rows],
                    "end": traced["end"][rows],
                    "graph_id": traced["graph_id"][rows],
                    "end_max": np.maximum.accumulate(traced["end"][rows]),
                    "kernels": traced["kernels"][rows],
                }
            )
        return lanes

    @cached_property
    def _traced(self) -> dict[str, np.ndarray]:
        """The traced graphs on each device (gpu_graphs), with their context; GPU times relative
        to the run's first graph."""
        graphs = self.graphs
        contexts = self.context.graphs.set_index("graph_id")["context_id"]
        return {
            "context": contexts.reindex(graphs["graph_id"]).to_numpy(np.int64),
            "device": graphs["device"].to_numpy(np.int64),
            "graph_id": graphs["graph_id"].to_numpy(np.int64),
            "start": graphs["start_ns"].to_numpy(np.int64) - self.context.origin_ns,
            "end": graphs["end_ns"].to_numpy(np.int64) - self.context.origin_ns,
            "kernels": graphs["kernels"].to_numpy(np.int64),
        }

    # -- what the overview, the statistics and a node's details say -------------------------

    @cached_property
    def devices(self) -> list[str]:
        return [self.device_name(int(d)) for d in sorted(set(self.graphs["device"].tolist()))]

    @property
    def source(self) -> str:
        """Where the GPU's times come from, in words ("CUPTI kernel records", "Vulkan timestamp queries")."""
        return self.run.gpu_timer.source

    def device_name(self, device: int) -> str:
        """A GPU device as ggml names it (CUDA0, Vulkan0)."""
        return self.run.gpu_timer.device_name(device)

    @cached_property
    def traced_graphs(self) -> int:
        return int(self.graphs["graph_id"].nunique())

    @cached_property
    def _graphs_of_traced_contexts(self) -> pd.DataFrame:
        contexts = self.context.graphs.set_index("graph_id")["context_id"].reindex(self.graphs["graph_id"])
        return self.context.graphs[self.context.graphs["context_id"].isin(set(contexts.dropna().tolist()))]

    @cached_property
    def graphs_on_gpu(self) -> int:
        """Graphs of the contexts the GPU timer traced (the M of "N of M graphs traced")."""
        return len(self._graphs_of_traced_contexts)

    @cached_property
    def label(self) -> str:
        """Where GPU node times come from, in words: how the times over the run are estimated
        from the traced graphs, and the records CUPTI could not keep, if any."""
        estimate = estimate_note(self._graphs_of_traced_contexts, self.graphs["graph_id"].unique().tolist())
        said = [
            f"GPU time ({', '.join(self.devices)}, {self.source}, {self.traced_graphs:,} of {self.graphs_on_gpu:,} "
            f"graphs traced), times over the run {estimate}"
        ]
        return ". ".join(said + self.warnings)

    @cached_property
    def warnings(self) -> list[str]:
        """Records CUPTI dropped or left without times (the manifest's counts), in words."""
        return record_warnings(self.run.manifest.get("gpu") or {}, self.run.gpu_timer.agent)

    def node_time(self, graph_id: int, node_index: int) -> NodeGpuTime | None:
        """A node's GPU time in a traced graph: its own kernels', or those of the fused group
        that computed it (whose first node carries them), on every device they ran on (a row
        each in gpu_node_times)."""
        import pyarrow.dataset as ds

        table = self.run.dataset("gpu_node_times").to_table(filter=ds.field("graph_id") == graph_id).to_pandas()
        carrying = table[(table["node_index"] <= node_index) & (table["group_end"] >= node_index)]
        if carrying.empty:
            return None
        rows = carrying[carrying["node_index"] == carrying["node_index"].max()]
        origin = self.context.origin_ns
        return {
            "device": ", ".join(self.device_name(int(d)) for d in sorted(rows["device"].unique())),
            "node_index": int(rows["node_index"].iloc[0]),
            "group_end": int(rows["group_end"].max()),
            "start_ns": int(rows["start_ns"].min()) - origin,
            "end_ns": int(rows["end_ns"].max()) - origin,
            "gpu_ns": int(rows["gpu_ns"].sum()),
            "kernels": int(rows["kernels"].sum()),
        }

    def graph_node_times(self, graph_id: int) -> dict[int, int]:
        """A traced graph's GPU time per node, on all its devices (the graph view's "time" where
        the host has none)."""
        import pyarrow.dataset as ds

        table = self.run.dataset("gpu_node_times").to_table(filter=ds.field("graph_id") == graph_id).to_pandas()
        per_node = table.groupby("node_index")["gpu_ns"].sum()
        return {int(node): int(time) for node, time in per_node.items()}


_PIECE_KEYS = ("graph_row", "context", "device", "op")
_PIECE_SUMS = {"start": "min", "end": "max", "busy": "sum", "count": "sum"}


def _pieces(kernels: pd.DataFrame) -> pd.DataFrame:
    """Kernels (or pieces) summed per graph, context, device and op code: their span, busy
    time and count."""
    return kernels.groupby(list(_PIECE_KEYS), as_index=False).agg(_PIECE_SUMS)


def _encoded(column: pa.ChunkedArray) -> pa.DictionaryArray:
    """A string column (dictionary-encoded or not) as one dictionary array."""
    return pc.dictionary_encode(column.cast(pa.string()).combine_chunks())
