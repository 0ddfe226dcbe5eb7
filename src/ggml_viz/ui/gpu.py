"""The viewer's GPU side: what a run's GPU tables (CUDA, from CUPTI's kernel records) add to
the timeline, the overview, the statistics and a node's details.

`gpu_kernels` holds every kernel, memcpy and memset of the traced graphs: millions in a
long run. It is read the way the host lane reads node times: in blocks (the Parquet row
groups of a closed run, slices of one being recorded), only the blocks whose span of GPU
time meets the timeline's window, the last few kept for panning. Once per view the table is
also streamed block by block into pieces (per graph, device and op: the span of those
kernels, their busy time and count), small enough to keep, which draw the windows holding
too many kernels to send (summed per pixel column, as the host lane does) and give the
overview its top kernels.

A kernel's op is its node's (the host lane's colors); the other kinds of activity get codes
below zero: UNATTRIBUTED (a kernel the recorder could not map to a node), MEMCPY, MEMSET.
Kernels outside the run's graphs (graph_id -1: work the program started between traced
calls) are left out: they belong to no graph's time. Times go to the browser relative to
the run's first graph, like the host lane's.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..analysis.summary import timing_label
from ..runformat.schema import PARQUET_SUFFIX
from .payloads import (
    GpuLane,
    GpuOverview,
    GpuStep,
    KernelBars,
    KernelTime,
    NodeGpuTime,
    PixelColumns,
    TimeSource,
    TracedSpans,
)

if TYPE_CHECKING:
    from .data import RunView

UNATTRIBUTED, MEMCPY, MEMSET = -1, -2, -3  # op codes of what is not a node's kernel
OTHER_CODES = 3  # codes below zero
BLOCK_ROWS = 1 << 17  # rows of a block of a run being recorded (a closed run's: its row groups)
BLOCKS_KEPT = 8  # decoded blocks a view keeps (a pan reuses them)
DETAIL_LIMIT = 4000  # as the host lane: a window with more kernels sums the narrow ones per pixel column
WINDOW_KERNEL_LIMIT = 400_000  # a window over more kernels is drawn from the pieces, without reading them
OVERVIEW_BINS = 16_384  # time bins of a lane's whole-run view (see _bins)
TOP_KERNELS = 12
SOURCE = "CUPTI kernel records"
_COLUMNS = ["graph_id", "node_index", "device", "kind", "kernel", "name", "start_ns", "end_ns", "busy_ns", "bytes"]


def device_name(device: int) -> str:
    """ggml-cuda names its devices by their CUDA ordinal, as CUPTI numbers them."""
    return f"CUDA{device}"


class GpuRun:
    """The GPU tables of one run, for one RunView (whose graphs, structures and ops it reads)."""

    def __init__(self, view: RunView) -> None:
        self.view = view
        self.run = view.run
        self.short_names: list[str] = []  # kernel functions (quantize_q8_1), by id
        self.full_names: list[str] = []  # the same kernels' whole demangled names
        self._name_ids: dict[tuple[str, str], int] = {}
        self._decoded: dict[int, dict[str, np.ndarray]] = {}  # blocks, the most recently used last
        graphs = self.run.gpu_graphs
        self.graphs = graphs[graphs["graph_id"].isin(view.graphs["graph_id"])].reset_index(drop=True)

    # -- reading kernels -------------------------------------------------------------------

    @cached_property
    def _source(self) -> tuple[pq.ParquetFile | None, pa.Table | None, list[tuple[float, float]]]:
        """Where the kernels are (a closed run's Parquet file, or the table as read) and each
        block's span of GPU time, relative to the run's first graph (from the row groups'
        statistics: no kernel is read to know it)."""
        origin = self.view.origin_ns
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
        view = self.view
        graph_id = table.column("graph_id").to_numpy().astype(np.int64)
        row = np.minimum(view.graph_rows(graph_id), max(len(view.graphs) - 1, 0))
        known = (graph_id >= 0) & (len(view.graphs) > 0)
        if len(view.graphs):
            known &= view.graphs["graph_id"].to_numpy()[row] == graph_id
        keep = np.flatnonzero(known)
        row, table = row[keep], table.take(pa.array(keep))
        node = table.column("node_index").to_numpy().astype(np.int64)
        n_nodes = view.graph_first_event[row + 1] - view.graph_first_event[row]
        attributed = (node >= 0) & (node < n_nodes)
        structure = view.graphs["structure_id"].to_numpy()[row]
        first = view.structure_first.reindex(structure).fillna(0).to_numpy(np.int64)
        at = np.where(attributed, first + node, 0)
        tensor = view.structure["tensor_id"].to_numpy()[at] if len(view.structure) else np.zeros(len(at), np.int64)
        op = np.where(attributed, view.tensor_op[tensor] if len(view.tensor_op) else 0, UNATTRIBUTED)
        kind = table.column("kind").cast(pa.string())
        is_copy, is_set = (pc.equal(kind, value).to_numpy(zero_copy_only=False) for value in ("memcpy", "memset"))
        op = np.where(is_copy, MEMCPY, np.where(is_set, MEMSET, op)).astype(np.int16)
        origin = view.origin_ns
        return {
            "start": table.column("start_ns").to_numpy().astype(np.int64) - origin,
            "end": table.column("end_ns").to_numpy().astype(np.int64) - origin,
            "busy": table.column("busy_ns").to_numpy().astype(np.int64),
            "bytes": table.column("bytes").to_numpy().astype(np.int64),
            "op": op,
            "event": np.where(attributed, view.graph_first_event[row] + node, -1),
            "graph_row": row,
            "context": view.graphs["context_id"].to_numpy(np.int64)[row],
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

    def _kernels_in(self, t0: float, t1: float) -> dict[str, np.ndarray]:
        """The kernels meeting [t0, t1), read from the blocks whose span meets it."""
        blocks = [self._block(i) for i, (lo, hi) in enumerate(self._source[2]) if hi >= t0 and lo <= t1]
        if not blocks:
            return {key: np.zeros(0, np.int64) for key in ("start", "end", "busy", "bytes", "op", "event",
                                                           "graph_row", "context", "device", "name")}  # fmt: skip
        kernels = {key: np.concatenate([block[key] for block in blocks]) for key in blocks[0]}
        s, e = kernels["start"], kernels["end"]
        meets = (e > t0) & (s < t1) | ((e == s) & (s >= t0) & (s < t1))
        return {key: values[meets] for key, values in kernels.items()}

    # -- the pieces: one pass --------------------------------------------------------------

    @cached_property
    def _scan(self) -> dict[str, Any]:
        """One pass over the kernels (block by block, bounded memory): the pieces, per graph,
        device and op code (their kernels' span, busy time and count), sorted by start; and
        per kernel function its count, busy time, time and kind."""
        pieces, kernels = [], []
        for block in self._blocks():
            frame = pd.DataFrame({key: block[key] for key in _PIECE_KEYS + ("start", "end", "busy", "name")})
            frame["count"] = 1
            frame["time"] = frame["end"] - frame["start"]
            pieces.append(_pieces(frame))
            kernels.append(frame.groupby(["name", "op"], as_index=False)[["count", "busy", "time"]].sum())
        joined = _pieces(pd.concat(pieces)) if pieces else pd.DataFrame(columns=[*_PIECE_KEYS, *_PIECE_SUMS])
        by_name = pd.concat(kernels).groupby(["name", "op"], as_index=False).sum() if kernels else pd.DataFrame(
            columns=["name", "op", "count", "busy", "time"])  # fmt: skip
        joined = joined.sort_values(["context", "device", "start"], ignore_index=True)
        return {"pieces": {column: joined[column].to_numpy(np.int64) for column in joined.columns},
                "kernels": by_name}  # fmt: skip

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
            lanes.append({
                "context_id": context, "device": device, "label": f"{device_name(device)} · GPU ({SOURCE})",
                "start": traced["start"][rows], "end": traced["end"][rows], "graph_id": traced["graph_id"][rows],
                "end_max": np.maximum.accumulate(traced["end"][rows]), "kernels": traced["kernels"][rows],
            })  # fmt: skip
        return lanes

    @cached_property
    def _traced(self) -> dict[str, np.ndarray]:
        """The traced graphs on each device (gpu_graphs), with their context; GPU times relative
        to the run's first graph."""
        graphs = self.graphs
        contexts = self.view.graphs.set_index("graph_id")["context_id"]
        return {"context": contexts.reindex(graphs["graph_id"]).to_numpy(np.int64),
                "device": graphs["device"].to_numpy(np.int64), "graph_id": graphs["graph_id"].to_numpy(np.int64),
                "start": graphs["start_ns"].to_numpy(np.int64) - self.view.origin_ns,
                "end": graphs["end_ns"].to_numpy(np.int64) - self.view.origin_ns,
                "kernels": graphs["kernels"].to_numpy(np.int64)}  # fmt: skip

    # -- the timeline ----------------------------------------------------------------------

    def timeline_lanes(self, t0: int, t1: int, width: int) -> dict[int, list[GpuLane]]:
        """Per context, its GPU lanes for the window [t0, t1) at `width` pixels: each kernel
        (DETAIL_LIMIT at most, the widest), or the narrow ones summed per pixel column, or
        for a window over more than WINDOW_KERNEL_LIMIT kernels the pieces summed so."""
        ns_per_px = (t1 - t0) / width
        in_window = []
        for lane in self.lanes:
            first = int(np.searchsorted(lane["end_max"], t0, side="right"))
            last = int(np.searchsorted(lane["start"], t1, side="left"))
            in_window.append(slice(first, max(first, last)))
        many = [int(lane["kernels"][graphs].sum()) > WINDOW_KERNEL_LIMIT
                for lane, graphs in zip(self.lanes, in_window, strict=True)]  # fmt: skip
        kernels = self._kernels_in(t0, t1) if not all(many) else None
        found: dict[int, list[GpuLane]] = {}
        for lane, graphs, wide_window in zip(self.lanes, in_window, many, strict=True):
            if wide_window or kernels is None:
                bars, columns = _no_kernels(), self._columns_of_pieces(lane, t0, t1, width, ns_per_px)
                names: list[int] = []
            else:
                mine = (kernels["context"] == lane["context_id"]) & (kernels["device"] == lane["device"])
                bars, columns, names = self._kernel_bars({k: v[mine] for k, v in kernels.items()}, t0, t1, width,
                                                         ns_per_px)  # fmt: skip
            # the traced graphs met: where the GPU was watched (elsewhere nothing was recorded)
            spans = lane["end"][graphs] > t0
            traced: TracedSpans = {"start": lane["start"][graphs][spans].tolist(),
                                   "end": lane["end"][graphs][spans].tolist(),
                                   "graph_id": lane["graph_id"][graphs][spans].tolist()}  # fmt: skip
            found.setdefault(lane["context_id"], []).append({
                "label": lane["label"], "device": lane["device"], "device_name": device_name(lane["device"]),
                "kernels": [self.short_names[i] for i in names], "names": [self.full_names[i] for i in names],
                "bars": bars, "columns": columns, "traced": traced,
            })  # fmt: skip
        return found

    def _kernel_bars(self, kernels: dict[str, np.ndarray], t0: int, t1: int, width: int, ns_per_px: float
                     ) -> tuple[KernelBars, PixelColumns, list[int]]:  # fmt: skip
        """A lane's kernels in the window: each its own bar, or (more than DETAIL_LIMIT) the
        widest DETAIL_LIMIT so and the rest summed per pixel column; and the names' ids the
        bars index (KernelBars.kernel)."""
        order = np.argsort(kernels["start"], kind="stable")
        kernels = {key: values[order] for key, values in kernels.items()}
        s, e = kernels["start"], kernels["end"]
        wide = np.ones(len(s), dtype=bool)
        columns = _no_columns()
        if len(s) > DETAIL_LIMIT:
            wide_index = np.sort(np.argsort(s - e, kind="stable")[:DETAIL_LIMIT])
            wide = np.zeros(len(s), dtype=bool)
            wide[wide_index[(e - s)[wide_index] >= 2 * ns_per_px]] = True
            # a column is as busy as the device was in it: the narrow kernels' busy time (overlap
            # counted once) spread over the columns each covers
            narrow = np.flatnonzero(~wide)
            column, pick, busy = spread(s[narrow], e[narrow], kernels["busy"][narrow], t0, t1, ns_per_px, width)
            columns = pixel_columns(column, kernels["op"][narrow][pick], busy, ns_per_px)
        names, name_index = np.unique(kernels["name"][wide], return_inverse=True)
        bars: KernelBars = {
            "start": s[wide].tolist(), "end": e[wide].tolist(), "busy": kernels["busy"][wide].tolist(),
            "op": kernels["op"][wide].tolist(), "event": kernels["event"][wide].tolist(),
            "kernel": name_index.tolist(), "bytes": kernels["bytes"][wide].tolist(),
        }  # fmt: skip
        return bars, columns, names.tolist()

    def _columns_of_pieces(self, lane: dict[str, Any], t0: int, t1: int, width: int, ns_per_px: float
                           ) -> PixelColumns:  # fmt: skip
        """A wide window's pixel columns from the pieces, each spread evenly over its span;
        a window wider than a few of the lane's OVERVIEW_BINS from those bins (computed once)."""
        bins = self._bins(lane)
        bin_ns = bins["bin_ns"]
        if ns_per_px >= 4 * bin_ns:
            first, last = int(max(t0, 0) // bin_ns), int(min(np.ceil(t1 / bin_ns), OVERVIEW_BINS))
            keep = (bins["bin"] >= first) & (bins["bin"] < last)
            column = np.clip(((bins["bin"][keep] * bin_ns - t0) / ns_per_px).astype(np.int64), 0, width - 1)
            return pixel_columns(column, bins["op"][keep], bins["busy"][keep], ns_per_px)
        pieces, rows = self._scan["pieces"], self._pieces_of(lane)
        first = int(np.searchsorted(lane["pieces_end_max"], t0, side="right"))
        rows = rows[first : max(first, int(np.searchsorted(pieces["start"][rows], t1, side="left")))]
        column, pick, busy = spread(pieces["start"][rows], pieces["end"][rows], pieces["busy"][rows], t0, t1,
                                    ns_per_px, width)  # fmt: skip
        return pixel_columns(column, pieces["op"][rows][pick], busy, ns_per_px)

    def _pieces_of(self, lane: dict[str, Any]) -> np.ndarray:
        """The rows of the pieces that are the lane's (sorted by start; the running maximum of
        their ends kept with the lane)."""
        if "pieces" not in lane:
            pieces = self._scan["pieces"]
            rows = np.flatnonzero((pieces["context"] == lane["context_id"]) & (pieces["device"] == lane["device"]))
            lane["pieces"] = rows
            lane["pieces_end_max"] = np.maximum.accumulate(pieces["end"][rows]) if len(rows) else pieces["end"][rows]
        return lane["pieces"]

    def _bins(self, lane: dict[str, Any]) -> dict[str, Any]:
        """The lane's whole run cut into OVERVIEW_BINS equal spans: each op code's busy time
        in each (sparse: only the bins with some)."""
        if "bins" not in lane:
            duration = self.view.duration_ns
            bin_ns = max(1.0, duration / OVERVIEW_BINS)
            pieces, rows = self._scan["pieces"], self._pieces_of(lane)
            column, pick, busy = spread(pieces["start"][rows], pieces["end"][rows], pieces["busy"][rows], 0,
                                        duration, bin_ns, OVERVIEW_BINS)  # fmt: skip
            key = column * (1 << 16) + (pieces["op"][rows][pick] + OTHER_CODES)
            keys, index = np.unique(key, return_inverse=True)
            lane["bins"] = {"bin_ns": bin_ns, "bin": keys >> 16, "op": (keys & 0xFFFF) - OTHER_CODES,
                            "busy": np.bincount(index, weights=busy, minlength=len(keys))}  # fmt: skip
        return lane["bins"]

    # -- overview, statistics, details -----------------------------------------------------

    @cached_property
    def devices(self) -> list[str]:
        return [device_name(int(d)) for d in sorted(set(self.graphs["device"].tolist()))]

    @cached_property
    def traced_graphs(self) -> int:
        return int(self.graphs["graph_id"].nunique())

    @cached_property
    def graphs_on_gpu(self) -> int:
        """Graphs of the contexts the GPU timer traced (the M of "N of M graphs traced")."""
        contexts = self.view.graphs.set_index("graph_id")["context_id"].reindex(self.graphs["graph_id"])
        return int(self.view.graphs["context_id"].isin(set(contexts.dropna().tolist())).sum())

    @cached_property
    def label(self) -> str:
        """Where GPU node times come from, in words."""
        return (f"GPU time ({', '.join(self.devices)}, {SOURCE}, {self.traced_graphs:,} of {self.graphs_on_gpu:,} "
                "graphs traced)")  # fmt: skip

    @cached_property
    def overview(self) -> GpuOverview:
        """Per device and phase, the median traced graph: its time on the host against the
        device's busy time; and the kernel functions taking most of the device's time."""
        graphs = self.graphs.assign(span_ns=self.graphs["end_ns"] - self.graphs["start_ns"])
        graphs["busy_share"] = graphs["busy_ns"] / graphs["host_ns"].where(graphs["host_ns"] > 0)
        steps: list[GpuStep] = []
        for (device, phase), group in graphs.groupby(["device", "phase"], sort=True):
            share = group["busy_share"].median()
            steps.append({
                "device": device_name(int(device)), "phase": str(phase), "graphs": int(group["graph_id"].nunique()),
                "host_ns": int(group["host_ns"].median()), "busy_ns": int(group["busy_ns"].median()),
                "span_ns": int(group["span_ns"].median()), "busy_share": None if pd.isna(share) else float(share),
            })  # fmt: skip
        steps.sort(key=lambda step: (step["phase"] != "decode", step["device"]))  # a decode step first
        kernels = self._scan["kernels"]
        is_kernel = kernels["op"] >= UNATTRIBUTED
        return {"label": self.label, "devices": self.devices, "source": SOURCE, "traced_graphs": self.traced_graphs,
                "graphs": self.graphs_on_gpu, "steps": steps, "top_kernels": self.top_kernels,
                "kernels": int(kernels.loc[is_kernel, "count"].sum()),
                "unattributed": int(kernels.loc[kernels["op"] == UNATTRIBUTED, "count"].sum()),
                "copies": int(kernels.loc[~is_kernel, "count"].sum())}  # fmt: skip

    @cached_property
    def top_kernels(self) -> list[KernelTime]:
        """The kernel functions (and copies) by the device's busy time they took."""
        kernels = self._scan["kernels"]
        if kernels.empty:
            return []
        kernels = kernels.assign(kernel=[self.short_names[int(i)] for i in kernels["name"]],
                                 kind=np.select([kernels["op"] == MEMCPY, kernels["op"] == MEMSET],
                                                ["memcpy", "memset"], "kernel"))  # fmt: skip
        by_kernel = kernels.groupby(["kernel", "kind"], as_index=False)[["count", "busy", "time"]].sum()
        total = max(int(by_kernel["busy"].sum()), 1)
        by_kernel = by_kernel.sort_values(["busy", "kernel"], ascending=[False, True]).head(TOP_KERNELS)
        return [
            {"kernel": row.kernel, "kind": row.kind, "count": int(row.count), "time_ns": int(row.busy),
             "share": int(row.busy) / total, "mean_ns": float(row.time) / max(int(row.count), 1)}
            for row in by_kernel.itertuples()
        ]  # fmt: skip

    def node_time(self, graph_id: int, node_index: int) -> NodeGpuTime | None:
        """A node's GPU time in a traced graph: its own kernels', or those of the fused group
        that computed it (whose first node carries them)."""
        import pyarrow.dataset as ds

        table = self.run.dataset("gpu_node_times").to_table(filter=ds.field("graph_id") == graph_id).to_pandas()
        carrying = table[(table["node_index"] <= node_index) & (table["group_end"] >= node_index)]
        if carrying.empty:
            return None
        row = carrying.sort_values("node_index").iloc[-1]
        origin = self.view.origin_ns
        return {"device": device_name(int(row["device"])), "node_index": int(row["node_index"]),
                "group_end": int(row["group_end"]), "start_ns": int(row["start_ns"]) - origin,
                "end_ns": int(row["end_ns"]) - origin, "gpu_ns": int(row["gpu_ns"]),
                "kernels": int(row["kernels"])}  # fmt: skip

    def graph_node_times(self, graph_id: int) -> dict[int, int]:
        """A traced graph's GPU time per node (the graph view's "time" where the host has none)."""
        import pyarrow.dataset as ds

        table = self.run.dataset("gpu_node_times").to_table(filter=ds.field("graph_id") == graph_id)
        return dict(zip(table.column("node_index").to_pylist(), table.column("gpu_ns").to_pylist(), strict=True))


def time_sources(view: RunView, gpu: GpuRun | None) -> list[TimeSource]:
    """Where the node times of the statistics come from: the host's clock, the GPU's, both."""
    totals = view.run.node_totals
    timing = (view.run.manifest.get("capture") or {}).get("timing")
    labels = {"host": f"timing {timing_label(timing)}" if timing else "host clock",
              "gpu": gpu.label if gpu is not None else "GPU time"}  # fmt: skip
    sources: list[TimeSource] = []
    for clock in ("host", "gpu"):
        rows = totals[totals["clock"] == clock]
        if len(rows):
            sources.append({"clock": clock, "label": labels[clock], "timed": int(rows["timed"].sum()),
                            "time_ns": int(rows["time_ns"].sum())})  # fmt: skip
    return sources


_PIECE_KEYS = ("graph_row", "context", "device", "op")
_PIECE_SUMS = {"start": "min", "end": "max", "busy": "sum", "count": "sum"}


def _pieces(kernels: pd.DataFrame) -> pd.DataFrame:
    """Kernels (or pieces) summed per graph, context, device and op code: their span, busy
    time and count."""
    return kernels.groupby(list(_PIECE_KEYS), as_index=False).agg(_PIECE_SUMS)


def _encoded(column: pa.ChunkedArray) -> pa.DictionaryArray:
    """A string column (dictionary-encoded or not) as one dictionary array."""
    return pc.dictionary_encode(column.cast(pa.string()).combine_chunks())


def spread(start: np.ndarray, end: np.ndarray, busy: np.ndarray, t0: float, t1: float, ns_per_px: float, width: int
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """Each span's busy time spread evenly over the pixel columns of [t0, t1) it covers (a
    span reaching out of the window: the part of its time inside): (column, the span's
    index, busy ns) per piece of it."""
    inside = np.flatnonzero((end > t0) & (start < t1) | ((end == start) & (start >= t0) & (start < t1)))
    length = np.maximum(end[inside] - start[inside], 1)
    start, end = np.maximum(start[inside], t0), np.minimum(end[inside], t1)
    busy = busy[inside] * (np.maximum(end - start, 1) / length)
    first = np.clip(((start - t0) / ns_per_px).astype(np.int64), 0, width - 1)
    last = np.clip(((np.maximum(end, start + 1) - 1 - t0) / ns_per_px).astype(np.int64), 0, width - 1)
    span = last - first + 1
    repeat = np.repeat(np.arange(len(start)), span)
    column = first[repeat] + (np.arange(len(repeat)) - np.repeat(np.cumsum(span) - span, span))
    return column, inside[repeat], (busy / span)[repeat]


def pixel_columns(column: np.ndarray, op: np.ndarray, busy_ns: np.ndarray, ns_per_px: float) -> PixelColumns:
    """Per pixel column with work in it: the op code that kept it busiest, and how busy it
    was (summed sparsely: a report's million-pixel window costs its kernels, not its width)."""
    if not len(column):
        return _no_columns()
    codes = 1 << 16
    keys, index = np.unique(column.astype(np.int64) * codes + (op.astype(np.int64) + OTHER_CODES), return_inverse=True)
    busy = np.bincount(index, weights=busy_ns, minlength=len(keys))
    px = keys // codes
    order = np.lexsort((busy, px))  # by column, then busy: each column's busiest last
    last = np.flatnonzero(np.append(px[order][1:] != px[order][:-1], True))
    columns, column_index = np.unique(px, return_inverse=True)
    total = np.bincount(column_index, weights=busy, minlength=len(columns))
    used = total > 0
    return {
        "px": columns[used].tolist(),
        "op": ((keys[order][last] % codes) - OTHER_CODES)[used].tolist(),
        "fill": np.minimum(total[used] / ns_per_px, 1.0).round(3).tolist(),
    }


def _no_kernels() -> KernelBars:
    return {"start": [], "end": [], "busy": [], "op": [], "event": [], "kernel": [], "bytes": []}


def _no_columns() -> PixelColumns:
    return {"px": [], "op": [], "fill": []}
