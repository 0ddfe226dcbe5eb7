"""The GPU timer in a recording: closed trace windows in, the run's GPU tables out.

A window names its computes by when they began and ended and in which context; the graphs the
run wrote are registered here by context and start (a graph read at its compute call begins when
the call began, or when its first split did where that split ran on a CPU backend: a little
later), so each compute finds its graph, the first of its context begun within it, and its
graph's structure, even when the window arrives before the graph (another context's, written later). What
cannot be matched by the end is written without a graph (-1) rather than dropped.
"""

from __future__ import annotations

import bisect
from collections import Counter, deque
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .attribution import Attribution, AttributionState, attribute
from .kernel_names import COPY_KINDS, demangle, kernel_function
from .records import KERNEL, KIND_NAMES, GpuWindow

# Graphs remembered for windows still to come (a window closes a few graphs after its own).
RECENT_GRAPHS = 1 << 14
# Windows waiting for a graph of theirs, at most.
PENDING_WINDOWS = 64


class GpuTimes:
    """Maps each window's kernels to nodes and appends the rows of gpu_kernels,
    gpu_node_times and gpu_graphs (`append(table, columns)`)."""

    def __init__(self, append: Callable[[str, Mapping[str, Any]], None]) -> None:
        self.append = append
        self.state = AttributionState()
        # per context, the recent graphs' starts (sorted) and their (graph_id, structure_id);
        # `written`: every remembered graph's (context, start), oldest first, to forget them
        self.graphs: dict[int, tuple[list[int], list[tuple[int, int]]]] = {}
        self.written: deque[tuple[int, int]] = deque()
        self.pending: list[GpuWindow] = []
        self.counts: Counter[str] = Counter()
        self.reasons: Counter[str] = Counter()
        self.clock = {"offset_ns": 0, "uncertainty_ns": 0}

    def graph_written(self, context_id: int, graph_id: int, structure_id: int, start_ns: int) -> None:
        starts, graphs = self.graphs.setdefault(context_id, ([], []))
        at = bisect.bisect_right(starts, start_ns)
        starts.insert(at, start_ns)
        graphs.insert(at, (graph_id, structure_id))
        self.written.append((context_id, start_ns))
        if len(self.written) > RECENT_GRAPHS:
            context, start = self.written.popleft()
            starts, graphs = self.graphs[context]
            at = bisect.bisect_left(starts, start)
            del starts[at], graphs[at]
        if self.pending:
            self._write_ready()

    def add_window(self, window: GpuWindow) -> None:
        self.counts["windows"] += 1
        self.counts["overhead_ns"] += window.overhead_ns
        self.counts["dropped_records"] += window.dropped
        self.counts["invalid_records"] += window.invalid
        self.reasons[window.reason] += 1
        if window.clock_offset_ns:
            self.clock = {"offset_ns": window.clock_offset_ns, "uncertainty_ns": window.clock_uncertainty_ns}
        self.pending.append(window)
        self._write_ready(force=len(self.pending) > PENDING_WINDOWS)

    def finish(self) -> None:
        """The recording ends: write every window, matched or not."""
        self._write_ready(force=True)

    def summary(self) -> dict[str, Any]:
        """For the manifest: what was traced and how well it mapped."""
        return {**dict(self.counts), "windows_by_reason": dict(self.reasons), "clock_offset": self.clock}

    # -- internals ------------------------------------------------------------------------

    def _graph_of(self, window: GpuWindow) -> tuple[np.ndarray, np.ndarray]:
        """Per compute, its graph and structure ((-1, -1): not written yet): the graph of its
        context that began when it did, or during it (a graph whose first split ran on a CPU
        backend begins when that split did, a little after the scheduler's call)."""
        computes = window.computes
        found = []
        for context, start, end in zip(
            computes["context_id"].tolist(), computes["start_ns"].tolist(), computes["end_ns"].tolist(), strict=True
        ):
            starts, graphs = self.graphs.get(context, ([], []))
            at = bisect.bisect_left(starts, start)  # the first graph of the context begun from then on
            found.append(graphs[at] if at < len(starts) and starts[at] <= end else (-1, -1))
        graph_ids = np.array([graph for graph, _ in found], dtype=np.int64)
        return graph_ids, np.array([structure for _, structure in found], dtype=np.int64)

    def _write_ready(self, force: bool = False) -> None:
        """Write, in order, the windows whose every compute found its graph (all: `force`)."""
        while self.pending:
            graph_ids, structures = self._graph_of(self.pending[0])
            if (graph_ids < 0).any() and not force:
                return
            window = self.pending.pop(0)
            attribution = attribute(window, structures, self.state)
            self._write(window, attribution, graph_ids)

    def _write(self, window: GpuWindow, attribution: Attribution, graph_of_compute: np.ndarray) -> None:
        activities = window.activities
        compute = attribution.compute
        graph = np.where(compute >= 0, graph_of_compute[np.maximum(compute, 0)], -1) if len(compute) else compute
        is_kernel = activities["kind"] == KERNEL
        names = [
            self.state.names.get(int(i), "?") if k == KERNEL else ""
            for i, k in zip(activities["name_id"].tolist(), activities["kind"].tolist(), strict=True)
        ]
        kernel = [
            kernel_function(n) if k == KERNEL else COPY_KINDS.get(c, KIND_NAMES.get(k, "?"))
            for n, k, c in zip(names, activities["kind"].tolist(), activities["copy_kind"].tolist(), strict=True)
        ]
        self.append(
            "gpu_kernels",
            {
                "graph_id": graph,
                "node_index": attribution.node,
                "group_end": attribution.group_end,
                "device": activities["device"],
                "stream": activities["stream"],
                "kind": [KIND_NAMES.get(k, "?") for k in activities["kind"].tolist()],
                "kernel": kernel,
                "name": [demangle(n) if n else "" for n in names],
                "start_ns": activities["start_ns"],
                "end_ns": activities["end_ns"],
                "busy_ns": attribution.busy_ns,
                "bytes": activities["bytes"].astype(np.int64),
                "correlation_id": activities["correlation_id"],
                "split": attribution.split,
            },
        )
        self.append("gpu_node_times", _node_rows(activities, attribution, graph))
        self.append("gpu_graphs", _graph_rows(activities, attribution, graph, graph_of_compute))
        traced = graph_of_compute[attribution.mapping != "none"]
        self.counts["traced_graphs"] += int((traced >= 0).sum())
        # each activity counted once: a kernel, or a copy (a memcpy or memset): a node's, a
        # transfer between splits, or neither (the program's own, outside its splits)
        mapped = attribution.node >= 0
        self.counts["kernels"] += int(is_kernel.sum())
        self.counts["attributed_kernels"] += int((is_kernel & mapped).sum())
        self.counts["copies"] += int((~is_kernel).sum())
        self.counts["attributed_copies"] += int((~is_kernel & mapped).sum())
        self.counts["transfers"] += int(attribution.transfer.sum())
        self.counts["unattributed_graphs"] += int((attribution.mapping == "unattributed").sum())
        self.counts["unmatched_computes"] += int((graph_of_compute < 0).sum())


def _group_first(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows sorted by key (not empty); where each group starts; each group's key."""
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    return order, starts, ordered[starts]


def _node_rows(activities: np.ndarray, attribution: Attribution, graph: np.ndarray) -> dict[str, Any]:
    """Per (graph, node, device) with kernels: their span on that GPU and share of its busy time
    (a node whose kernels ran on two devices has a row for each: one device's busy share and
    span are not the other's)."""
    rows = np.flatnonzero((attribution.node >= 0) & (graph >= 0))
    if not len(rows):
        return {}
    node_key = (graph[rows].astype(np.int64) << 32) | attribution.node[rows]
    device = activities["device"][rows].astype(np.int64)
    order = np.lexsort((device, node_key))
    rows, node_key, device = rows[order], node_key[order], device[order]
    starts = np.flatnonzero(np.concatenate(([True], (node_key[1:] != node_key[:-1]) | (device[1:] != device[:-1]))))
    keys = node_key[starts]
    return {
        "graph_id": keys >> 32,
        "node_index": keys & 0xFFFFFFFF,
        "group_end": attribution.group_end[rows][starts],
        "device": device[starts],
        "start_ns": np.minimum.reduceat(activities["start_ns"][rows], starts),
        "end_ns": np.maximum.reduceat(activities["end_ns"][rows], starts),
        "gpu_ns": np.add.reduceat(attribution.busy_ns[rows], starts),
        "kernels": np.diff(np.append(starts, len(rows))),
    }


def _graph_rows(
    activities: np.ndarray, attribution: Attribution, graph: np.ndarray, graph_of_compute: np.ndarray
) -> dict[str, Any]:
    """Per (graph, device): when the GPU worked on it, how busy, how its kernels mapped."""
    rows = np.flatnonzero(graph >= 0)
    if not len(rows):
        return {}
    key = (graph[rows].astype(np.int64) << 32) | activities["device"][rows].astype(np.int64)
    order, starts, keys = _group_first(key)
    rows = rows[order]
    is_kernel = activities["kind"][rows] == KERNEL
    mapping = dict(zip(graph_of_compute.tolist(), attribution.mapping.tolist(), strict=True))
    return {
        "graph_id": keys >> 32,
        "device": keys & 0xFFFFFFFF,
        "start_ns": np.minimum.reduceat(activities["start_ns"][rows], starts),
        "end_ns": np.maximum.reduceat(activities["end_ns"][rows], starts),
        "busy_ns": np.add.reduceat(attribution.busy_ns[rows], starts),
        "kernels": np.add.reduceat(is_kernel.astype(np.int64), starts),
        "attributed": np.add.reduceat((is_kernel & (attribution.node[rows] >= 0)).astype(np.int64), starts),
        "mapping": [mapping.get(graph_id, "none") for graph_id in (keys >> 32).tolist()],
    }
